//! The benchmark's clients, one kind per transport. Each client runs
//! streams one after another until the deadline and records what it
//! received: tokens, the latency of every chunk (receipt time minus the
//! server's production stamp), and the time to the first chunk.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use futures_util::{SinkExt, StreamExt};
use serde::Deserialize;
use serde_json::{Value, json};
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};
use tokio::sync::{mpsc, oneshot};
use tokio::time::Instant;
use tokio_tungstenite::tungstenite::Message;

use crate::stats::monotonic_ns;

mod http_apis;
mod stdio;
use http_apis::{anthropic_stream, ollama_stream, openai_stream, responses_stream};
pub use stdio::StdioMux;

/// The transports the benchmark drives.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum, serde::Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Transport {
    /// WebSocket push (`run` with `stream: true` on `/ws`).
    Ws,
    /// HTTP polling without waiting (`run {stream_id, from_seq}`).
    Poll,
    /// HTTP long-polling (`run {stream_id, from_seq, wait_ms}`).
    LongPoll,
    /// MCP Streamable HTTP: `tools/call generate` answered with SSE.
    Mcp,
    /// OpenAI chat completions with `stream: true` (SSE).
    Openai,
    /// Anthropic messages with `stream: true` (named SSE events).
    Anthropic,
    /// The OpenAI Responses API with `stream: true` (SSE events).
    Responses,
    /// Ollama `/api/chat`, streamed as NDJSON.
    Ollama,
    /// JSON-RPC lines on the server's stdin and stdout.
    Stdio,
}

impl Transport {
    /// Every transport, in report order.
    pub const ALL: [Self; 9] = [
        Self::Ws,
        Self::Poll,
        Self::LongPoll,
        Self::Mcp,
        Self::Openai,
        Self::Anthropic,
        Self::Responses,
        Self::Ollama,
        Self::Stdio,
    ];

    /// Its name in reports and on the command line.
    pub fn name(self) -> &'static str {
        match self {
            Self::Ws => "ws",
            Self::Poll => "poll",
            Self::LongPoll => "long-poll",
            Self::Mcp => "mcp",
            Self::Openai => "openai",
            Self::Anthropic => "anthropic",
            Self::Responses => "responses",
            Self::Ollama => "ollama",
            Self::Stdio => "stdio",
        }
    }
}

/// What one client received.
#[derive(Debug, Default)]
pub struct Totals {
    /// Tokens of the streams that ended (`usage.completion_tokens`).
    pub tokens: u64,
    /// Streams that ended normally.
    pub streams: u64,
    /// Receipt minus production time of every text chunk, in ns.
    pub latencies_ns: Vec<u64>,
    /// Request sent to first text chunk received, per stream, in ns.
    pub ttft_ns: Vec<u64>,
    /// Failures (the first one is kept as an example).
    pub errors: u64,
    /// The first failure's message.
    pub first_error: Option<String>,
}

impl Totals {
    fn fail(&mut self, message: String) {
        self.errors += 1;
        self.first_error.get_or_insert(message);
    }

    /// Adds another client's totals.
    pub fn merge(&mut self, other: Self) {
        self.tokens += other.tokens;
        self.streams += other.streams;
        self.latencies_ns.extend(other.latencies_ns);
        self.ttft_ns.extend(other.ttft_ns);
        self.errors += other.errors;
        if self.first_error.is_none() {
            self.first_error = other.first_error;
        }
    }

    /// Records one text chunk received at `now`, from a stream started at `sent`.
    fn chunk(&mut self, sent: u64, now: u64, produced_ns: Option<u64>, first: &mut bool) {
        if std::mem::take(first) {
            self.ttft_ns.push(now.saturating_sub(sent));
        }
        if let Some(produced) = produced_ns {
            self.latencies_ns.push(now.saturating_sub(produced));
        }
    }
}

/// What every stream asks for.
#[derive(Debug, Clone, Copy)]
pub struct StreamSpec {
    /// Tokens per stream (the mock's length and `max_tokens`).
    pub tokens: u32,
    /// Pause between short polls that found nothing new.
    pub poll_interval: Duration,
}

impl StreamSpec {
    fn prompt(&self, client: usize, round: u64) -> String {
        format!(
            "benchmark client {client} round {round} @mock(length={})",
            self.tokens
        )
    }
}

/// A chunk as the benchmark reads it (the text itself is not needed).
#[derive(Debug, Deserialize)]
struct ChunkMsg {
    #[serde(default)]
    stream_id: Option<String>,
    #[serde(default)]
    end: bool,
    #[serde(default)]
    produced_ns: Option<u64>,
    #[serde(default)]
    finish_reason: Option<String>,
    #[serde(default)]
    usage: Option<UsageMsg>,
    #[serde(default)]
    error: Option<Value>,
}

#[derive(Debug, Deserialize)]
struct UsageMsg {
    completion_tokens: u64,
}

#[derive(Debug, Deserialize)]
struct ResultMsg {
    #[serde(default)]
    stream_id: Option<String>,
    #[serde(default)]
    chunks: Vec<ChunkMsg>,
    #[serde(default)]
    has_more: bool,
}

/// A JSON-RPC response or a pushed chunk.
#[derive(Debug, Deserialize)]
struct RpcMsg {
    #[serde(default)]
    id: Option<u64>,
    #[serde(default)]
    result: Option<ResultMsg>,
    #[serde(default)]
    error: Option<Value>,
    #[serde(default)]
    params: Option<ChunkMsg>,
}

fn run_request(id: u64, prompt: &str, tokens: u32) -> String {
    json!({"jsonrpc": "2.0", "id": id, "method": "run",
           "params": {"prompt": prompt, "stream": true, "max_tokens": tokens}})
    .to_string()
}

/// Ends a stream at its end chunk: its tokens count if it finished.
fn end_chunk(totals: &mut Totals, chunk: &ChunkMsg) {
    match (&chunk.error, chunk.finish_reason.as_deref(), &chunk.usage) {
        (None, Some("stop" | "length"), Some(usage)) => {
            totals.tokens += usage.completion_tokens;
            totals.streams += 1;
        }
        _ => totals.fail(format!(
            "stream ended with {:?}: {:?}",
            chunk.finish_reason, chunk.error
        )),
    }
}

/// A connected client, made before the clock starts.
#[derive(Debug)]
pub enum Client {
    /// Its own WebSocket connection.
    Ws(Box<WsConn>),
    /// HTTP requests on the shared pool, to this base URL.
    Http {
        /// Which HTTP transport.
        transport: Transport,
        /// The pool.
        http: reqwest::Client,
        /// `http://ADDR`.
        base: String,
    },
    /// Its streams on the one stdio connection.
    Stdio(Arc<StdioMux>),
}

/// A WebSocket connection.
pub type WsConn =
    tokio_tungstenite::WebSocketStream<tokio_tungstenite::MaybeTlsStream<tokio::net::TcpStream>>;

impl Client {
    /// Connects a client of `transport` (stdio clients share `mux`).
    pub async fn connect(
        transport: Transport,
        base: &str,
        http: &reqwest::Client,
        mux: Option<&Arc<StdioMux>>,
    ) -> Result<Self, String> {
        Ok(match transport {
            Transport::Ws => {
                let url = format!("{}/ws", base.replacen("http", "ws", 1));
                let (ws, _) = tokio_tungstenite::connect_async_with_config(url, None, true)
                    .await
                    .map_err(|e| format!("websocket connect: {e}"))?;
                Self::Ws(Box::new(ws))
            }
            Transport::Stdio => Self::Stdio(Arc::clone(mux.ok_or("no stdio connection")?)),
            _ => Self::Http {
                transport,
                http: http.clone(),
                base: base.to_owned(),
            },
        })
    }

    /// Runs streams one after another until `deadline`.
    pub async fn run(mut self, index: usize, spec: StreamSpec, deadline: Instant) -> Totals {
        let mut totals = Totals::default();
        let mut round = 0;
        while Instant::now() < deadline {
            let prompt = spec.prompt(index, round);
            round += 1;
            let outcome = match &mut self {
                Self::Ws(ws) => ws_stream(ws, round, &prompt, spec, &mut totals).await,
                Self::Stdio(mux) => mux.stream(&prompt, spec, &mut totals).await,
                Self::Http {
                    transport,
                    http,
                    base,
                } => match transport {
                    Transport::Poll | Transport::LongPoll => {
                        let wait = *transport == Transport::LongPoll;
                        poll_stream(http, base, wait, &prompt, spec, &mut totals).await
                    }
                    Transport::Mcp => {
                        mcp_stream(http, base, round, &prompt, spec, &mut totals).await
                    }
                    Transport::Ollama => {
                        ollama_stream(http, base, &prompt, spec, &mut totals).await
                    }
                    Transport::Anthropic => {
                        anthropic_stream(http, base, &prompt, spec, &mut totals).await
                    }
                    Transport::Responses => {
                        responses_stream(http, base, &prompt, spec, &mut totals).await
                    }
                    _ => openai_stream(http, base, &prompt, spec, &mut totals).await,
                },
            };
            if let Err(message) = outcome {
                totals.fail(message);
                break;
            }
        }
        totals
    }
}

async fn ws_stream(
    ws: &mut WsConn,
    id: u64,
    prompt: &str,
    spec: StreamSpec,
    totals: &mut Totals,
) -> Result<(), String> {
    let sent = monotonic_ns();
    ws.send(Message::text(run_request(id, prompt, spec.tokens)))
        .await
        .map_err(|e| format!("websocket send: {e}"))?;
    let mut first = true;
    loop {
        let message = ws
            .next()
            .await
            .ok_or("websocket closed")?
            .map_err(|e| format!("websocket receive: {e}"))?;
        let now = monotonic_ns();
        let Message::Text(text) = message else {
            continue;
        };
        let msg: RpcMsg =
            serde_json::from_str(&text).map_err(|e| format!("bad message {text}: {e}"))?;
        if let Some(error) = msg.error {
            return Err(format!("run failed: {error}"));
        }
        let Some(chunk) = msg.params else { continue };
        if chunk.end {
            end_chunk(totals, &chunk);
            return Ok(());
        }
        totals.chunk(sent, now, chunk.produced_ns, &mut first);
    }
}

/// Posts `body`; returns the parsed response and when its bytes arrived
/// (read before parsing, as every transport's clients do).
async fn post_json(
    http: &reqwest::Client,
    url: &str,
    body: String,
) -> Result<(RpcMsg, u64), String> {
    let response = http
        .post(url)
        .header("content-type", "application/json")
        .body(body)
        .send()
        .await
        .map_err(|e| format!("POST {url}: {e}"))?;
    let bytes = response
        .bytes()
        .await
        .map_err(|e| format!("POST {url}: {e}"))?;
    let arrived = monotonic_ns();
    let msg =
        serde_json::from_slice(&bytes).map_err(|e| format!("bad response from {url}: {e}"))?;
    Ok((msg, arrived))
}

async fn poll_stream(
    http: &reqwest::Client,
    base: &str,
    long: bool,
    prompt: &str,
    spec: StreamSpec,
    totals: &mut Totals,
) -> Result<(), String> {
    let url = format!("{base}/mcp");
    let sent = monotonic_ns();
    let (started, _) = post_json(http, &url, run_request(1, prompt, spec.tokens)).await?;
    let stream_id = started
        .result
        .and_then(|r| r.stream_id)
        .ok_or_else(|| format!("run failed: {:?}", started.error))?;
    let mut first = true;
    let mut from_seq = 0u64;
    loop {
        let mut params = json!({"stream_id": stream_id, "from_seq": from_seq});
        if long {
            params["wait_ms"] = json!(30_000);
        }
        let body = json!({"jsonrpc": "2.0", "id": 2, "method": "run", "params": params});
        let (msg, now) = post_json(http, &url, body.to_string()).await?;
        let result = msg
            .result
            .ok_or_else(|| format!("poll failed: {:?}", msg.error))?;
        from_seq += result.chunks.len() as u64;
        let found = !result.chunks.is_empty();
        for chunk in &result.chunks {
            if chunk.end {
                end_chunk(totals, chunk);
            } else {
                totals.chunk(sent, now, chunk.produced_ns, &mut first);
            }
        }
        if !result.has_more {
            return Ok(());
        }
        if !found && !long {
            tokio::time::sleep(spec.poll_interval).await;
        }
    }
}

/// Reads a body made of records ended by `separator`, calling `record`
/// with each record and the time its bytes arrived, until `record`
/// returns true or the body ends (an error: the stream was cut short).
async fn read_records(
    mut response: reqwest::Response,
    what: &str,
    separator: &[u8],
    mut record: impl FnMut(&[u8], u64) -> Result<bool, String>,
) -> Result<(), String> {
    let mut buffer: Vec<u8> = Vec::new();
    loop {
        let Some(bytes) = response
            .chunk()
            .await
            .map_err(|e| format!("{what} body: {e}"))?
        else {
            return Err(format!("the {what} body ended early"));
        };
        let now = monotonic_ns();
        buffer.extend_from_slice(&bytes);
        let mut start = 0;
        while let Some(at) = find(&buffer[start..], separator) {
            let done = record(&buffer[start..start + at], now)?;
            start += at + separator.len();
            if done {
                return Ok(());
            }
        }
        buffer.drain(..start);
    }
}

/// Reads an SSE body, calling `event` with each `data:` payload and the
/// time its bytes arrived, until `event` returns true or the body ends.
async fn read_sse(
    response: reqwest::Response,
    mut event: impl FnMut(&[u8], u64) -> Result<bool, String>,
) -> Result<(), String> {
    read_records(response, "SSE", b"\n\n", |block, now| {
        for line in block.split(|&b| b == b'\n') {
            if let Some(data) = line.strip_prefix(b"data:") {
                let data = data.strip_prefix(b" ").unwrap_or(data);
                if event(data, now)? {
                    return Ok(true);
                }
            }
        }
        Ok(false)
    })
    .await
}

fn find(haystack: &[u8], needle: &[u8]) -> Option<usize> {
    haystack.windows(needle.len()).position(|w| w == needle)
}

#[derive(Debug, Deserialize)]
struct McpMsg {
    #[serde(default)]
    params: Option<McpProgress>,
    #[serde(default)]
    result: Option<McpResult>,
    #[serde(default)]
    error: Option<Value>,
}

#[derive(Debug, Deserialize)]
struct McpProgress {
    #[serde(default, rename = "_meta")]
    meta: Option<McpMeta>,
}

#[derive(Debug, Deserialize)]
struct McpMeta {
    #[serde(default)]
    produced_ns: Option<u64>,
}

#[derive(Debug, Deserialize)]
struct McpResult {
    #[serde(default, rename = "isError")]
    is_error: bool,
    #[serde(default, rename = "structuredContent")]
    structured: Option<McpStructured>,
}

#[derive(Debug, Deserialize)]
struct McpStructured {
    usage: UsageMsg,
}

async fn mcp_stream(
    http: &reqwest::Client,
    base: &str,
    id: u64,
    prompt: &str,
    spec: StreamSpec,
    totals: &mut Totals,
) -> Result<(), String> {
    let body = json!({"jsonrpc": "2.0", "id": id, "method": "tools/call", "params": {
        "name": "generate", "arguments": {"prompt": prompt, "max_tokens": spec.tokens},
        "_meta": {"progressToken": id}}});
    let sent = monotonic_ns();
    let response = http
        .post(format!("{base}/mcp"))
        .header("content-type", "application/json")
        .header("accept", "application/json, text/event-stream")
        .body(body.to_string())
        .send()
        .await
        .map_err(|e| format!("MCP POST: {e}"))?;
    let mut first = true;
    read_sse(response, |data, now| {
        let msg: McpMsg =
            serde_json::from_slice(data).map_err(|e| format!("bad MCP event: {e}"))?;
        if let Some(error) = msg.error {
            return Err(format!("tools/call failed: {error}"));
        }
        if let Some(progress) = msg.params {
            let produced = progress.meta.and_then(|m| m.produced_ns);
            totals.chunk(sent, now, produced, &mut first);
            return Ok(false);
        }
        match msg.result {
            Some(McpResult {
                is_error: false,
                structured: Some(s),
            }) => {
                totals.tokens += s.usage.completion_tokens;
                totals.streams += 1;
                Ok(true)
            }
            other => Err(format!("tools/call ended with {other:?}")),
        }
    })
    .await
}
