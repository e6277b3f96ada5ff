//! Memory of the server: idle, per idle open stream, per buffered chunk.

use std::path::Path;
use std::time::Duration;

use serde::Serialize;
use serde_json::{Value, json};

use crate::server::{ServerProcess, ServerSetup, rss_bytes};

/// What the memory measurements found.
#[derive(Debug, Clone, Serialize)]
pub struct Memory {
    /// RSS of a freshly started server (mock backend, one lane).
    pub idle_rss_bytes: u64,
    /// RSS of the server alone, idle, with its model loaded in a runner process.
    pub idle_rss_with_runner_bytes: Option<u64>,
    /// RSS of that idle runner process (mock model).
    pub runner_idle_rss_bytes: Option<u64>,
    /// Idle open streams created for the per-stream figure.
    pub idle_streams: usize,
    /// RSS growth while they were open.
    pub idle_streams_rss_growth_bytes: Option<u64>,
    /// That growth per stream.
    pub bytes_per_idle_stream: Option<f64>,
    /// Chunks one unread stream buffered.
    pub buffered_chunks: u64,
    /// Their text, in bytes.
    pub buffered_text_bytes: u64,
    /// RSS growth while they were buffered.
    pub buffered_rss_growth_bytes: u64,
    /// (growth − text) per chunk.
    pub bytes_per_buffered_chunk_beyond_text: Option<f64>,
}

struct Rpc {
    http: reqwest::Client,
    url: String,
}

impl Rpc {
    fn new(server: &ServerProcess) -> Result<Self, String> {
        let addr = server.addr.ok_or("the server has no HTTP address")?;
        Ok(Self {
            http: reqwest::Client::new(),
            url: format!("http://{addr}/mcp"),
        })
    }

    async fn call(&self, method: &str, params: Value) -> Result<Value, String> {
        let body = json!({"jsonrpc": "2.0", "id": 1, "method": method, "params": params});
        let response: Value = self
            .http
            .post(&self.url)
            .json(&body)
            .send()
            .await
            .map_err(|e| format!("{method}: {e}"))?
            .json()
            .await
            .map_err(|e| format!("{method}: {e}"))?;
        match response.get("result") {
            Some(result) => Ok(result.clone()),
            None => Err(format!("{method} failed: {response}")),
        }
    }

    async fn start_stream(&self, prompt: &str, max_tokens: u32) -> Result<String, String> {
        let result = self
            .call(
                "run",
                json!({"prompt": prompt, "stream": true, "max_tokens": max_tokens}),
            )
            .await?;
        result["stream_id"]
            .as_str()
            .map(str::to_owned)
            .ok_or_else(|| format!("no stream id in {result}"))
    }

    async fn wait_state(&self, stream_id: &str, states: &[&str]) -> Result<Value, String> {
        loop {
            let status = self
                .call("stream_status", json!({"stream_id": stream_id}))
                .await?;
            if states.iter().any(|s| status["state"] == *s) {
                return Ok(status);
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }
}

async fn settled_rss(server: &ServerProcess) -> Result<u64, String> {
    // Let allocations from the last requests settle (and their tasks end).
    tokio::time::sleep(Duration::from_millis(300)).await;
    rss_bytes(server.pid()).ok_or_else(|| "cannot read the server's RSS".into())
}

/// Runs the three measurements, each on a fresh server.
pub async fn measure(
    binary: &Path,
    idle_streams: usize,
    buffered_tokens: u32,
) -> Result<Memory, String> {
    let start_with = |rate: f64, runner: &'static str| {
        ServerProcess::start(
            binary,
            &ServerSetup {
                rate,
                lanes: 1,
                timestamps: false,
                runner,
            },
            false,
        )
        .map_err(|e| format!("cannot start the server: {e}"))
    };
    let start = |rate: f64| start_with(rate, "thread");

    // The server alone, and its runner, with the model loaded in a runner.
    let with_runner = start_with(20.0, "process")?;
    let idle_rss_with_runner_bytes = Some(settled_rss(&with_runner).await?);
    let runner_idle_rss_bytes = crate::server::children(with_runner.pid())
        .into_iter()
        .filter_map(rss_bytes)
        .reduce(|a, b| a + b);
    drop(with_runner);

    // Idle, then with streams that wait in the queue behind one generation
    // that holds the model (one lane, as on the NPU).
    let server = start(20.0)?;
    let idle_rss_bytes = settled_rss(&server).await?;
    let (mut idle_growth, mut per_idle_stream) = (None, None);
    if idle_streams > 0 {
        let rpc = Rpc::new(&server)?;
        let blocker = rpc
            .start_stream("memory blocker @mock(length=1000000)", 1_000_000)
            .await?;
        rpc.wait_state(&blocker, &["active"]).await?;
        let before = settled_rss(&server).await?;
        let mut last = String::new();
        for i in 0..idle_streams {
            last = rpc.start_stream(&format!("idle stream {i}"), 64).await?;
        }
        let status = rpc
            .call("stream_status", json!({"stream_id": last}))
            .await?;
        if status["state"] != "queued" {
            return Err(format!("the idle streams are not waiting: {status}"));
        }
        let after = settled_rss(&server).await?;
        let growth = after.saturating_sub(before);
        idle_growth = Some(growth);
        per_idle_stream = Some(growth as f64 / idle_streams as f64);
    }
    drop(server);

    // One stream nobody reads: every chunk stays buffered.
    let (mut chunks, mut text_bytes, mut growth) = (0u64, 0u64, 0u64);
    if buffered_tokens > 0 {
        let server = start(0.0)?;
        let rpc = Rpc::new(&server)?;
        let before = settled_rss(&server).await?;
        let id = rpc
            .start_stream(
                &format!("buffered @mock(length={buffered_tokens})"),
                buffered_tokens,
            )
            .await?;
        rpc.wait_state(&id, &["finished", "error", "aborted"])
            .await
            .and_then(|status| match status["state"].as_str() {
                Some("finished") => Ok(()),
                _ => Err(format!("the buffered stream did not finish: {status}")),
            })?;
        let after = settled_rss(&server).await?;
        growth = after.saturating_sub(before);
        // Read it all now, to count its chunks and their text.
        let mut from_seq = 0u64;
        loop {
            let batch = rpc
                .call("run", json!({"stream_id": id, "from_seq": from_seq}))
                .await?;
            let list = batch["chunks"].as_array().cloned().unwrap_or_default();
            for chunk in &list {
                if chunk["end"] != true {
                    chunks += 1;
                    text_bytes += chunk["delta"].as_str().map_or(0, str::len) as u64;
                }
            }
            from_seq += list.len() as u64;
            if batch["has_more"] != true {
                break;
            }
        }
    }
    Ok(Memory {
        idle_rss_bytes,
        idle_rss_with_runner_bytes,
        runner_idle_rss_bytes,
        idle_streams,
        idle_streams_rss_growth_bytes: idle_growth,
        bytes_per_idle_stream: per_idle_stream,
        buffered_chunks: chunks,
        buffered_text_bytes: text_bytes,
        buffered_rss_growth_bytes: growth,
        bytes_per_buffered_chunk_beyond_text: (chunks > 0)
            .then(|| (growth as f64 - text_bytes as f64) / chunks as f64),
    })
}
