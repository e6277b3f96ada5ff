//! The report: every run's figures, the memory figures, the machine, and
//! the targets of issue 7 with whether this run met them.

use std::fmt::Write as _;

use serde::Serialize;

use crate::clients::Transport;
use crate::memory::Memory;
use crate::stats::Summary;

/// One run's figures.
#[derive(Debug, Clone, Serialize)]
pub struct RunResult {
    /// `throughput` (unthrottled) or `paced`.
    pub part: &'static str,
    /// Where the mock model ran: `thread` or `process` (a runner).
    pub runner: &'static str,
    /// RSS of the runner processes at the end of the run.
    pub runner_rss_bytes: Option<u64>,
    /// The transport.
    pub transport: Transport,
    /// Concurrent streams (one client each).
    pub streams: usize,
    /// Tokens per second per stream; 0 = unthrottled.
    pub rate: f64,
    /// Tokens each stream asks for.
    pub tokens_per_stream: u32,
    /// From the first request to the last stream's end.
    pub seconds: f64,
    /// Streams that ended normally.
    pub streams_completed: u64,
    /// Tokens delivered in them.
    pub tokens: u64,
    /// Delivered tokens per second, all streams together.
    pub tokens_per_second: f64,
    /// The same per concurrent stream.
    pub tokens_per_second_per_stream: f64,
    /// Production (in the server) to receipt (in the client), per chunk.
    pub latency: Option<Summary>,
    /// Request sent to first chunk received, per stream.
    pub ttft: Option<Summary>,
    /// Server CPU time (user + system) per delivered token.
    pub cpu_us_per_token: Option<f64>,
    /// Server RSS at the end of the run.
    pub rss_bytes: Option<u64>,
    /// Clients that failed.
    pub errors: u64,
    /// The first failure.
    pub first_error: Option<String>,
}

impl RunResult {
    /// A progress line.
    pub fn one_line(&self) -> String {
        format!(
            "{:.0} tokens/s, latency p50 {} µs, p99 {} µs, TTFT p50 {} µs, CPU {} µs/token, {} errors",
            self.tokens_per_second,
            us(self.latency.map(|l| l.p50_us)),
            us(self.latency.map(|l| l.p99_us)),
            us(self.ttft.map(|l| l.p50_us)),
            us(self.cpu_us_per_token),
            self.errors
        )
    }
}

/// The machine the benchmark ran on.
#[derive(Debug, Clone, Serialize)]
pub struct Machine {
    /// CPU model from /proc/cpuinfo.
    pub cpu: String,
    /// CPUs this process may use.
    pub cpus: usize,
    /// Total memory.
    pub memory_bytes: u64,
    /// Kernel release.
    pub kernel: String,
    /// Architecture.
    pub arch: &'static str,
}

impl Machine {
    fn this() -> Self {
        let cpuinfo = std::fs::read_to_string("/proc/cpuinfo").unwrap_or_default();
        let cpu = cpuinfo
            .lines()
            .find(|l| l.starts_with("model name") || l.starts_with("Model"))
            .and_then(|l| l.split_once(':'))
            .map_or_else(|| "unknown".to_owned(), |(_, v)| v.trim().to_owned());
        let meminfo = std::fs::read_to_string("/proc/meminfo").unwrap_or_default();
        let memory_kib: u64 = meminfo
            .lines()
            .find(|l| l.starts_with("MemTotal:"))
            .and_then(|l| l.split_whitespace().nth(1))
            .and_then(|v| v.parse().ok())
            .unwrap_or(0);
        Self {
            cpu,
            cpus: std::thread::available_parallelism().map_or(1, usize::from),
            memory_bytes: memory_kib * 1024,
            kernel: rustix::system::uname()
                .release()
                .to_string_lossy()
                .into_owned(),
            arch: std::env::consts::ARCH,
        }
    }
}

/// A target of issue 7 and how this run did.
#[derive(Debug, Clone, Serialize)]
pub struct Goal {
    /// What is measured.
    pub name: String,
    /// The bound, in words.
    pub target: String,
    /// What this run measured, in the target's unit.
    pub measured: Option<f64>,
    /// Whether the bound was met (`None`: not measured in this run).
    pub met: Option<bool>,
}

/// The whole report.
#[derive(Debug, Clone, Serialize)]
pub struct Report {
    /// The command line.
    pub command: String,
    /// When the run started (Unix seconds).
    pub started_unix: u64,
    /// Where it ran.
    pub machine: Machine,
    /// Every run.
    pub results: Vec<RunResult>,
    /// The memory measurements.
    pub memory: Option<Memory>,
    /// The targets.
    pub targets: Vec<Goal>,
}

fn us(value: Option<f64>) -> String {
    value.map_or_else(|| "–".to_owned(), |v| format!("{v:.1}"))
}

fn mib(bytes: Option<u64>) -> String {
    bytes.map_or_else(
        || "–".to_owned(),
        |b| format!("{:.1}", b as f64 / 1048576.0),
    )
}

impl Report {
    /// An empty report for `command`.
    pub fn new(command: String) -> Self {
        Self {
            command,
            started_unix: std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map_or(0, |d| d.as_secs()),
            machine: Machine::this(),
            results: Vec::new(),
            memory: None,
            targets: Vec::new(),
        }
    }

    fn find(&self, part: &str, transport: Transport, streams: usize) -> Option<&RunResult> {
        self.find_in("thread", part, transport, streams)
    }

    fn find_in(
        &self,
        runner: &str,
        part: &str,
        transport: Transport,
        streams: usize,
    ) -> Option<&RunResult> {
        self.results.iter().find(|r| {
            r.runner == runner && r.part == part && r.transport == transport && r.streams == streams
        })
    }

    fn paced(&self, transport: Transport) -> Option<&RunResult> {
        self.results
            .iter()
            .find(|r| r.runner == "thread" && r.part == "paced" && r.transport == transport)
    }

    /// Fills in `targets` from the results.
    pub fn evaluate_targets(&mut self) {
        let mut goals = Vec::new();
        let mut at_least = |name: String, bound: f64, unit: &str, measured: Option<f64>| {
            goals.push(Goal {
                name,
                target: format!("≥ {bound} {unit}"),
                measured,
                met: measured.map(|m| m >= bound),
            });
        };
        for (transport, label) in [
            (Transport::Ws, "WebSocket"),
            (Transport::Openai, "OpenAI SSE"),
            (Transport::Ollama, "Ollama NDJSON"),
        ] {
            for (streams, bound) in [(1, 330_000.0), (100, 500_000.0)] {
                at_least(
                    format!("{label}, {streams} unthrottled stream(s): tokens/s in total"),
                    bound,
                    "tokens/s",
                    self.find("throughput", transport, streams)
                        .map(|r| r.tokens_per_second),
                );
            }
        }
        let mut at_most = |name: String, bound: f64, unit: &str, measured: Option<f64>| {
            goals.push(Goal {
                name,
                target: format!("≤ {bound} {unit}"),
                measured,
                met: measured.map(|m| m <= bound),
            });
        };
        let paced = |t| self.paced(t).and_then(|r| r.latency);
        let pace = self
            .results
            .iter()
            .find(|r| r.part == "paced")
            .map_or_else(String::new, |r| {
                format!(" ({} streams × {} tokens/s)", r.streams, r.rate)
            });
        at_most(
            format!("WebSocket latency p50{pace}"),
            100.0,
            "µs",
            paced(Transport::Ws).map(|l| l.p50_us),
        );
        at_most(
            format!("WebSocket latency p99{pace}"),
            1000.0,
            "µs",
            paced(Transport::Ws).map(|l| l.p99_us),
        );
        at_most(
            format!("HTTP long-poll latency p50{pace}"),
            300.0,
            "µs",
            paced(Transport::LongPoll).map(|l| l.p50_us),
        );
        at_most(
            format!("stdio latency p50{pace}"),
            100.0,
            "µs",
            paced(Transport::Stdio).map(|l| l.p50_us),
        );
        for (transport, label) in [
            (Transport::Ws, "WebSocket"),
            (Transport::Mcp, "MCP Streamable HTTP"),
            (Transport::Openai, "OpenAI SSE"),
            (Transport::Anthropic, "Anthropic SSE"),
            (Transport::Responses, "OpenAI Responses SSE"),
            (Transport::Ollama, "Ollama NDJSON"),
        ] {
            at_most(
                format!("Time to first token, {label}, 1 stream, no prefill: p50"),
                500.0,
                "µs",
                self.find("throughput", transport, 1)
                    .and_then(|r| r.ttft)
                    .map(|t| t.p50_us),
            );
        }
        let memory = self.memory.as_ref();
        at_most(
            "Idle server RSS (mock)".into(),
            10.0,
            "MiB",
            memory.map(|m| m.idle_rss_bytes as f64 / 1048576.0),
        );
        at_most(
            format!(
                "Memory per idle open stream ({} streams)",
                memory.map_or(0, |m| m.idle_streams)
            ),
            2048.0,
            "bytes",
            memory.and_then(|m| m.bytes_per_idle_stream),
        );
        at_most(
            "Memory per buffered chunk beyond its text".into(),
            48.0,
            "bytes",
            memory.and_then(|m| m.bytes_per_buffered_chunk_beyond_text),
        );
        let ws_cpu = self
            .find("throughput", Transport::Ws, 100)
            .or_else(|| self.find("throughput", Transport::Ws, 1))
            .and_then(|r| r.cpu_us_per_token.map(|c| (r.streams, c)));
        at_most(
            format!(
                "Server CPU per delivered token, WebSocket ({} streams)",
                ws_cpu.map_or(0, |(s, _)| s)
            ),
            10.0,
            "µs",
            ws_cpu.map(|(_, c)| c),
        );
        // The runner hop: the same WebSocket run with the model in a runner
        // process, against it in the server.
        let hop = |f: fn(&RunResult) -> Option<f64>| {
            let process = self.find_in("process", "throughput", Transport::Ws, 1)?;
            let thread = self.find("throughput", Transport::Ws, 1)?;
            Some(f(process)? - f(thread)?)
        };
        let cpu_hop = hop(|r| r.cpu_us_per_token);
        let ttft_hop = hop(|r| r.ttft.map(|t| t.p50_us));
        goals.push(Goal {
            name: "Runner hop: CPU per token added (WebSocket, 1 stream, server + runner)".into(),
            target: "≤ 5 µs".into(),
            measured: cpu_hop,
            met: cpu_hop.map(|v| v <= 5.0),
        });
        goals.push(Goal {
            name: "Runner hop: time to first token p50 added (WebSocket, 1 stream)".into(),
            target: "≤ 500 µs".into(),
            measured: ttft_hop,
            met: ttft_hop.map(|v| v <= 500.0),
        });
        let one = self
            .find_in("process", "throughput", Transport::Ws, 1)
            .map(|r| r.tokens_per_second);
        goals.push(Goal {
            name: "Runner path: tokens/s to one stream (WebSocket)".into(),
            target: "≥ 330000 tokens/s".into(),
            measured: one,
            met: one.map(|v| v >= 330_000.0),
        });
        let alone = memory.and_then(|m| m.idle_rss_with_runner_bytes);
        goals.push(Goal {
            name: "Idle server RSS with its model in a runner (server alone)".into(),
            target: "≤ 10 MiB".into(),
            measured: alone.map(|b| b as f64 / 1048576.0),
            met: alone.map(|b| b as f64 / 1048576.0 <= 10.0),
        });
        self.targets = goals;
    }

    /// The Markdown summary.
    pub fn markdown(&self) -> String {
        let mut out = String::new();
        let m = &self.machine;
        let _ = writeln!(
            out,
            "Machine: {} ({} CPUs available, {:.1} GiB, {}, Linux {}).\n",
            m.cpu,
            m.cpus,
            m.memory_bytes as f64 / (1u64 << 30) as f64,
            m.arch,
            m.kernel
        );
        let _ = writeln!(out, "Command: `{}`\n", self.command);
        for (part, title) in [("throughput", "Unthrottled mock"), ("paced", "Paced mock")] {
            let rows: Vec<&RunResult> = self.results.iter().filter(|r| r.part == part).collect();
            if rows.is_empty() {
                continue;
            }
            let _ = writeln!(
                out,
                "### {title} ({} tokens per stream{})\n",
                rows[0].tokens_per_stream,
                if rows[0].rate > 0.0 {
                    format!(", {} tokens/s each", rows[0].rate)
                } else {
                    String::new()
                }
            );
            out.push_str("| runner | transport | streams | tokens/s | per stream | latency p50 / p90 / p99 / max (µs) | TTFT p50 / p99 (µs) | CPU µs/token (server + runners) | server RSS MiB | runners RSS MiB | errors |\n");
            out.push_str("|---|---|---:|---:|---:|---|---|---:|---:|---:|---:|\n");
            for r in rows {
                let latency = r.latency.map_or_else(
                    || "–".to_owned(),
                    |l| {
                        format!(
                            "{:.0} / {:.0} / {:.0} / {:.0}",
                            l.p50_us, l.p90_us, l.p99_us, l.max_us
                        )
                    },
                );
                let ttft = r.ttft.map_or_else(
                    || "–".to_owned(),
                    |t| format!("{:.0} / {:.0}", t.p50_us, t.p99_us),
                );
                let _ = writeln!(
                    out,
                    "| {} | {} | {} | {:.0} | {:.0} | {} | {} | {} | {} | {} | {} |",
                    r.runner,
                    r.transport.name(),
                    r.streams,
                    r.tokens_per_second,
                    r.tokens_per_second_per_stream,
                    latency,
                    ttft,
                    us(r.cpu_us_per_token),
                    mib(r.rss_bytes),
                    mib(r.runner_rss_bytes),
                    r.errors
                );
            }
            out.push('\n');
        }
        if let Some(mem) = &self.memory {
            out.push_str("### Memory\n\n| measure | value |\n|---|---:|\n");
            let _ = writeln!(
                out,
                "| idle server RSS | {} MiB |",
                mib(Some(mem.idle_rss_bytes))
            );
            if let (Some(server), Some(runner)) =
                (mem.idle_rss_with_runner_bytes, mem.runner_idle_rss_bytes)
            {
                let _ = writeln!(
                    out,
                    "| idle, model loaded in a runner: server / runner RSS | {} / {} MiB |",
                    mib(Some(server)),
                    mib(Some(runner))
                );
            }
            if let Some(per) = mem.bytes_per_idle_stream {
                let _ = writeln!(
                    out,
                    "| {} idle open streams | +{} MiB, {per:.0} bytes each |",
                    mem.idle_streams,
                    mib(mem.idle_streams_rss_growth_bytes)
                );
            }
            if let Some(per) = mem.bytes_per_buffered_chunk_beyond_text {
                let _ = writeln!(
                    out,
                    "| {} buffered chunks ({} bytes of text) | +{} MiB, {per:.1} bytes each beyond its text |",
                    mem.buffered_chunks,
                    mem.buffered_text_bytes,
                    mib(Some(mem.buffered_rss_growth_bytes))
                );
            }
            out.push('\n');
        }
        out.push_str("### Targets\n\n| target | bound | measured | met |\n|---|---|---:|---|\n");
        for goal in &self.targets {
            let _ = writeln!(
                out,
                "| {} | {} | {} | {} |",
                goal.name,
                goal.target,
                goal.measured
                    .map_or_else(|| "not run".to_owned(), |v| format!("{v:.1}")),
                match goal.met {
                    Some(true) => "yes",
                    Some(false) => "**no**",
                    None => "–",
                }
            );
        }
        out
    }
}
