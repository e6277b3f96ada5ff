//! The server under test: started with a scenario's config (or an
//! already running one), and its memory and CPU time read from /proc.

use std::io::{BufRead, BufReader};
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, ChildStdout, Command, Stdio};
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Duration;

/// Settings that shape the server for one scenario.
#[derive(Debug, Clone, Copy)]
pub struct ServerSetup {
    /// Mock tokens per second per stream; 0 = unthrottled.
    pub rate: f64,
    /// Mock lanes: streams that generate at once.
    pub lanes: usize,
    /// Stamp chunks with their production time.
    pub timestamps: bool,
    /// Where the mock model runs: `thread` or `process`.
    pub runner: &'static str,
}

impl ServerSetup {
    /// The config file for this setup: the mock without prefill, limits
    /// wide enough for every scenario, logs at `warn`.
    pub fn config(&self) -> String {
        format!(
            r#"backend = "mock"
log_level = "warn"

[mock]
tokens_per_second = {rate:?}
prefill_ms = 0
lanes = {lanes}
runner = "{runner}"

[bench]
timestamps = {timestamps}

[limits]
max_tokens = 1000000
max_streams_per_connection = 100000

[streams]
max_streams = 100000
max_stream_bytes = 268435456
max_total_bytes = 1073741824

[engine]
queue_len = 100000
# Loaded before the first request and kept: load times are not measured.
preload = ["mock"]
keep_alive_secs = -1
"#,
            rate = self.rate,
            lanes = self.lanes,
            timestamps = self.timestamps,
            runner = self.runner,
        )
    }
}

/// A server process started by the benchmark; killed when dropped.
#[derive(Debug)]
pub struct ServerProcess {
    child: Child,
    dir: PathBuf,
    /// Where it serves HTTP and WebSocket (none for stdio).
    pub addr: Option<SocketAddr>,
    /// Its stdin and stdout, when it serves stdio.
    pub stdio: Option<(ChildStdin, ChildStdout)>,
}

impl ServerProcess {
    /// Starts `binary` with `setup`'s config; over stdio when `stdio`,
    /// else on a free loopback port.
    pub fn start(binary: &Path, setup: &ServerSetup, stdio: bool) -> std::io::Result<Self> {
        Self::start_with(binary, &setup.config(), &[], &[], stdio)
    }

    /// Starts `binary` with the config file `config`, more `args` and
    /// `env`; over stdio when `stdio`, else on a free loopback port.
    pub fn start_with(
        binary: &Path,
        config: &str,
        args: &[&std::ffi::OsStr],
        env: &[(&str, &std::ffi::OsStr)],
        stdio: bool,
    ) -> std::io::Result<Self> {
        static NEXT: AtomicU32 = AtomicU32::new(0);
        let dir = std::env::temp_dir().join(format!(
            "rkllm-bench-{}-{}",
            std::process::id(),
            NEXT.fetch_add(1, Ordering::Relaxed)
        ));
        std::fs::create_dir_all(&dir)?;
        let config_file = dir.join("config.toml");
        std::fs::write(&config_file, config)?;
        let mut command = Command::new(binary);
        command
            .arg("--config")
            .arg(&config_file)
            .args(args)
            .envs(env.iter().copied())
            .stderr(Stdio::piped());
        if stdio {
            command
                .arg("--stdio")
                .stdin(Stdio::piped())
                .stdout(Stdio::piped());
        } else {
            command
                .args(["--listen", "127.0.0.1:0"])
                .stdin(Stdio::null())
                .stdout(Stdio::null());
        }
        let mut child = command.spawn()?;
        let stderr = child.stderr.take().expect("stderr is piped");
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            let mut tx = Some(tx);
            for line in BufReader::new(stderr).lines().map_while(Result::ok) {
                if let Some(addr) = line.strip_prefix("rkllm-server listening on http://")
                    && let Some(tx) = tx.take()
                {
                    let _ = tx.send(addr.parse::<SocketAddr>().ok());
                } else if line.contains("ERROR") || line.contains("WARN") {
                    eprintln!("server: {line}");
                }
            }
        });
        let mut server = Self {
            stdio: None,
            addr: None,
            child,
            dir,
        };
        if stdio {
            let stdin = server.child.stdin.take().expect("stdin is piped");
            let stdout = server.child.stdout.take().expect("stdout is piped");
            server.stdio = Some((stdin, stdout));
        } else {
            let addr = rx
                .recv_timeout(Duration::from_secs(30))
                .ok()
                .flatten()
                .ok_or_else(|| std::io::Error::other("the server did not start listening"))?;
            server.addr = Some(addr);
        }
        Ok(server)
    }

    /// Its process id.
    pub fn pid(&self) -> u32 {
        self.child.id()
    }
}

impl Drop for ServerProcess {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// Resident memory of `pid`, in bytes (`VmRSS` of /proc/PID/status).
pub fn rss_bytes(pid: u32) -> Option<u64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    let line = status.lines().find(|l| l.starts_with("VmRSS:"))?;
    let kib: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kib * 1024)
}

/// The child processes of `pid` (its runners), from /proc.
pub fn children(pid: u32) -> Vec<u32> {
    let Ok(entries) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    entries
        .filter_map(|e| e.ok()?.file_name().to_str()?.parse::<u32>().ok())
        .filter(|&candidate| {
            std::fs::read_to_string(format!("/proc/{candidate}/stat"))
                .ok()
                .and_then(|stat| {
                    let rest = &stat[stat.rfind(')')? + 2..];
                    rest.split_whitespace().nth(1)?.parse::<u32>().ok()
                })
                == Some(pid)
        })
        .collect()
}

/// CPU time of `pid` and its living children (runner processes).
pub fn tree_cpu_ns(pid: u32) -> Option<u64> {
    let own = cpu_ns(pid)?;
    Some(own + children(pid).into_iter().filter_map(cpu_ns).sum::<u64>())
}

/// CPU time (user + system, all threads) `pid` has used, in nanoseconds
/// (fields 14 and 15 of /proc/PID/stat, in clock ticks).
pub fn cpu_ns(pid: u32) -> Option<u64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // The command name may hold spaces: fields are counted after its ')'.
    let rest = &stat[stat.rfind(')')? + 2..];
    let fields: Vec<&str> = rest.split_whitespace().collect();
    let utime: u64 = fields.get(11)?.parse().ok()?;
    let stime: u64 = fields.get(12)?.parse().ok()?;
    let ticks = rustix::param::clock_ticks_per_second();
    Some((utime + stime) * 1_000_000_000 / ticks)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn this_process_has_memory_and_cpu_time() {
        let pid = std::process::id();
        let rss = rss_bytes(pid).unwrap();
        assert!(rss > 1 << 20, "{rss}");
        let spin = std::time::Instant::now();
        let mut x = 0u64;
        while spin.elapsed() < Duration::from_millis(50) {
            x = x.wrapping_add(std::hint::black_box(1));
        }
        assert!(x > 0);
        assert!(cpu_ns(pid).unwrap() > 0);
    }

    #[test]
    fn the_config_is_the_mock_with_the_setup_s_pace_and_lanes() {
        let config = ServerSetup {
            rate: 50.0,
            lanes: 100,
            timestamps: true,
            runner: "process",
        }
        .config();
        assert!(config.contains("tokens_per_second = 50.0"), "{config}");
        assert!(config.contains("lanes = 100"), "{config}");
        assert!(config.contains("timestamps = true"), "{config}");
        assert!(config.contains("runner = \"process\""), "{config}");
    }
}
