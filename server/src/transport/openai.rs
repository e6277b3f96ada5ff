//! The OpenAI API: `GET /v1/models`, `POST /v1/chat/completions` and
//! `POST /v1/completions`, streaming (SSE) and not, as the official client
//! reads them: one id and `created` per response, a role chunk first,
//! `finish_reason` `stop`/`length`, a usage chunk with empty `choices` only
//! when `stream_options.include_usage` is set, then `[DONE]`; keep-alive
//! comments during a long prefill; errors as `{"error": {...}}` with the
//! matching status, and 503 with `Retry-After` when the model is busy.

use std::convert::Infallible;
use std::sync::Arc;
use std::time::Duration;

use axum::Json;
use axum::body::Bytes;
use axum::extract::State;
use axum::http::{HeaderValue, StatusCode, header};
use axum::response::sse::{Event, KeepAlive, Sse};
use axum::response::{IntoResponse, Response};
use base64::Engine as _;
use futures_util::StreamExt;
use serde::Deserialize;
use serde_json::{Value, json};

use super::clock::unix_now;
use super::compat::{
    ChatMessage, EmbedFailure, embed_all, image_sources, log_ignored_fields, next_shown,
    prompt_from_messages, start_private, turns,
};
use super::images::{self, ImageSource};
use super::state::AppState;
use super::tools::{ToolCall, ToolCallFilter};
use crate::engine::{EngineError, Role, RunRequest, Sampling, Turn, ValidationError};
use crate::rpc::embedding_inputs;
use crate::stream::{PrivateStream, StreamError, new_stream_id};
use crate::vocab::{EndInfo, FinishReason};

/// An error in OpenAI's shape.
fn error(
    status: StatusCode,
    kind: &str,
    message: impl Into<String>,
    param: Option<&str>,
    code: Option<&str>,
) -> Response {
    let body =
        json!({"error": {"message": message.into(), "type": kind, "param": param, "code": code}});
    (status, Json(body)).into_response()
}

fn bad_request(message: impl Into<String>, param: Option<&str>) -> Response {
    error(
        StatusCode::BAD_REQUEST,
        "invalid_request_error",
        message,
        param,
        None,
    )
}

/// Maps an engine refusal to OpenAI's status and shape.
pub(super) fn engine_error(err: EngineError) -> Response {
    crate::metrics::rejected(match &err {
        EngineError::QueueFull { .. } | EngineError::Stream(_) => "busy",
        EngineError::Invalid(ValidationError::UnknownModel { .. })
        | EngineError::Unavailable { .. } => "model_unavailable",
        _ => "invalid_params",
    });
    match err {
        EngineError::Invalid(ValidationError::UnknownModel { name, available }) => error(
            StatusCode::NOT_FOUND,
            "invalid_request_error",
            format!(
                "The model `{name}` does not exist; the models are: {}",
                available.join(", ")
            ),
            Some("model"),
            Some("model_not_found"),
        ),
        EngineError::Invalid(
            ValidationError::Invalid { field, message }
            | ValidationError::TooLarge { field, message },
        ) => bad_request(message, Some(field)),
        EngineError::QueueFull { retry_after_ms, .. } => {
            busy(retry_after_ms, &err_text(retry_after_ms))
        }
        EngineError::Stream(StreamError::TooMany { .. } | StreamError::ShuttingDown) => {
            busy(1000, "the server is busy")
        }
        other => error(
            StatusCode::SERVICE_UNAVAILABLE,
            "server_error",
            other.to_string(),
            None,
            None,
        ),
    }
}

fn err_text(retry_after_ms: u64) -> String {
    format!("the model is busy: its queue is full; retry in {retry_after_ms} ms")
}

fn busy(retry_after_ms: u64, message: &str) -> Response {
    let mut response = error(
        StatusCode::SERVICE_UNAVAILABLE,
        "server_error",
        message,
        None,
        Some("server_busy"),
    );
    let secs = retry_after_ms.div_ceil(1000).max(1);
    if let Ok(value) = HeaderValue::from_str(&secs.to_string()) {
        response.headers_mut().insert(header::RETRY_AFTER, value);
    }
    response
}

/// `GET /v1/models`.
pub async fn models(State(state): State<Arc<AppState>>) -> Response {
    let created = state.started_unix;
    let data: Vec<Value> = state
        .engine
        .models()
        .into_iter()
        .map(|m| {
            json!({"id": m.name, "object": "model", "created": created, "owned_by": "rkllm",
                   "capabilities": m.capabilities, "state": m.state.as_str()})
        })
        .collect();
    Json(json!({"object": "list", "data": data})).into_response()
}

#[derive(Debug, Deserialize)]
struct StreamOptions {
    #[serde(default)]
    include_usage: bool,
}

#[derive(Debug, Deserialize)]
struct Common {
    model: Option<String>,
    #[serde(default)]
    stream: bool,
    stream_options: Option<StreamOptions>,
    max_tokens: Option<u64>,
    max_completion_tokens: Option<u64>,
    temperature: Option<f64>,
    top_p: Option<f64>,
    top_k: Option<u32>,
    frequency_penalty: Option<f64>,
    presence_penalty: Option<f64>,
    repeat_penalty: Option<f64>,
    /// rkllm-server's own: a LoRA adapter of the model.
    lora: Option<String>,
    n: Option<u32>,
    tools: Option<Vec<Value>>,
    tool_choice: Option<Value>,
}

#[derive(Debug, Deserialize)]
struct ChatRequest {
    messages: Vec<ChatMessage>,
    #[serde(flatten)]
    common: Common,
}

#[derive(Debug, Deserialize)]
struct CompletionRequest {
    prompt: Value,
    #[serde(flatten)]
    common: Common,
}

/// The fields of `Common`, as the wire names them.
const COMMON_FIELDS: &[&str] = &[
    "model",
    "stream",
    "stream_options",
    "max_tokens",
    "max_completion_tokens",
    "temperature",
    "top_p",
    "top_k",
    "frequency_penalty",
    "presence_penalty",
    "repeat_penalty",
    "lora",
    "n",
    "tools",
    "tool_choice",
];

fn parse<T: serde::de::DeserializeOwned>(body: &Bytes) -> Result<T, Box<Response>> {
    serde_json::from_slice(body)
        .map_err(|e| Box::new(bad_request(format!("invalid request body: {e}"), None)))
}

impl Common {
    fn request(
        &self,
        prompt: String,
        role: Role,
        conversation: Option<Vec<Turn>>,
    ) -> Result<RunRequest, Box<Response>> {
        if self.n.is_some_and(|n| n != 1) {
            return Err(Box::new(bad_request("only `n: 1` is supported", Some("n"))));
        }
        let tools = self
            .tools
            .as_ref()
            .filter(|t| {
                !t.is_empty() && self.tool_choice.as_ref().and_then(Value::as_str) != Some("none")
            })
            .map(|t| Value::Array(t.clone()).to_string());
        Ok(RunRequest {
            prompt,
            model: self.model.clone(),
            max_tokens: self.max_completion_tokens.or(self.max_tokens),
            sampling: Sampling {
                temperature: self.temperature,
                top_p: self.top_p,
                top_k: self.top_k,
                repeat_penalty: self.repeat_penalty,
                frequency_penalty: self.frequency_penalty,
                presence_penalty: self.presence_penalty,
            },
            role,
            enable_thinking: None,
            conversation,
            tools,
            images: Vec::new(),
            embed: false,
            clear_cache: false,
            lora: self.lora.clone(),
            stop: Vec::new(),
        })
    }
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum Kind {
    Chat,
    Completion,
}

/// `POST /v1/chat/completions`.
pub async fn chat_completions(State(state): State<Arc<AppState>>, body: Bytes) -> Response {
    log_ignored_fields(
        "/v1/chat/completions",
        &body,
        &[COMMON_FIELDS, &["messages"]].concat(),
    );
    let request: ChatRequest = match parse(&body) {
        Ok(r) => r,
        Err(response) => return *response,
    };
    let (prompt, role) = match prompt_from_messages(&request.messages) {
        Ok(p) => p,
        Err(message) => return bad_request(message, Some("messages")),
    };
    let images = match image_sources(&request.messages) {
        Ok(images) => images,
        Err(message) => return bad_request(message, Some("messages")),
    };
    let conversation = Some(turns(&request.messages));
    respond(
        state,
        &request.common,
        prompt,
        role,
        conversation,
        images,
        Kind::Chat,
    )
    .await
}

#[derive(Debug, Deserialize)]
struct EmbeddingRequest {
    model: Option<String>,
    #[serde(default)]
    input: Value,
    encoding_format: Option<String>,
    dimensions: Option<Value>,
}

/// `POST /v1/embeddings`: `input` a string or an array of strings, each
/// embedded by the model (an `embedding = true` model) in turn.
pub async fn embeddings(State(state): State<Arc<AppState>>, body: Bytes) -> Response {
    log_ignored_fields(
        "/v1/embeddings",
        &body,
        &["model", "input", "encoding_format", "dimensions", "user"],
    );
    let request: EmbeddingRequest = match parse(&body) {
        Ok(r) => r,
        Err(response) => return *response,
    };
    let base64 = match request.encoding_format.as_deref() {
        None | Some("float") => false,
        Some("base64") => true,
        Some(other) => {
            return bad_request(
                format!("`encoding_format` must be \"float\" or \"base64\", got {other:?}"),
                Some("encoding_format"),
            );
        }
    };
    if request.dimensions.is_some() {
        return bad_request(
            "`dimensions` is not supported: the model's vectors have the width it was built with",
            Some("dimensions"),
        );
    }
    let inputs = match embedding_inputs(&request.input, state.rpc.limits.max_embedding_inputs) {
        Ok(inputs) => inputs,
        Err(message) => return bad_request(message, Some("input")),
    };
    let embedded = match embed_all(&state, request.model, inputs, None).await {
        Ok(embedded) => embedded,
        Err(EmbedFailure::Refused(err)) => return engine_error(err),
        Err(EmbedFailure::Failed(message)) => {
            return error(
                StatusCode::INTERNAL_SERVER_ERROR,
                "server_error",
                message,
                None,
                None,
            );
        }
    };
    let data: Vec<Value> = embedded
        .vectors
        .iter()
        .enumerate()
        .map(|(index, vector)| {
            let embedding = if base64 {
                let bytes: Vec<u8> = vector.iter().flat_map(|v| v.to_le_bytes()).collect();
                json!(base64::engine::general_purpose::STANDARD.encode(bytes))
            } else {
                json!(&vector[..])
            };
            json!({"object": "embedding", "index": index, "embedding": embedding})
        })
        .collect();
    Json(json!({
        "object": "list",
        "data": data,
        "model": embedded.model,
        "usage": {"prompt_tokens": embedded.prompt_tokens, "total_tokens": embedded.prompt_tokens}
    }))
    .into_response()
}

/// `POST /v1/completions`.
pub async fn completions(State(state): State<Arc<AppState>>, body: Bytes) -> Response {
    log_ignored_fields(
        "/v1/completions",
        &body,
        &[COMMON_FIELDS, &["prompt"]].concat(),
    );
    let request: CompletionRequest = match parse(&body) {
        Ok(r) => r,
        Err(response) => return *response,
    };
    let prompt = match &request.prompt {
        Value::String(s) => s.clone(),
        Value::Array(items) if items.len() == 1 && items[0].is_string() => {
            items[0].as_str().unwrap_or_default().to_owned()
        }
        _ => return bad_request("`prompt` must be a string", Some("prompt")),
    };
    respond(
        state,
        &request.common,
        prompt,
        Role::User,
        None,
        Vec::new(),
        Kind::Completion,
    )
    .await
}

async fn respond(
    state: Arc<AppState>,
    common: &Common,
    prompt: String,
    role: Role,
    conversation: Option<Vec<Turn>>,
    images: Vec<ImageSource>,
    kind: Kind,
) -> Response {
    let mut run = match common.request(prompt, role, conversation) {
        Ok(run) => run,
        Err(response) => return *response,
    };
    if !images.is_empty() {
        run.images = match images::load(images, &state.settings.remote_images).await {
            Ok(images) => images,
            Err(message) => return bad_request(message, Some("messages")),
        };
    }
    let private = match start_private(&state, run, None) {
        Ok(p) => p,
        Err(err) => return engine_error(err),
    };
    let id = match kind {
        Kind::Chat => format!("chatcmpl-{}", new_stream_id()),
        Kind::Completion => format!("cmpl-{}", new_stream_id()),
    };
    let ids = Ids {
        id,
        created: unix_now(),
        model: private.stream().model().to_owned(),
        kind,
        tools: common.tools.as_ref().is_some_and(|t| !t.is_empty()),
    };
    if common.stream {
        let include_usage = common
            .stream_options
            .as_ref()
            .is_some_and(|o| o.include_usage);
        return stream_response(private, ids, include_usage);
    }
    whole_response(private, ids).await
}

struct Ids {
    id: String,
    created: u64,
    model: String,
    kind: Kind,
    /// Whether the request offered tools (tool calls are then parsed).
    tools: bool,
}

impl Ids {
    fn object(&self, chunk: bool) -> &'static str {
        match (self.kind, chunk) {
            (Kind::Chat, false) => "chat.completion",
            (Kind::Chat, true) => "chat.completion.chunk",
            (Kind::Completion, _) => "text_completion",
        }
    }

    fn envelope(&self, chunk: bool, choices: Value) -> Value {
        json!({"id": self.id, "object": self.object(chunk), "created": self.created, "model": self.model,
               "system_fingerprint": null, "choices": choices})
    }

    /// The streamed event of one text fragment: `envelope(true,
    /// [choice(text, None, false)])` serialised directly, without building
    /// a `Value` per token. `produced_ns` only in benchmark mode.
    fn text_event(&self, text: &str, produced_ns: Option<u64>) -> String {
        #[derive(serde::Serialize)]
        struct Event<'a> {
            id: &'a str,
            object: &'static str,
            created: u64,
            model: &'a str,
            system_fingerprint: (),
            choices: [Choice<'a>; 1],
            #[serde(skip_serializing_if = "Option::is_none")]
            produced_ns: Option<u64>,
        }
        #[derive(serde::Serialize)]
        struct Choice<'a> {
            index: u32,
            #[serde(skip_serializing_if = "Option::is_none")]
            delta: Option<Content<'a>>,
            #[serde(skip_serializing_if = "Option::is_none")]
            text: Option<&'a str>,
            logprobs: (),
            finish_reason: (),
        }
        #[derive(serde::Serialize)]
        struct Content<'a> {
            content: &'a str,
        }
        let chat = self.kind == Kind::Chat;
        serde_json::to_string(&Event {
            id: &self.id,
            object: self.object(true),
            created: self.created,
            model: &self.model,
            system_fingerprint: (),
            choices: [Choice {
                index: 0,
                delta: chat.then_some(Content { content: text }),
                text: (!chat).then_some(text),
                logprobs: (),
                finish_reason: (),
            }],
            produced_ns,
        })
        .unwrap_or_default()
    }

    fn choice(&self, text: &str, finish: Option<&str>, first: bool) -> Value {
        match self.kind {
            Kind::Chat => {
                let delta = if first {
                    json!({"role": "assistant", "content": text})
                } else if finish.is_some() {
                    json!({})
                } else {
                    json!({"content": text})
                };
                json!({"index": 0, "delta": delta, "logprobs": null, "finish_reason": finish})
            }
            Kind::Completion => {
                json!({"index": 0, "text": text, "logprobs": null, "finish_reason": finish})
            }
        }
    }
}

fn finish_reason(end: &EndInfo) -> &'static str {
    match end.finish_reason {
        FinishReason::Length => "length",
        _ => "stop",
    }
}

fn usage(end: &EndInfo) -> Value {
    let (p, c) = (end.usage.prompt_tokens, end.usage.completion_tokens);
    json!({"prompt_tokens": p, "completion_tokens": c, "total_tokens": p + c})
}

/// Tool calls in OpenAI's shape: arguments as a JSON string.
fn openai_calls(calls: &[ToolCall]) -> Vec<Value> {
    calls
        .iter()
        .enumerate()
        .map(|(index, call)| {
            json!({"index": index, "id": format!("call_{}", new_stream_id()), "type": "function",
                   "function": {"name": call.name, "arguments": call.arguments.to_string()}})
        })
        .collect()
}

/// The events of a streamed completion, made batch by batch.
struct SseEvents {
    private: PrivateStream,
    ids: Ids,
    filter: Option<ToolCallFilter>,
    include_usage: bool,
    started: bool,
    done: bool,
}

impl SseEvents {
    /// The events of the next batch of the stream: what the batch holds
    /// goes out as one event (a client that keeps up gets every chunk on
    /// its own; one that falls behind catches up with fewer, larger
    /// events), then the closing events at the end. In benchmark mode a
    /// text event carries its oldest text's production time. `None` once
    /// the stream is over.
    async fn next_events(&mut self) -> Option<Vec<String>> {
        if self.done {
            return None;
        }
        let ids = &self.ids;
        let mut events = Vec::new();
        if !self.started {
            self.started = true;
            if ids.kind == Kind::Chat {
                events.push(
                    ids.envelope(true, json!([ids.choice("", None, true)]))
                        .to_string(),
                );
                return Some(events);
            }
        }
        let Some(shown) = next_shown(&mut self.private, &mut self.filter).await else {
            self.done = true;
            return None;
        };
        if !shown.text.is_empty() {
            events.push(ids.text_event(&shown.text, shown.produced_ns));
        }
        let Some(end) = shown.end else {
            return Some(events);
        };
        self.done = true;
        if let Some(err) = &end.error {
            events.push(
                json!({"error": {"message": err.message, "type": "server_error", "param": null, "code": null}})
                    .to_string(),
            );
        } else {
            let (rest, calls) = self
                .filter
                .as_mut()
                .map(ToolCallFilter::finish)
                .unwrap_or_default();
            if !rest.is_empty() {
                events.push(
                    ids.envelope(true, json!([ids.choice(&rest, None, false)]))
                        .to_string(),
                );
            }
            let mut reason = finish_reason(&end);
            if !calls.is_empty() {
                reason = "tool_calls";
                let delta = json!({"index": 0, "delta": {"tool_calls": openai_calls(&calls)},
                                   "logprobs": null, "finish_reason": null});
                events.push(ids.envelope(true, json!([delta])).to_string());
            }
            events.push(
                ids.envelope(true, json!([ids.choice("", Some(reason), false)]))
                    .to_string(),
            );
            if self.include_usage {
                let mut usage_chunk = ids.envelope(true, json!([]));
                usage_chunk["usage"] = usage(&end);
                events.push(usage_chunk.to_string());
            }
        }
        events.push("[DONE]".to_owned());
        Some(events)
    }
}

async fn whole_response(mut private: PrivateStream, ids: Ids) -> Response {
    let mut text = String::new();
    let end = loop {
        let batch = private.consumer.next_batch().await;
        if batch.is_empty() {
            return error(
                StatusCode::INTERNAL_SERVER_ERROR,
                "server_error",
                "the generation expired",
                None,
                None,
            );
        }
        let mut end = None;
        for chunk in batch {
            text.push_str(&chunk.delta);
            end = end.or(chunk.end);
        }
        if let Some(end) = end {
            break end;
        }
    };
    if let Some(err) = &end.error {
        return error(
            StatusCode::INTERNAL_SERVER_ERROR,
            "server_error",
            err.message.clone(),
            None,
            None,
        );
    }
    let (text, calls) = if ids.tools {
        let mut filter = ToolCallFilter::default();
        let mut shown = filter.push(&text);
        let (rest, calls) = filter.finish();
        shown.push_str(&rest);
        (shown, calls)
    } else {
        (text, Vec::new())
    };
    let choice = match ids.kind {
        Kind::Chat if !calls.is_empty() => {
            let content = if text.trim().is_empty() {
                Value::Null
            } else {
                json!(text)
            };
            json!({"index": 0, "message": {"role": "assistant", "content": content, "tool_calls": openai_calls(&calls)},
                   "logprobs": null, "finish_reason": "tool_calls"})
        }
        Kind::Chat => {
            json!({"index": 0, "message": {"role": "assistant", "content": text}, "logprobs": null,
                             "finish_reason": finish_reason(&end)})
        }
        Kind::Completion => {
            json!({"index": 0, "text": text, "logprobs": null, "finish_reason": finish_reason(&end)})
        }
    };
    let mut body = ids.envelope(false, json!([choice]));
    body["usage"] = usage(&end);
    Json(body).into_response()
}

/// Streams the generation as SSE, read by the response body itself: the
/// connection's task waits on the stream and writes the events it makes,
/// with no task in between. A client that disconnects drops the body,
/// which drops the generation and aborts it.
fn stream_response(private: PrivateStream, ids: Ids, include_usage: bool) -> Response {
    let events = SseEvents {
        filter: ids.tools.then(ToolCallFilter::default),
        private,
        ids,
        include_usage,
        started: false,
        done: false,
    };
    let events = futures_util::stream::unfold(events, |mut events| async move {
        let batch = events.next_events().await?;
        Some((futures_util::stream::iter(batch), events))
    })
    .flatten()
    .map(|data| Ok::<_, Infallible>(Event::default().data(data)));
    let mut response = Sse::new(events)
        .keep_alive(
            KeepAlive::new()
                .interval(Duration::from_secs(15))
                .text("keep-alive"),
        )
        .into_response();
    response
        .headers_mut()
        .insert(header::CACHE_CONTROL, HeaderValue::from_static("no-cache"));
    response
        .headers_mut()
        .insert("x-accel-buffering", HeaderValue::from_static("no"));
    response
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_streamed_text_event_is_the_envelope_of_its_choice() {
        for kind in [Kind::Chat, Kind::Completion] {
            let ids = Ids {
                id: "chatcmpl-1".into(),
                created: 7,
                model: "mock".into(),
                kind,
                tools: false,
            };
            let text = "é \"quoted\"\n";
            let expected = ids.envelope(true, json!([ids.choice(text, None, false)]));
            let event: Value = serde_json::from_str(&ids.text_event(text, None)).unwrap();
            assert_eq!(event, expected);
            let stamped: Value = serde_json::from_str(&ids.text_event(text, Some(42))).unwrap();
            assert_eq!(stamped["produced_ns"], 42);
        }
    }
}
