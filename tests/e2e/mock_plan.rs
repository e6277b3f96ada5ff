//! The mock carries out the plan the NPU runner carries out: a long prompt
//! the server renders is prefilled in chunks, told to the client as on a
//! board (SSE comments, MCP progress), and a chat that comes back after
//! another is served from the mock's snapshot of it, counted as the NPU
//! path counts it: the whole prompt in the usage, and the tokens prefilled
//! past what the snapshot covers in the metrics.

use serde_json::{Value, json};

use crate::harness::{Server, mock_config, model_metric};

/// A user message of about 3,500 bytes (as many of the mock tokenizer's
/// tokens): more than 20 chunks of 160.
fn long_message() -> String {
    "Please read this log line of the board and keep it in mind. ".repeat(57)
}

/// The mock with `chat`, a model whose ChatML the server renders, and a
/// prefill of `prefill_ms`.
fn start(prefill_ms: u64) -> Server {
    Server::start(
        &mock_config(
            0.0,
            prefill_ms,
            "[[models]]\nname = \"chat\"\nchat_template = \"chatml\"\n",
        ),
        &[],
    )
}

/// The `: prefill t/of` comments of an SSE body, in order.
fn prefill_comments(body: &str) -> Vec<(u64, u64)> {
    body.lines()
        .filter_map(|l| l.strip_prefix(": prefill "))
        .map(|rest| {
            let (t, of) = rest.split_once('/').unwrap();
            (t.parse().unwrap(), of.parse().unwrap())
        })
        .collect()
}

#[tokio::test]
async fn a_long_prompt_on_the_mock_is_prefilled_in_chunks_told_on_sse_and_mcp() {
    let server = start(300);
    let body = server
        .http
        .post(format!("http://{}/v1/chat/completions", server.addr))
        .json(&json!({"model": "chat", "stream": true, "max_tokens": 8,
                      "messages": [{"role": "user", "content": long_message()}]}))
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    let seen = prefill_comments(&body);
    assert!(seen.len() > 10, "a comment a chunk: {body}");
    let total = seen[0].1;
    assert!(total > 3000, "{seen:?}");
    assert_eq!(seen[0].0, 0, "{seen:?}");
    assert!(
        seen.windows(2).all(|w| w[0].0 < w[1].0 && w[1].1 == total),
        "rising, of the same total: {seen:?}"
    );
    assert!(seen.last().unwrap().0 < total, "{seen:?}");
    assert!(body.contains("[DONE]"), "{body}");

    // MCP: the share prefilled, below 1, then the tokens generated.
    let call = json!({"jsonrpc": "2.0", "id": 3, "method": "tools/call", "params": {
        "name": "generate",
        "arguments": {"prompt": long_message(), "model": "chat", "max_tokens": 8},
        "_meta": {"progressToken": "p"}}});
    let body = server
        .http
        .post(server.mcp_url())
        .header("accept", "application/json, text/event-stream")
        .json(&call)
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    let messages: Vec<Value> = body
        .lines()
        .filter_map(|l| l.strip_prefix("data:"))
        .map(|d| serde_json::from_str(d.trim()).unwrap())
        .collect();
    let prefill: Vec<(f64, u64)> = messages
        .iter()
        .filter_map(|m| {
            let of = m["params"]["_meta"].get("prefill")?["of"].as_u64()?;
            Some((m["params"]["progress"].as_f64()?, of))
        })
        .collect();
    assert!(prefill.len() > 10, "{body}");
    assert!(prefill.iter().all(|&(p, _)| p < 1.0), "{prefill:?}");
    let last = messages.last().unwrap();
    assert_eq!(last["id"], 3, "{body}");
    let usage = &last["result"]["structuredContent"]["usage"];
    assert_eq!(
        usage["prompt_tokens"], prefill[0].1,
        "a chunked prompt counts all its tokens: {usage}"
    );
}

#[tokio::test]
async fn a_chat_that_comes_back_on_the_mock_starts_from_its_snapshot() {
    let server = start(0);
    let system = "You are the board's log reader. ".repeat(20);
    let chat = |messages: Value| {
        let server = &server;
        async move {
            server
                .post_json(
                    "/v1/chat/completions",
                    json!({"model": "chat", "max_tokens": 8, "messages": messages}),
                )
                .await
        }
    };
    let first = chat(json!([{"role": "system", "content": system},
                           {"role": "user", "content": "What happened at noon?"}]))
    .await;
    let reply = first["choices"][0]["message"]["content"]
        .as_str()
        .unwrap()
        .to_owned();
    let whole = first["usage"]["prompt_tokens"].as_u64().unwrap();
    // Another chat runs between.
    let other = chat(json!([{"role": "user", "content": "Something else entirely."}])).await;
    let other = other["usage"]["prompt_tokens"].as_u64().unwrap();
    let back = chat(json!([{"role": "system", "content": system},
                          {"role": "user", "content": "What happened at noon?"},
                          {"role": "assistant", "content": reply},
                          {"role": "user", "content": "And after?"}]))
    .await;
    // The usage counts the whole prompt, as on the NPU; what the turn
    // prefilled past its snapshot is in the metrics.
    let returning = back["usage"]["prompt_tokens"].as_u64().unwrap();
    assert!(returning > whole, "{returning} of a first turn of {whole}");
    let metrics = server.metrics_text().await;
    let counter = |name: &str| model_metric(&metrics, name, "chat", &[]).unwrap_or(0.0);
    let hits = counter("rkllm_snapshot_hits_total");
    assert!(hits >= 1.0, "{metrics}");
    // Three requests: the first two prefilled whole, the returning one
    // only what its snapshot does not cover.
    let reused = counter("rkllm_prompt_tokens_reused_total");
    let prefilled = counter("rkllm_prompt_tokens_prefilled_total");
    assert!(
        reused >= whole as f64,
        "{reused} reused, {prefilled} prefilled: {metrics}"
    );
    assert!(
        prefilled < (whole + other + returning / 2) as f64,
        "{reused} reused, {prefilled} prefilled, of {whole} + {other} + {returning}: {metrics}"
    );
}
