//! The streams of the HTTP APIs (OpenAI chat, Anthropic messages, OpenAI
//! Responses, Ollama chat): a streaming request posted, its events read
//! until the answer ends.

use super::*;

#[derive(Debug, Deserialize)]
struct OpenAiChunk {
    #[serde(default)]
    produced_ns: Option<u64>,
    #[serde(default)]
    usage: Option<UsageMsg>,
    #[serde(default)]
    error: Option<Value>,
}

/// Posts a streaming request of an HTTP API (`what` names it in errors);
/// returns the response once its status says it succeeded.
async fn post_stream(
    http: &reqwest::Client,
    url: &str,
    what: &str,
    body: &Value,
) -> Result<reqwest::Response, String> {
    let response = http
        .post(url)
        .header("content-type", "application/json")
        .body(body.to_string())
        .send()
        .await
        .map_err(|e| format!("{what} POST: {e}"))?;
    if !response.status().is_success() {
        return Err(format!("{what} POST: {}", response.status()));
    }
    Ok(response)
}

pub(super) async fn openai_stream(
    http: &reqwest::Client,
    base: &str,
    prompt: &str,
    spec: StreamSpec,
    totals: &mut Totals,
) -> Result<(), String> {
    let body = json!({"model": "mock", "stream": true, "max_tokens": spec.tokens,
        "stream_options": {"include_usage": true},
        "messages": [{"role": "user", "content": prompt}]});
    let sent = monotonic_ns();
    let response = post_stream(
        http,
        &format!("{base}/v1/chat/completions"),
        "OpenAI",
        &body,
    )
    .await?;
    let mut first = true;
    let mut usage = None;
    read_sse(response, |data, now| {
        if data == b"[DONE]" {
            return Ok(true);
        }
        let chunk: OpenAiChunk =
            serde_json::from_slice(data).map_err(|e| format!("bad OpenAI event: {e}"))?;
        if let Some(error) = chunk.error {
            return Err(format!("OpenAI stream failed: {error}"));
        }
        if chunk.produced_ns.is_some() {
            totals.chunk(sent, now, chunk.produced_ns, &mut first);
        }
        if chunk.usage.is_some() {
            usage = chunk.usage;
        }
        Ok(false)
    })
    .await?;
    let usage = usage.ok_or("the OpenAI stream had no usage")?;
    totals.tokens += usage.completion_tokens;
    totals.streams += 1;
    Ok(())
}

/// An Anthropic event as the benchmark reads it.
#[derive(Debug, Deserialize)]
struct AnthropicEvent {
    #[serde(rename = "type")]
    kind: AnthropicKind,
    #[serde(default)]
    produced_ns: Option<u64>,
    #[serde(default)]
    usage: Option<AnthropicUsage>,
    #[serde(default)]
    error: Option<Value>,
}

#[derive(Debug, Deserialize)]
#[serde(rename_all = "snake_case")]
enum AnthropicKind {
    MessageDelta,
    MessageStop,
    Error,
    #[serde(other)]
    Other,
}

#[derive(Debug, Deserialize)]
struct AnthropicUsage {
    output_tokens: u64,
}

pub(super) async fn anthropic_stream(
    http: &reqwest::Client,
    base: &str,
    prompt: &str,
    spec: StreamSpec,
    totals: &mut Totals,
) -> Result<(), String> {
    let body = json!({"model": "mock", "stream": true, "max_tokens": spec.tokens,
        "messages": [{"role": "user", "content": prompt}]});
    let sent = monotonic_ns();
    let response = post_stream(http, &format!("{base}/v1/messages"), "Anthropic", &body).await?;
    let mut first = true;
    let mut tokens = None;
    read_sse(response, |data, now| {
        let event: AnthropicEvent =
            serde_json::from_slice(data).map_err(|e| format!("bad Anthropic event: {e}"))?;
        match event.kind {
            AnthropicKind::Error => Err(format!("Anthropic stream failed: {:?}", event.error)),
            AnthropicKind::MessageDelta => {
                tokens = event.usage.map(|u| u.output_tokens);
                Ok(false)
            }
            AnthropicKind::MessageStop => Ok(true),
            AnthropicKind::Other => {
                if event.produced_ns.is_some() {
                    totals.chunk(sent, now, event.produced_ns, &mut first);
                }
                Ok(false)
            }
        }
    })
    .await?;
    totals.tokens += tokens.ok_or("the Anthropic stream had no usage")?;
    totals.streams += 1;
    Ok(())
}

#[derive(Debug, Deserialize)]
struct ResponsesEvent {
    #[serde(rename = "type")]
    kind: String,
    #[serde(default)]
    produced_ns: Option<u64>,
    #[serde(default)]
    response: Option<ResponsesObject>,
}

#[derive(Debug, Deserialize)]
struct ResponsesObject {
    #[serde(default)]
    usage: Option<ResponsesUsage>,
    #[serde(default)]
    error: Option<Value>,
}

#[derive(Debug, Deserialize)]
struct ResponsesUsage {
    output_tokens: u64,
}

/// One stream of the Responses API: text arrives as
/// `response.output_text.delta` events; the stream ends with
/// `response.completed` (or `response.incomplete`), whose usage counts
/// the tokens. `store: false`, as Codex sends it.
pub(super) async fn responses_stream(
    http: &reqwest::Client,
    base: &str,
    prompt: &str,
    spec: StreamSpec,
    totals: &mut Totals,
) -> Result<(), String> {
    let body = json!({"model": "mock", "stream": true, "store": false,
        "max_output_tokens": spec.tokens, "input": prompt});
    let sent = monotonic_ns();
    let response = post_stream(http, &format!("{base}/v1/responses"), "Responses", &body).await?;
    let mut first = true;
    read_sse(response, |data, now| {
        let event: ResponsesEvent =
            serde_json::from_slice(data).map_err(|e| format!("bad Responses event: {e}"))?;
        match event.kind.as_str() {
            "response.output_text.delta" => {
                if event.produced_ns.is_some() {
                    totals.chunk(sent, now, event.produced_ns, &mut first);
                }
                Ok(false)
            }
            "response.completed" | "response.incomplete" => {
                let usage = event
                    .response
                    .and_then(|r| r.usage)
                    .ok_or("the Responses stream ended without usage")?;
                totals.tokens += usage.output_tokens;
                totals.streams += 1;
                Ok(true)
            }
            "response.failed" | "error" => Err(format!(
                "Responses stream failed: {:?}",
                event.response.and_then(|r| r.error)
            )),
            _ => Ok(false),
        }
    })
    .await
}

#[derive(Debug, Deserialize)]
struct OllamaLine {
    #[serde(default)]
    produced_ns: Option<u64>,
    #[serde(default)]
    done: bool,
    #[serde(default)]
    eval_count: Option<u64>,
    #[serde(default)]
    error: Option<Value>,
}

pub(super) async fn ollama_stream(
    http: &reqwest::Client,
    base: &str,
    prompt: &str,
    spec: StreamSpec,
    totals: &mut Totals,
) -> Result<(), String> {
    let body = json!({"model": "mock", "stream": true, "options": {"num_predict": spec.tokens},
        "messages": [{"role": "user", "content": prompt}]});
    let sent = monotonic_ns();
    let response = post_stream(http, &format!("{base}/api/chat"), "Ollama", &body).await?;
    let mut first = true;
    read_records(response, "NDJSON", b"\n", |line, now| {
        let line: OllamaLine =
            serde_json::from_slice(line).map_err(|e| format!("bad Ollama line: {e}"))?;
        if let Some(error) = line.error {
            return Err(format!("Ollama stream failed: {error}"));
        }
        if line.done {
            totals.tokens += line
                .eval_count
                .ok_or("the last Ollama line had no eval_count")?;
            totals.streams += 1;
            return Ok(true);
        }
        if line.produced_ns.is_some() {
            totals.chunk(sent, now, line.produced_ns, &mut first);
        }
        Ok(false)
    })
    .await
}
