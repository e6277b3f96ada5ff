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
    match run(kind, url, server, params, stream).await {
        Ok(()) => ExitCode::SUCCESS,
        Err(err) => {
            eprintln!("rkllm-client: {err}");
            ExitCode::FAILURE
        }
    }
}

async fn run(
    kind: TransportKind,
    url: Option<String>,
    server: Vec<String>,
    params: Value,
    stream: bool,
) -> Result<(), ClientError> {
    let mut client = match kind {
        TransportKind::Stdio => {
            let (program, args) = server.split_first().ok_or_else(|| {
                ClientError::Transport("stdio needs the server command after `--`".into())
            })?;
            Client::spawn(program, args, &[])?
        }
        TransportKind::Ws => {
            Client::connect_ws(url.as_deref().unwrap_or("ws://127.0.0.1:8080/ws")).await?
        }
        TransportKind::Http => Client::http(url.as_deref().unwrap_or("http://127.0.0.1:8080/mcp")),
    };
    client.initialize().await?;
    let result = if stream {
        stream_run(&mut client, kind, params).await
    } else {
        whole_run(&mut client, params).await
    };
    let closed = client.close().await;
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
