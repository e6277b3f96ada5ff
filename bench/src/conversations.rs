//! `rkllm-bench --conversations`: the time to first token of chats that
//! alternate on one model, against the same chat alone.
//!
//! Starts the server on the rkllm backend with the test double of the
//! runtime (built here with `cc`), whose prefill takes 500 µs per prompt
//! byte not covered by a loaded prompt cache (about 2 ms a token at 4 bytes
//! a token; a board's NPU takes 6 to 10 ms) and which decodes at once. Each
//! user has an 8-turn chat, sent the way Open WebUI sends it: the whole
//! history every time, each message about 60 tokens (240 bytes), each
//! reply about 40 (the double's 160-byte answer), streamed through the
//! OpenAI API; the time to first token is the time to the first content of
//! the stream. The users take turns one request at a time (user 1's turn 1,
//! user 2's turn 1, …), so every turn of one user comes after another
//! user's. The same chat is also run alone.
//!
//! Four set-ups: the runtime's built-in template without snapshots (the
//! runtime keeps one chat's history; another chat in between sends the
//! whole conversation), the same with snapshots, the same with half a
//! second between a turn's answer and the next request (a person reading:
//! the NPU is idle, and a returning chat's snapshot is brought up to date
//! with its reply then), and the model's own chat template (every turn
//! sent whole, rendered) with snapshots. The updates made, those that
//! yielded to a request, and the NPU time each took come from the
//! server's metrics.

use std::net::SocketAddr;
use std::path::Path;
use std::time::{Duration, Instant};

use serde_json::{Value, json};

use crate::fakes::{build_fake_rkllm, p50_ms, scratch_dir, start_on_double, timed_call};

const TURNS: usize = 8;
const MESSAGE_BYTES: usize = 240;
const PREFILL_US_PER_BYTE: &str = "500";

/// A ChatML template, as a pulled Qwen model records.
const TEMPLATE: &str = "{% for m in messages %}<|im_start|>{{ m.role }}\n{{ m.content }}<|im_end|>\n\
{% endfor %}{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}";

/// One set-up's figures (milliseconds, medians over the users).
#[derive(Debug, Clone, serde::Serialize)]
pub struct SetupResult {
    pub setup: &'static str,
    /// Users alternating (1: alone).
    pub users: usize,
    /// Pause between an answer and the next request, in milliseconds.
    pub pause_ms: u64,
    pub ttft_turn1_ms: f64,
    pub ttft_turn4_ms: f64,
    pub ttft_turn8_ms: f64,
    /// Snapshot files and bytes kept at the end.
    pub snapshot_files: u64,
    pub snapshot_bytes: u64,
    /// Snapshots brought up to date while idle, and updates that yielded
    /// to a request.
    pub updates_done: u64,
    pub updates_yielded: u64,
    /// NPU time the updates took, per update made, in milliseconds.
    pub update_ms_each: f64,
}

/// The figures of every set-up.
#[derive(Debug, Clone, serde::Serialize)]
pub struct ConversationsResult {
    pub prefill_us_per_byte: u32,
    pub runs: Vec<SetupResult>,
}

impl ConversationsResult {
    /// The Markdown section of the report.
    pub fn markdown(&self) -> String {
        let mut out = String::from(
            "## Alternating conversations: time to first token\n\n\
             | set-up | users | turn 1 | turn 4 | turn 8 | turn 8 vs alone | snapshots kept | \
             updates made (yielded) | NPU time per update |\n\
             |---|---|---|---|---|---|---|---|---|\n",
        );
        for run in &self.runs {
            let alone = self
                .runs
                .iter()
                .find(|r| r.setup == run.setup && r.users == 1)
                .map_or(f64::NAN, |r| r.ttft_turn8_ms);
            let each = if run.updates_done > 0 {
                format!("{:.0} ms", run.update_ms_each)
            } else {
                "-".into()
            };
            out.push_str(&format!(
                "| {} | {} | {:.0} ms | {:.0} ms | {:.0} ms | {:.2}× | {} files, {} bytes | {} ({}) | {} |\n",
                run.setup,
                run.users,
                run.ttft_turn1_ms,
                run.ttft_turn4_ms,
                run.ttft_turn8_ms,
                run.ttft_turn8_ms / alone,
                run.snapshot_files,
                run.snapshot_bytes,
                run.updates_done,
                run.updates_yielded,
                each,
            ));
        }
        out
    }
}

/// A user's message of `turn`: about 240 bytes.
fn message(user: usize, turn: usize) -> String {
    let mut text = format!("User {user}, turn {turn}: ");
    while text.len() < MESSAGE_BYTES {
        text.push_str("tell me more about the board's NPU and its memory. ");
    }
    text.truncate(MESSAGE_BYTES);
    text
}

/// Streams one chat request; returns the time to its first content, in
/// milliseconds, and the answer.
async fn first_token_ms(
    http: &reqwest::Client,
    addr: SocketAddr,
    messages: &[Value],
) -> Result<(f64, String), String> {
    let started = Instant::now();
    let mut response = http
        .post(format!("http://{addr}/v1/chat/completions"))
        .json(&json!({"model": "chat", "messages": messages, "stream": true}))
        .send()
        .await
        .map_err(|e| e.to_string())?;
    if !response.status().is_success() {
        return Err(format!("the chat failed: {}", response.status()));
    }
    let mut first = None;
    let mut body = Vec::new();
    while let Some(chunk) = response.chunk().await.map_err(|e| e.to_string())? {
        body.extend_from_slice(&chunk);
        if first.is_none() && has_content(&body) {
            first = Some(started.elapsed().as_secs_f64() * 1000.0);
        }
    }
    let answer = String::from_utf8_lossy(&body)
        .lines()
        .filter_map(|l| l.strip_prefix("data: "))
        .filter_map(|d| serde_json::from_str::<Value>(d).ok())
        .filter_map(|v| {
            v["choices"][0]["delta"]["content"]
                .as_str()
                .map(str::to_owned)
        })
        .collect();
    Ok((first.ok_or("the stream had no content")?, answer))
}

/// Whether an SSE body holds a chunk with non-empty content.
fn has_content(body: &[u8]) -> bool {
    String::from_utf8_lossy(body)
        .lines()
        .filter_map(|l| l.strip_prefix("data: "))
        .filter_map(|d| serde_json::from_str::<Value>(d).ok())
        .any(|v| {
            v["choices"][0]["delta"]["content"]
                .as_str()
                .is_some_and(|c| !c.is_empty())
        })
}

/// Runs `users` chats of [`TURNS`] turns, taking turns, `pause` after
/// each answer; returns each turn's times to first token (per turn, one
/// per user).
async fn chats(addr: SocketAddr, users: usize, pause: Duration) -> Result<Vec<Vec<f64>>, String> {
    let http = reqwest::Client::new();
    let mut histories: Vec<Vec<Value>> = (0..users)
        .map(|_| vec![json!({"role": "system", "content": "You are a helpful assistant."})])
        .collect();
    let mut ttft = vec![Vec::new(); TURNS];
    for (turn, times) in ttft.iter_mut().enumerate() {
        for (user, history) in histories.iter_mut().enumerate() {
            history.push(json!({"role": "user", "content": message(user, turn + 1)}));
            let (ms, answer) = first_token_ms(&http, addr, history).await?;
            times.push(ms);
            history.push(json!({"role": "assistant", "content": answer}));
            tokio::time::sleep(pause).await;
        }
    }
    Ok(ttft)
}

/// The value of the sample `name` (with its labels) in a Prometheus text
/// exposition, 0 when absent.
fn metric(text: &str, name: &str) -> f64 {
    text.lines()
        .find_map(|l| l.strip_prefix(name)?.trim().parse().ok())
        .unwrap_or(0.0)
}

/// Runs the measurement with `binary`.
///
/// # Errors
/// A message when the test double cannot be built or a server fails.
pub async fn measure(binary: &Path) -> Result<ConversationsResult, String> {
    let dir = scratch_dir("conversations")?;
    let runtime = build_fake_rkllm(&dir)?;
    let model = dir.join("chat.rkllm");
    let reply = "The NPU of the RK3588 has three cores of 2 TOPS each; the model's weights and \
                 its KV cache live in the board's shared memory, read at every step of decode.";
    std::fs::write(&model, reply).map_err(|e| e.to_string())?;
    let setups: [(&'static str, &str, f64, u64); 4] = [
        ("built-in template, no snapshots", "", 0.0, 0),
        ("built-in template, snapshots", "", 2048.0, 0),
        (
            "built-in template, snapshots, 0.5 s between turns",
            "",
            2048.0,
            500,
        ),
        ("own chat template, snapshots", TEMPLATE, 2048.0, 0),
    ];
    let mut runs = Vec::new();
    for (setup, template, max_mb, pause_ms) in setups {
        for users in [1, 2, 4] {
            let snapshots = dir.join(format!("snapshots-{}-{users}", runs.len()));
            let template_line = if template.is_empty() {
                String::new()
            } else {
                format!("chat_template = {template:?}\n")
            };
            let config = format!(
                "log_level = \"warn\"\n[engine]\npreload = [\"chat\"]\nkeep_alive_secs = -1\n\
                 [rkllm]\nsnapshot_dir = {snapshots:?}\nsnapshot_max_mb = {max_mb}\n\
                 [[models]]\nname = \"chat\"\npath = {model:?}\n{template_line}"
            );
            let server = start_on_double(binary, &runtime, &config, PREFILL_US_PER_BYTE)?;
            let addr = server.addr.ok_or("the server has no address")?;
            let ttft = chats(addr, users, Duration::from_millis(pause_ms)).await?;
            let http = reqwest::Client::new();
            let (_, models) = timed_call(&http, addr, "models", json!({})).await?;
            let kept = &models["models"][0]["snapshots"];
            let metrics = http
                .get(format!("http://{addr}/metrics"))
                .send()
                .await
                .map_err(|e| e.to_string())?
                .text()
                .await
                .map_err(|e| e.to_string())?;
            let done = metric(
                &metrics,
                "rkllm_snapshot_refreshes_total{model=\"chat\",outcome=\"done\"}",
            );
            let yielded = metric(
                &metrics,
                "rkllm_snapshot_refreshes_total{model=\"chat\",outcome=\"yielded\"}",
            );
            let seconds = metric(
                &metrics,
                "rkllm_snapshot_refresh_seconds_total{model=\"chat\"}",
            );
            runs.push(SetupResult {
                setup,
                users,
                pause_ms,
                updates_done: done as u64,
                updates_yielded: yielded as u64,
                update_ms_each: if done + yielded > 0.0 {
                    seconds * 1000.0 / (done + yielded)
                } else {
                    0.0
                },
                ttft_turn1_ms: p50_ms(&ttft[0]),
                ttft_turn4_ms: p50_ms(&ttft[3]),
                ttft_turn8_ms: p50_ms(&ttft[TURNS - 1]),
                snapshot_files: kept["files"].as_u64().unwrap_or(0),
                snapshot_bytes: kept["bytes"].as_u64().unwrap_or(0),
            });
            eprintln!("rkllm-bench: {setup}, {users} user(s): done");
        }
    }
    let _ = std::fs::remove_dir_all(&dir);
    Ok(ConversationsResult {
        prefill_us_per_byte: PREFILL_US_PER_BYTE.parse().unwrap_or(0),
        runs,
    })
}
