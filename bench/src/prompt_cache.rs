//! `rkllm-bench --prompt-cache`: what a prompt-cache file saves of the
//! time to first token.
//!
//! Starts the server twice on the rkllm backend with the test double of the
//! runtime (built here with `cc`), whose prefill takes 250 µs per prompt
//! byte (about 1 ms per token, the order of a 1.5B model's prefill on the
//! NPU) and which answers one token at once: once with a
//! `system_prompt_cache` of a 2,320-byte system prompt, once without. Each
//! request is that system prompt and a short question (a JSON-RPC `run` of
//! one token, so its whole time is its time to first token); the medians
//! of both are compared. The saving on a board is the prefill of the
//! system prompt's tokens, which this reproduces in proportion.

use std::path::Path;

use serde_json::json;

use crate::fakes::{build_fake_rkllm, p50_ms, scratch_dir, start_on_double, timed_run};

/// The figures, in milliseconds (medians).
#[derive(Debug, Clone, serde::Serialize)]
pub struct PromptCacheResult {
    pub requests: usize,
    pub system_prompt_bytes: usize,
    pub ttft_without_ms: f64,
    pub ttft_with_ms: f64,
    pub prefill_without_ms: f64,
    pub prefill_with_ms: f64,
}

impl PromptCacheResult {
    /// The Markdown section of the report.
    pub fn markdown(&self) -> String {
        format!(
            "## Prompt cache: time to first token\n\n\
             | requests (each) | system prompt | TTFT without cache (p50) | with cache (p50) | saved | runtime prefill without / with |\n\
             |---|---|---|---|---|---|\n\
             | {} | {} bytes | {:.1} ms | {:.1} ms | **{:.1} ms ({:.0} %)** | {:.1} / {:.1} ms |\n",
            self.requests,
            self.system_prompt_bytes,
            self.ttft_without_ms,
            self.ttft_with_ms,
            self.ttft_without_ms - self.ttft_with_ms,
            (1.0 - self.ttft_with_ms / self.ttft_without_ms) * 100.0,
            self.prefill_without_ms,
            self.prefill_with_ms,
        )
    }
}

/// Runs the measurement with `binary`, `requests` per server.
///
/// # Errors
/// A message when the test double cannot be built or a server fails.
pub async fn measure(binary: &Path, requests: usize) -> Result<PromptCacheResult, String> {
    let dir = scratch_dir("cache")?;
    let runtime = build_fake_rkllm(&dir)?;
    let model = dir.join("chat.rkllm");
    std::fs::write(&model, "x").map_err(|e| e.to_string())?;
    let system = "You are the assistant of a Rock 5B board. Answer briefly. ".repeat(40);
    let question = "What does the NPU do?";
    let mut ttft = [Vec::new(), Vec::new()];
    let mut prefill = [Vec::new(), Vec::new()];
    for (i, cached) in [false, true].into_iter().enumerate() {
        let cache = if cached {
            format!(
                "[models.system_prompt_cache]\nprompt = {system:?}\npath = {:?}\n",
                dir.join("chat.prompt-cache")
            )
        } else {
            String::new()
        };
        let config = format!(
            "log_level = \"warn\"\n[engine]\npreload = [\"chat\"]\nkeep_alive_secs = -1\n\
             [[models]]\nname = \"chat\"\npath = {model:?}\n{cache}"
        );
        let server = start_on_double(binary, &runtime, &config, "250")?;
        let addr = server.addr.ok_or("the server has no address")?;
        let http = reqwest::Client::new();
        let params = json!({"prompt": format!("{system}{question}"), "max_tokens": 1});
        for n in 0..requests + 2 {
            let (elapsed, result) = timed_run(&http, addr, params.clone()).await?;
            // The first two warm up.
            if n >= 2 {
                ttft[i].push(elapsed);
                prefill[i].push(result["timings"]["prefill_ms"].as_f64().unwrap_or(0.0));
            }
        }
    }
    let _ = std::fs::remove_dir_all(&dir);
    let [without, with] = ttft;
    let [prefill_without, prefill_with] = prefill;
    Ok(PromptCacheResult {
        requests,
        system_prompt_bytes: system.len(),
        ttft_without_ms: p50_ms(&without),
        ttft_with_ms: p50_ms(&with),
        prefill_without_ms: p50_ms(&prefill_without),
        prefill_with_ms: p50_ms(&prefill_with),
    })
}
