//! `rkllm-client`: run a prompt against rkllm-server and print the text,
//! token by token with `--stream`.
//!
//! ```text
//! rkllm-client run "Hello" --stream                          # HTTP, http://127.0.0.1:8080/mcp
//! rkllm-client run "Hello" --stream --transport ws           # WebSocket push
//! rkllm-client run "Hello" --stream -- rkllm-server --stdio  # spawn the server, stdio
//! ```

use std::io::Write;
use std::process::ExitCode;

use clap::{Parser, Subcommand, ValueEnum};
use rkllm_client::{Client, ClientError};
use serde_json::{Value, json};

#[derive(Debug, Parser)]
#[command(name = "rkllm-client", version, about = "Client for rkllm-server")]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
enum TransportKind {
    Stdio,
    Ws,
    Http,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Generate text for a prompt.
    Run {
        /// The prompt.
        prompt: String,
        /// Print tokens as they arrive.
        #[arg(long)]
        stream: bool,
        /// stdio (needs a server command after `--`), ws or http.
        #[arg(long, value_enum)]
        transport: Option<TransportKind>,
        /// Server URL (default http://127.0.0.1:8080/mcp, or ws://127.0.0.1:8080/ws).
        #[arg(long)]
        url: Option<String>,
        /// Cap on generated tokens.
        #[arg(long)]
        max_tokens: Option<u64>,
        /// Model name.
        #[arg(long)]
        model: Option<String>,
        /// API key, sent as `Authorization: Bearer KEY` (HTTP and WebSocket).
        #[arg(
            long,
            env = "RKLLM_API_KEY",
            value_name = "KEY",
            hide_env_values = true
        )]
        api_key: Option<String>,
        /// With stdio: show the server's own log lines as they come (by
        /// default they are kept aside and shown only if something fails).
        #[arg(long)]
        server_logs: bool,
        /// The server command to spawn for stdio.
        #[arg(last = true)]
        server: Vec<String>,
    },
}

#[tokio::main(flavor = "current_thread")]
async fn main() -> ExitCode {
    let Command::Run {
        prompt,
        stream,
        transport,
        url,
        max_tokens,
        model,
        api_key,
        server_logs,
        server,
    } = Cli::parse().command;
    let kind = transport.unwrap_or(if server.is_empty() {
        TransportKind::Http
    } else {
        TransportKind::Stdio
    });
    let mut params = json!({"prompt": prompt});
    if let Some(max_tokens) = max_tokens {
        params["max_tokens"] = json!(max_tokens);
    }
    if let Some(model) = model {
        params["model"] = json!(model);
    }
    let target = Target {
        kind,
        url,
        api_key,
        server,
        server_logs,
    };
    let shown = target.shown_url();
    let mut logs = Vec::new();
    match run(&target, params, stream, &mut logs).await {
        Ok(()) => ExitCode::SUCCESS,
        Err(err) => {
            eprintln!(
                "rkllm-client: {}",
                explain(&err, &shown, target.api_key.is_some())
            );
            if !logs.is_empty() {
                eprintln!("rkllm-client: the server's last log lines:");
                for line in logs {
                    eprintln!("  {line}");
                }
            }
            ExitCode::FAILURE
        }
    }
}

/// Where and how to reach the server.
struct Target {
    kind: TransportKind,
    url: Option<String>,
    api_key: Option<String>,
    server: Vec<String>,
    server_logs: bool,
}

impl Target {
    fn shown_url(&self) -> String {
        match self.kind {
            TransportKind::Stdio => self.server.join(" "),
            TransportKind::Ws => self.url.clone().unwrap_or_else(|| DEFAULT_WS.to_owned()),
            TransportKind::Http => self.url.clone().unwrap_or_else(|| DEFAULT_HTTP.to_owned()),
        }
    }
}

const DEFAULT_HTTP: &str = "http://127.0.0.1:8080/mcp";
const DEFAULT_WS: &str = "ws://127.0.0.1:8080/ws";

/// The error in words that say what to do.
fn explain(err: &ClientError, server: &str, sent_key: bool) -> String {
    if err.is_unauthorized() {
        return if sent_key {
            format!(
                "unauthorized: {server} refused the API key; check --api-key (or RKLLM_API_KEY)"
            )
        } else {
            format!(
                "unauthorized: {server} needs an API key: pass --api-key KEY or set RKLLM_API_KEY"
            )
        };
    }
    if err.is_connection_refused() {
        return format!(
            "cannot connect to {server}: connection refused. Is rkllm-server running there? \
             Start it with `rkllm-server`, or pass --url"
        );
    }
    err.to_string()
}

/// Runs the request; on failure, `logs` gets the last lines a quiet stdio
/// server wrote.
async fn run(
    target: &Target,
    params: Value,
    stream: bool,
    logs: &mut Vec<String>,
) -> Result<(), ClientError> {
    let key = target.api_key.as_deref();
    let mut client = match target.kind {
        TransportKind::Stdio => {
            let (program, args) = target.server.split_first().ok_or_else(|| {
                ClientError::Transport("stdio needs the server command after `--`".into())
            })?;
            if target.server_logs {
                Client::spawn(program, args, &[])?
            } else {
                Client::spawn_quiet(program, args, &[])?
            }
        }
        TransportKind::Ws => {
            Client::connect_ws_with_key(target.url.as_deref().unwrap_or(DEFAULT_WS), key).await?
        }
        TransportKind::Http => {
            Client::http_with_key(target.url.as_deref().unwrap_or(DEFAULT_HTTP), key)
        }
    };
    let result = match client.initialize().await {
        Ok(_) if stream => stream_run(&mut client, target.kind, params).await,
        Ok(_) => whole_run(&mut client, params).await,
        Err(err) => Err(err),
    };
    let closed = if result.is_err() {
        // The child's last lines are read once it is gone, so that those
        // it wrote as it failed are in.
        let (closed, tail) = client.close_with_stderr_tail().await;
        *logs = tail;
        closed
    } else {
        client.close().await
    };
    result?;
    closed.map(|_| ())
}

async fn whole_run(client: &mut Client, params: Value) -> Result<(), ClientError> {
    let result = client.request("run", params, |_| {}).await?;
    println!("{}", result["text"].as_str().unwrap_or_default());
    Ok(())
}

fn print_delta(chunk: &Value) {
    let mut out = std::io::stdout().lock();
    let _ = out.write_all(chunk["delta"].as_str().unwrap_or_default().as_bytes());
    let _ = out.flush();
}

/// Prints a stream's deltas; returns an error if it ended with one.
async fn stream_run(
    client: &mut Client,
    kind: TransportKind,
    mut params: Value,
) -> Result<(), ClientError> {
    params["stream"] = json!(true);
    let mut early = Vec::new();
    let started = client
        .request("run", params, |note| early.push(note.clone()))
        .await?;
    let stream_id = started["stream_id"].as_str().unwrap_or_default().to_owned();
    let mut end = None;
    if kind == TransportKind::Http {
        let mut from_seq = 0;
        while end.is_none() {
            let poll = json!({"stream_id": stream_id, "from_seq": from_seq, "wait_ms": 10000});
            let result = client.request("run", poll, |_| {}).await?;
            for chunk in result["chunks"].as_array().into_iter().flatten() {
                print_delta(chunk);
                from_seq = chunk["seq"].as_u64().unwrap_or(from_seq) + 1;
                if chunk["end"] == json!(true) {
                    end = Some(chunk.clone());
                }
            }
        }
    } else {
        let mut pending = early.into_iter();
        while end.is_none() {
            let note = match pending.next() {
                Some(note) => note,
                None => client.next_message().await?.ok_or_else(|| {
                    ClientError::Transport("the server closed the connection".into())
                })?,
            };
            let chunk = &note["params"];
            if note["method"] != "run" || chunk["stream_id"] != stream_id.as_str() {
                continue;
            }
            print_delta(chunk);
            if chunk["end"] == json!(true) {
                end = Some(chunk.clone());
            }
        }
    }
    println!();
    let end = end.unwrap_or_default();
    match end.get("error") {
        Some(error) => Err(ClientError::Rpc {
            code: error["code"].as_i64().unwrap_or(0),
            message: error["message"].as_str().unwrap_or_default().to_owned(),
            data: None,
        }),
        None => Ok(()),
    }
}
