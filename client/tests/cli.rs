//! The `rkllm-client` command against the real server: API keys, a server
//! that is not running, and stdio mode keeping the server's logs out of
//! the text.

use std::io::{BufRead, BufReader};
use std::path::PathBuf;
use std::process::{Child, Command, Output, Stdio};

/// The program prefix of `RKLLM_E2E_RUNNER` (qemu for a cross build).
fn runner() -> Vec<String> {
    std::env::var("RKLLM_E2E_RUNNER")
        .unwrap_or_default()
        .split_whitespace()
        .map(str::to_owned)
        .collect()
}

fn command(program: PathBuf) -> Command {
    let mut words = runner();
    let mut command = if words.is_empty() {
        Command::new(program)
    } else {
        let mut command = Command::new(words.remove(0));
        command.args(words).arg(program);
        command
    };
    for (key, _) in std::env::vars() {
        if key.starts_with("RKLLM_") && key != "RKLLM_E2E_RUNNER" {
            command.env_remove(key);
        }
    }
    command
}

/// The server binary of this build (beside the client), built first if
/// this test runs on its own.
fn server_binary() -> PathBuf {
    let client = PathBuf::from(env!("CARGO_BIN_EXE_rkllm-client"));
    let server = client.with_file_name("rkllm-server");
    if !server.exists() {
        let status = Command::new(env!("CARGO"))
            .args(["build", "-p", "rkllm-server", "--bin", "rkllm-server"])
            .status()
            .expect("run cargo");
        assert!(status.success(), "cannot build the server");
    }
    server
}

struct Server {
    child: Child,
    addr: String,
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn start_server(args: &[&str]) -> Server {
    let mut child = command(server_binary())
        .args(["--listen", "127.0.0.1:0", "--mock-tokens-per-second", "0"])
        .args(args)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("start the server");
    let stderr = child.stderr.take().unwrap();
    let mut lines = BufReader::new(stderr).lines();
    let addr = lines
        .by_ref()
        .map_while(Result::ok)
        .find_map(|l| {
            l.strip_prefix("rkllm-server listening on http://")
                .map(str::to_owned)
        })
        .expect("the server listens");
    // Keep reading its log so that it never blocks on a full pipe.
    std::thread::spawn(move || lines.for_each(drop));
    Server { child, addr }
}

fn client(args: &[&str], env: &[(&str, &str)]) -> Output {
    command(PathBuf::from(env!("CARGO_BIN_EXE_rkllm-client")))
        .args(args)
        .envs(env.iter().copied())
        .stdin(Stdio::null())
        .output()
        .expect("run rkllm-client")
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

#[test]
fn an_api_key_is_sent_from_the_flag_or_the_variable_and_its_absence_is_explained() {
    let server = start_server(&["--api-key", "s3cret"]);
    let http = format!("http://{}/mcp", server.addr);
    let ws = format!("ws://{}/ws", server.addr);
    let prompt = "hello @mock(length=5)";

    let refused = client(&["run", prompt, "--url", &http], &[]);
    assert!(!refused.status.success());
    let stderr = text(&refused.stderr);
    assert!(
        stderr.contains("unauthorized") && stderr.contains("--api-key"),
        "{stderr}"
    );

    let wrong = client(&["run", prompt, "--url", &http, "--api-key", "nope"], &[]);
    assert!(!wrong.status.success());
    assert!(text(&wrong.stderr).contains("refused the API key"));

    for (args, env) in [
        (
            vec!["run", prompt, "--url", &http, "--api-key", "s3cret"],
            vec![],
        ),
        (
            vec!["run", prompt, "--url", &http, "--stream"],
            vec![("RKLLM_API_KEY", "s3cret")],
        ),
        (
            vec![
                "run",
                prompt,
                "--transport",
                "ws",
                "--url",
                &ws,
                "--stream",
                "--api-key",
                "s3cret",
            ],
            vec![],
        ),
    ] {
        let ok = client(&args, &env);
        assert!(ok.status.success(), "{args:?}: {}", text(&ok.stderr));
        assert!(!text(&ok.stdout).trim().is_empty(), "{args:?}");
    }
    let ws_refused = client(&["run", prompt, "--transport", "ws", "--url", &ws], &[]);
    assert!(!ws_refused.status.success());
    assert!(text(&ws_refused.stderr).contains("--api-key"));
}

#[test]
fn a_server_that_is_not_running_is_named_as_such() {
    // A port that was just free, below the kernel's range for ephemeral
    // ports, so that no server another test starts on port 0 can be given
    // it in between: nothing listens there.
    let port = (20_000..32_000)
        .find(|port| std::net::TcpListener::bind(("127.0.0.1", *port)).is_ok())
        .expect("a free port below the ephemeral range");
    let url = format!("http://127.0.0.1:{port}/mcp");
    let output = client(&["run", "hi", "--url", &url], &[]);
    assert!(!output.status.success());
    let stderr = text(&output.stderr);
    assert!(
        stderr.contains("connection refused") && stderr.contains("Is rkllm-server running"),
        "{stderr}"
    );
}

#[test]
fn in_stdio_mode_the_servers_logs_stay_out_of_the_output() {
    let server = server_binary();
    let mut spawn: Vec<String> = runner();
    spawn.push(server.to_string_lossy().into_owned());
    spawn.extend(
        [
            "--stdio",
            "--mock-tokens-per-second",
            "0",
            "--log-level",
            "info",
        ]
        .map(String::from),
    );
    let mut args: Vec<String> = ["run", "hello @mock(length=8)", "--stream", "--"]
        .map(String::from)
        .to_vec();
    args.extend(spawn.iter().cloned());
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let output = client(&args, &[]);
    assert!(output.status.success(), "{}", text(&output.stderr));
    let (stdout, stderr) = (text(&output.stdout), text(&output.stderr));
    assert!(!stdout.trim().is_empty());
    for log in [&stdout, &stderr] {
        assert!(!log.contains("INFO"), "server logs leaked: {log}");
    }

    // When the server fails, its last lines explain why.
    let mut failing = vec!["run", "hi", "--"];
    let runner = runner();
    failing.extend(runner.iter().map(String::as_str));
    let server = server.to_string_lossy().into_owned();
    failing.extend([server.as_str(), "--stdio", "--log-level", "loud"]);
    let output = client(&failing, &[]);
    assert!(!output.status.success());
    let stderr = text(&output.stderr);
    assert!(stderr.contains("--log-level"), "{stderr}");
}
