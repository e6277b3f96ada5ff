//! `rkllm-bench`: throughput, latency, memory and CPU time per token of
//! rkllm-server, on every transport. See `docs/benchmarks.md`.
//!
//! It starts the server (the mock backend with parallel lanes, in
//! benchmark mode so that chunks carry their production time) once per
//! scenario, drives N concurrent clients, and writes a JSON report and a
//! Markdown summary. Nothing here asserts a timing: targets are reported.

mod clients;
mod conversations;
mod fakes;
mod memory;
mod picture;
mod prompt_cache;
mod report;
mod server;
mod stats;
mod vision;

use std::path::PathBuf;
use std::time::Duration;

use clap::Parser;
use tokio::time::Instant;

use clients::{Client, StdioMux, StreamSpec, Totals, Transport};
use report::{Report, RunResult};
use server::{ServerProcess, ServerSetup, children, rss_bytes, tree_cpu_ns};
use stats::Summary;

/// Benchmarks rkllm-server with the mock backend on every transport.
#[derive(Debug, Parser)]
#[command(name = "rkllm-bench", version)]
struct Args {
    /// The rkllm-server binary (default: the one beside this program).
    #[arg(long, value_name = "PATH")]
    server_bin: Option<PathBuf>,
    /// Drive a server that is already running at this address (http://HOST:PORT)
    /// instead of starting one per scenario; HTTP transports only. Start it
    /// with --bench-timestamps for latencies, and enough --mock-lanes.
    #[arg(long, value_name = "URL")]
    url: Option<String>,
    /// With --url: the server's process id, to read its memory and CPU time.
    #[arg(long, value_name = "PID", requires = "url")]
    pid: Option<u32>,
    /// Transports to drive.
    #[arg(long, value_enum, value_delimiter = ',', default_values_t = Transport::ALL)]
    transports: Vec<Transport>,
    /// Where the mock model runs: `thread` (in the server) and/or `process`
    /// (a runner process, the path the rkllm backend takes); each scenario
    /// runs once per choice, and the report compares them.
    #[arg(long, value_enum, value_delimiter = ',', default_values_t = [Runner::Thread])]
    runners: Vec<Runner>,
    /// Concurrent streams of the unthrottled runs.
    #[arg(long, value_delimiter = ',', default_values_t = [1, 10, 100, 1000])]
    streams: Vec<usize>,
    /// Seconds each unthrottled run starts new streams for.
    #[arg(long, default_value_t = 2.0)]
    duration: f64,
    /// Tokens per stream in the unthrottled runs.
    #[arg(long, default_value_t = 1000)]
    tokens: u32,
    /// Streams of the paced run (latency under a realistic load).
    #[arg(long, default_value_t = 100)]
    paced_streams: usize,
    /// Tokens per second of each stream in the paced run.
    #[arg(long, default_value_t = 50.0)]
    paced_rate: f64,
    /// Seconds the paced run starts new streams for.
    #[arg(long, default_value_t = 4.0)]
    paced_duration: f64,
    /// Tokens per stream in the paced run (default: two seconds' worth).
    #[arg(long)]
    paced_tokens: Option<u32>,
    /// Start every paced client at once, so that all streams' tokens come
    /// due at the same instants (by default client i starts i/N of a token
    /// interval late, as independent clients would).
    #[arg(long)]
    paced_aligned: bool,
    /// Idle open streams for the memory measurement (0: skip it).
    #[arg(long, default_value_t = 10_000)]
    idle_streams: usize,
    /// Tokens of the unread stream for the bytes-per-chunk measurement (0: skip it).
    #[arg(long, default_value_t = 1_000_000)]
    buffered_tokens: u32,
    /// Pause of a short-polling client after a poll that found nothing new.
    #[arg(long, default_value_t = 5)]
    poll_interval_ms: u64,
    /// Skip the unthrottled runs.
    #[arg(long)]
    no_throughput: bool,
    /// Skip the paced run.
    #[arg(long)]
    no_paced: bool,
    /// Measure only what one picture adds to a request to a vision model
    /// (the test doubles of both runtimes, built with `cc`).
    #[arg(long)]
    vision: bool,
    /// Requests of each kind (with and without a picture) for --vision.
    #[arg(long, default_value_t = 40)]
    vision_requests: usize,
    /// Measure only what a prompt-cache file saves of the time to first
    /// token (the test double of the runtime, built with `cc`).
    #[arg(long)]
    prompt_cache: bool,
    /// Measure only the time to first token of chats alternating on one
    /// model against the same chat alone, with and without conversation
    /// snapshots (the test double of the runtime, built with `cc`).
    #[arg(long)]
    conversations: bool,
    /// Where to write the JSON report.
    #[arg(long, value_name = "FILE", default_value = "bench-report.json")]
    json: PathBuf,
    /// Where to write the Markdown summary (default: standard output only).
    #[arg(long, value_name = "FILE")]
    markdown: Option<PathBuf>,
}

/// Where the server runs the mock model.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
enum Runner {
    /// On a worker thread of the server.
    Thread,
    /// In a runner process.
    Process,
}

impl Runner {
    fn name(self) -> &'static str {
        match self {
            Self::Thread => "thread",
            Self::Process => "process",
        }
    }
}

/// One run: a transport, a number of concurrent streams, a pace.
#[derive(Debug, Clone, Copy)]
struct Scenario {
    part: &'static str,
    runner: Runner,
    transport: Transport,
    streams: usize,
    rate: f64,
    tokens: u32,
    duration: Duration,
}

#[tokio::main]
async fn main() {
    let args = Args::parse();
    raise_open_file_limit();
    let binary = args
        .server_bin
        .clone()
        .unwrap_or_else(default_server_binary);
    if args.url.is_none() && !binary.exists() {
        eprintln!(
            "rkllm-bench: no server binary at {} (build it with `cargo build --release -p rkllm-server`, or pass --server-bin)",
            binary.display()
        );
        std::process::exit(2);
    }
    if args.conversations {
        eprintln!("rkllm-bench: alternating conversations");
        let result = conversations::measure(&binary).await;
        finish("conversations", result, |r| r.markdown(), &args.json);
    }
    if args.prompt_cache {
        eprintln!("rkllm-bench: prompt cache");
        let result = prompt_cache::measure(&binary, 10).await;
        finish("prompt cache", result, |r| r.markdown(), &args.json);
    }
    if args.vision {
        eprintln!("rkllm-bench: vision");
        match vision::measure(&binary, args.vision_requests.max(1)).await {
            Ok(result) => {
                let markdown = result.markdown();
                print!("{markdown}");
                let json = serde_json::to_string_pretty(&result).expect("report serialises");
                let written =
                    std::fs::write(&args.json, json + "\n").and_then(|()| match &args.markdown {
                        Some(path) => std::fs::write(path, &markdown),
                        None => Ok(()),
                    });
                if let Err(e) = written {
                    eprintln!("rkllm-bench: cannot write the report: {e}");
                    std::process::exit(1);
                }
                return;
            }
            Err(message) => {
                eprintln!("rkllm-bench: vision: {message}");
                std::process::exit(1);
            }
        }
    }
    let mut report = Report::new(std::env::args().collect::<Vec<_>>().join(" "));
    let poll_interval = Duration::from_millis(args.poll_interval_ms);
    let transports: Vec<Transport> = args
        .transports
        .iter()
        .copied()
        .filter(|t| args.url.is_none() || *t != Transport::Stdio)
        .collect();
    let mut scenarios = Vec::new();
    // With --url the server is what it is: one pass, named `thread`.
    let runners = if args.url.is_some() {
        vec![Runner::Thread]
    } else {
        args.runners.clone()
    };
    for &runner in &runners {
        if !args.no_throughput {
            for &transport in &transports {
                for &streams in &args.streams {
                    scenarios.push(Scenario {
                        part: "throughput",
                        runner,
                        transport,
                        streams,
                        rate: 0.0,
                        tokens: args.tokens,
                        duration: Duration::from_secs_f64(args.duration),
                    });
                }
            }
        }
        if !args.no_paced {
            for &transport in &transports {
                scenarios.push(Scenario {
                    part: "paced",
                    runner,
                    transport,
                    streams: args.paced_streams,
                    rate: args.paced_rate,
                    tokens: args
                        .paced_tokens
                        .unwrap_or((args.paced_rate * 2.0).ceil().max(1.0) as u32),
                    duration: Duration::from_secs_f64(args.paced_duration),
                });
            }
        }
    }
    for scenario in scenarios {
        eprintln!(
            "rkllm-bench: {} ({} runner) {} × {} streams{}",
            scenario.part,
            scenario.runner.name(),
            scenario.transport.name(),
            scenario.streams,
            if scenario.rate > 0.0 {
                format!(" at {} tokens/s", scenario.rate)
            } else {
                String::new()
            }
        );
        let result = match &args.url {
            Some(url) => {
                run_scenario(
                    scenario,
                    Target::Running(url.clone(), args.pid),
                    poll_interval,
                    args.paced_aligned,
                )
                .await
            }
            None => {
                run_scenario(
                    scenario,
                    Target::Start(binary.clone()),
                    poll_interval,
                    args.paced_aligned,
                )
                .await
            }
        };
        match result {
            Ok(result) => {
                eprintln!("  {}", result.one_line());
                report.results.push(result);
            }
            Err(message) => {
                eprintln!("rkllm-bench: {message}");
                std::process::exit(1);
            }
        }
    }
    if args.url.is_none() && (args.idle_streams > 0 || args.buffered_tokens > 0) {
        eprintln!("rkllm-bench: memory");
        match memory::measure(&binary, args.idle_streams, args.buffered_tokens).await {
            Ok(memory) => report.memory = Some(memory),
            Err(message) => {
                eprintln!("rkllm-bench: memory: {message}");
                std::process::exit(1);
            }
        }
    }
    report.evaluate_targets();
    let json = serde_json::to_string_pretty(&report).expect("report serialises");
    if let Err(e) = std::fs::write(&args.json, json + "\n") {
        eprintln!("rkllm-bench: cannot write {}: {e}", args.json.display());
        std::process::exit(1);
    }
    let markdown = report.markdown();
    print!("{markdown}");
    if let Some(path) = &args.markdown
        && let Err(e) = std::fs::write(path, &markdown)
    {
        eprintln!("rkllm-bench: cannot write {}: {e}", path.display());
        std::process::exit(1);
    }
}

/// Where the server runs.
enum Target {
    /// Start this binary for the scenario.
    Start(PathBuf),
    /// Use the server at this URL (with its pid, if known).
    Running(String, Option<u32>),
}

async fn run_scenario(
    scenario: Scenario,
    target: Target,
    poll_interval: Duration,
    aligned: bool,
) -> Result<RunResult, String> {
    let setup = ServerSetup {
        rate: scenario.rate,
        lanes: scenario.streams,
        timestamps: true,
        runner: scenario.runner.name(),
    };
    let stdio = scenario.transport == Transport::Stdio;
    let mut server = None;
    let mut pipes = None;
    let (base, pid) = match target {
        Target::Start(binary) => {
            let mut process = ServerProcess::start(&binary, &setup, stdio)
                .map_err(|e| format!("cannot start {}: {e}", binary.display()))?;
            let base = process
                .addr
                .map(|a| format!("http://{a}"))
                .unwrap_or_default();
            let pid = process.pid();
            pipes = process.stdio.take();
            server = Some(process);
            (base, Some(pid))
        }
        Target::Running(url, pid) => (url.trim_end_matches('/').to_owned(), pid),
    };
    let mux = pipes.map(|(stdin, stdout)| StdioMux::new(stdin, stdout));
    let http = reqwest::Client::builder()
        .timeout(Duration::from_secs(120))
        .build()
        .map_err(|e| format!("HTTP client: {e}"))?;
    let mut clients = Vec::with_capacity(scenario.streams);
    for _ in 0..scenario.streams {
        clients.push(Client::connect(scenario.transport, &base, &http, mux.as_ref()).await?);
    }
    let spec = StreamSpec {
        tokens: scenario.tokens,
        poll_interval,
    };
    // With runner processes their CPU time counts too.
    let cpu_before = pid.and_then(tree_cpu_ns);
    let started = Instant::now();
    let deadline = started + scenario.duration;
    // Paced clients start spread over one token interval unless asked to
    // start together: N clients started at once produce their tokens in
    // bursts of N, and the latency then measures the queueing of a burst.
    let spread = if scenario.rate > 0.0 && !aligned {
        Duration::from_secs_f64(1.0 / scenario.rate)
    } else {
        Duration::ZERO
    };
    let count = scenario.streams.max(1) as u32;
    let tasks: Vec<_> = clients
        .into_iter()
        .enumerate()
        .map(|(i, client)| {
            let offset = spread * i as u32 / count;
            tokio::spawn(async move {
                tokio::time::sleep(offset).await;
                client.run(i, spec, deadline).await
            })
        })
        .collect();
    let mut totals = Totals::default();
    for task in tasks {
        totals.merge(task.await.map_err(|e| format!("client task: {e}"))?);
    }
    let seconds = started.elapsed().as_secs_f64();
    let cpu = pid
        .and_then(tree_cpu_ns)
        .zip(cpu_before)
        .map(|(after, before)| after.saturating_sub(before));
    let rss = pid.and_then(rss_bytes);
    let runner_rss = pid.map(|pid| children(pid).iter().filter_map(|&c| rss_bytes(c)).sum());
    drop(server);
    let tokens_per_second = totals.tokens as f64 / seconds;
    Ok(RunResult {
        part: scenario.part,
        runner: scenario.runner.name(),
        runner_rss_bytes: runner_rss.filter(|_| scenario.runner == Runner::Process),
        transport: scenario.transport,
        streams: scenario.streams,
        rate: scenario.rate,
        tokens_per_stream: scenario.tokens,
        seconds,
        streams_completed: totals.streams,
        tokens: totals.tokens,
        tokens_per_second,
        tokens_per_second_per_stream: tokens_per_second / scenario.streams as f64,
        latency: Summary::of(totals.latencies_ns),
        ttft: Summary::of(totals.ttft_ns),
        cpu_us_per_token: cpu
            .filter(|_| totals.tokens > 0)
            .map(|ns| ns as f64 / 1000.0 / totals.tokens as f64),
        rss_bytes: rss,
        errors: totals.errors,
        first_error: totals.first_error,
    })
}

/// `rkllm-server` in the directory of this program (`target/release`).
fn default_server_binary() -> PathBuf {
    std::env::current_exe()
        .ok()
        .and_then(|exe| exe.parent().map(|dir| dir.join("rkllm-server")))
        .unwrap_or_else(|| PathBuf::from("rkllm-server"))
}

/// A thousand connections need more descriptors than the usual soft
/// limit of 1024; the server started from here inherits the raised limit.
fn raise_open_file_limit() {
    use rustix::process::{Resource, getrlimit, setrlimit};
    let mut limit = getrlimit(Resource::Nofile);
    if limit.current < limit.maximum {
        limit.current = limit.maximum;
        let _ = setrlimit(Resource::Nofile, limit);
    }
}

/// Ends a run of one measurement: prints its Markdown and writes its JSON
/// report to `json`, or says why it failed; exits.
fn finish<T: serde::Serialize>(
    what: &str,
    result: Result<T, String>,
    markdown: impl Fn(&T) -> String,
    json: &std::path::Path,
) -> ! {
    match result {
        Ok(result) => {
            print!("{}", markdown(&result));
            let _ = std::io::Write::flush(&mut std::io::stdout());
            let text = serde_json::to_string_pretty(&result).expect("report serialises");
            if let Err(e) = std::fs::write(json, text + "\n") {
                eprintln!("rkllm-bench: cannot write the report: {e}");
                std::process::exit(1);
            }
            std::process::exit(0);
        }
        Err(message) => {
            eprintln!("rkllm-bench: {what}: {message}");
            std::process::exit(1);
        }
    }
}
