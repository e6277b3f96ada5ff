//! The Ollama API: `GET /api/version`, `/api/tags`, `/api/ps`,
//! `POST /api/show`, `/api/generate` and `/api/chat`, streaming as NDJSON
//! (one object per line) and not. Every chat line carries a `message`
//! with a role; durations are integer nanoseconds; `done_reason` is `stop`
//! or `length`; errors are `{"error": "..."}` with the matching status.

use std::convert::Infallible;
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime};

use axum::Json;
use axum::body::{Body, Bytes};
use axum::extract::State;
use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};
use serde::Deserialize;
use serde_json::{Value, json};

use super::clock::rfc3339;
use super::compat::{
    ChatMessage, EmbedFailure, embed_all, image_sources, log_ignored_fields, next_shown,
    prompt_from_messages, start_private, turns,
};
use super::images;
use super::state::AppState;
use super::tools::{ToolCall, ToolCallFilter};
use crate::backend::{IMAGE_TAG, ImageData};
use crate::engine::{
    EngineError, KeepAlive, ModelInfo, Role, RunRequest, Sampling, Turn, ValidationError,
};
use crate::rpc::embedding_inputs;
use crate::stream::PrivateStream;
use crate::vocab::{EndInfo, FinishReason};

/// The Ollama API version reported to clients that probe it.
pub const OLLAMA_VERSION: &str = "0.9.0";

fn error(status: StatusCode, message: impl Into<String>) -> Response {
    (status, Json(json!({"error": message.into()}))).into_response()
}

fn engine_error(err: EngineError) -> Response {
    match err {
        EngineError::Invalid(ValidationError::UnknownModel { name, available }) => {
            crate::metrics::rejected("model_unavailable");
            error(
                StatusCode::NOT_FOUND,
                format!(
                    "model '{name}' not found; the models are: {}",
                    available.join(", ")
                ),
            )
        }
        EngineError::Invalid(
            ValidationError::Invalid { message, .. } | ValidationError::TooLarge { message, .. },
        ) => {
            crate::metrics::rejected("invalid_params");
            error(StatusCode::BAD_REQUEST, message)
        }
        other => {
            crate::metrics::rejected("busy");
            error(StatusCode::SERVICE_UNAVAILABLE, other.to_string())
        }
    }
}

/// `GET /api/version`.
pub async fn version() -> Response {
    Json(json!({"version": OLLAMA_VERSION})).into_response()
}

/// Ollama's `details`, with what the model file's name says (chip,
/// quantisation, runtime version).
fn details(model: &ModelInfo) -> Value {
    let file = model
        .path
        .as_ref()
        .and_then(|p| p.file_name())
        .map(|f| f.to_string_lossy().into_owned())
        .unwrap_or_default();
    let said = crate::store::details_of(&file);
    let mut details = json!({"parent_model": "", "format": "rkllm", "family": "", "families": [],
                             "parameter_size": "",
                             "quantization_level": said.quantization.clone().unwrap_or_default()});
    if let Some(platform) = said.platform {
        details["platform"] = json!(platform);
    }
    if let Some(version) = said.runtime_version {
        details["runtime_version"] = json!(version);
    }
    details
}

fn model_entry(state: &AppState, model: &ModelInfo) -> Value {
    let meta = model.path.as_ref().and_then(|p| std::fs::metadata(p).ok());
    let size = meta.as_ref().map_or(0, std::fs::Metadata::len);
    let stored = state
        .store
        .store
        .get(&model.name)
        .ok()
        .flatten()
        .filter(|m| model.path.as_ref().is_some_and(|p| p.ends_with(&m.file)));
    let modified = match &stored {
        Some(m) => SystemTime::UNIX_EPOCH + Duration::from_secs(m.pulled_unix),
        None => meta
            .and_then(|m| m.modified().ok())
            .unwrap_or(state.started),
    };
    let digest: String = match &stored {
        Some(m) => m.sha256.clone(),
        None => {
            let mut h: u64 = 0xcbf2_9ce4_8422_2325;
            for b in model.name.bytes() {
                h = (h ^ u64::from(b)).wrapping_mul(0x0000_0100_0000_01b3);
            }
            format!("{h:016x}").repeat(4)
        }
    };
    let mut entry = json!({"name": model.name, "model": model.name, "modified_at": rfc3339(modified),
                           "size": size, "digest": digest, "details": details(model)});
    if model.state == crate::engine::ModelState::Failed {
        // Keys Ollama does not have, present only for a model that cannot
        // be served: why.
        entry["state"] = json!("failed");
        entry["error"] = json!(model.error);
    }
    entry
}

/// `GET /api/tags`.
pub async fn tags(State(state): State<Arc<AppState>>) -> Response {
    let models: Vec<Value> = state
        .engine
        .models()
        .iter()
        .map(|m| model_entry(&state, m))
        .collect();
    Json(json!({"models": models})).into_response()
}

/// `GET /api/ps`: the loaded models, with when each unloads (a model kept
/// loaded for good shows a date far ahead) and its size: the larger of the
/// model file and its runners' resident memory, all of it NPU-reachable
/// memory (`size_vram`), the NPU sharing the board's RAM. Models marked
/// failed after repeated crashes are listed apart, under `failed` (a key
/// Ollama does not have, present only then), with why.
pub async fn ps(State(state): State<Arc<AppState>>) -> Response {
    let now = SystemTime::now();
    let all = state.engine.models();
    let failed: Vec<Value> = all
        .iter()
        .filter(|m| m.state == crate::engine::ModelState::Failed)
        .map(|m| json!({"name": m.name, "model": m.name, "error": m.error}))
        .collect();
    let models: Vec<Value> = all
        .iter()
        .filter(|m| m.loaded)
        .map(|m| {
            let mut entry = model_entry(&state, m);
            let expires = now
                + m.expires_in
                    .unwrap_or(Duration::from_secs(10 * 365 * 86_400));
            let size = m.size_bytes.unwrap_or(0).max(m.memory_bytes.unwrap_or(0));
            entry["expires_at"] = json!(rfc3339(expires));
            entry["size"] = json!(size);
            entry["size_vram"] = json!(size);
            entry
        })
        .collect();
    if failed.is_empty() {
        Json(json!({"models": models})).into_response()
    } else {
        Json(json!({"models": models, "failed": failed})).into_response()
    }
}

/// Reads Ollama's `keep_alive`, if the request has one.
fn keep_alive(value: Option<&Value>) -> Result<Option<KeepAlive>, Box<Response>> {
    value
        .filter(|v| !v.is_null())
        .map(|v| KeepAlive::parse(v).map_err(|m| Box::new(error(StatusCode::BAD_REQUEST, m))))
        .transpose()
}

/// A request without input loads the model (or, with `keep_alive: 0`,
/// unloads it), as Ollama does; the answer says which.
async fn load_or_unload(
    state: &AppState,
    model: Option<&str>,
    keep_alive: Option<KeepAlive>,
    api: Api,
) -> Response {
    let result = if keep_alive == Some(KeepAlive::For(Duration::ZERO)) {
        state
            .engine
            .unload(model)
            .await
            .map(|(name, _)| (name, "unload"))
    } else {
        state
            .engine
            .load(model, keep_alive)
            .await
            .map(|name| (name, "load"))
    };
    match result {
        Ok((name, reason)) => {
            let mut answer = json!({"model": name, "created_at": rfc3339(SystemTime::now()),
                                    "done": true, "done_reason": reason});
            match api {
                Api::Generate => answer["response"] = json!(""),
                Api::Chat => answer["message"] = json!({"role": "assistant", "content": ""}),
            }
            Json(answer).into_response()
        }
        Err(err) => engine_error(err),
    }
}

/// Resolves an Ollama model name (`name` or `name:latest`) to one of ours.
fn resolve(state: &AppState, name: Option<&str>) -> Result<Option<String>, Box<Response>> {
    let Some(name) = name.filter(|n| !n.is_empty()) else {
        return Ok(None);
    };
    let models = state.engine.models();
    let bare = name.strip_suffix(":latest").unwrap_or(name);
    // A stored model also answers to what it was pulled as (`owner/repo:file`).
    let pulled_as = || state.store.find_by_source(name).map(|m| m.name);
    models
        .iter()
        .find(|m| m.name == name || m.name == bare)
        .map(|m| m.name.clone())
        .or_else(pulled_as)
        .filter(|found| models.iter().any(|m| &m.name == found))
        .map(Some)
        .ok_or_else(|| {
            let names: Vec<&str> = models.iter().map(|m| m.name.as_str()).collect();
            Box::new(error(
                StatusCode::NOT_FOUND,
                format!(
                    "model '{name}' not found; the models are: {}",
                    names.join(", ")
                ),
            ))
        })
}

#[derive(Debug, Deserialize)]
struct ShowRequest {
    model: Option<String>,
    name: Option<String>,
}

/// `POST /api/show`.
pub async fn show(State(state): State<Arc<AppState>>, body: Bytes) -> Response {
    let request: ShowRequest = match parse(&body) {
        Ok(r) => r,
        Err(response) => return *response,
    };
    let name = match resolve(&state, request.model.as_deref().or(request.name.as_deref())) {
        Ok(Some(name)) => name,
        Ok(None) => return error(StatusCode::BAD_REQUEST, "`model` is required"),
        Err(response) => return *response,
    };
    let info = state.engine.model(Some(&name)).ok();
    let entry = info
        .as_ref()
        .map(|m| model_entry(&state, m))
        .unwrap_or_default();
    let details = info.as_ref().map(details).unwrap_or_default();
    let mut capabilities = vec!["completion", "tools"];
    if info
        .as_ref()
        .is_some_and(|m| m.capabilities.contains(&"vision"))
    {
        capabilities.push("vision");
    }
    if info
        .as_ref()
        .is_some_and(|m| m.capabilities.contains(&"embedding"))
    {
        capabilities = vec!["embedding"];
    }
    Json(json!({
        "modelfile": "", "parameters": "", "template": "", "details": details,
        "model_info": {"general.architecture": "rkllm", "general.basename": name},
        "capabilities": capabilities, "modified_at": entry["modified_at"]
    }))
    .into_response()
}

#[derive(Debug, Default, Deserialize)]
struct Options {
    num_predict: Option<i64>,
    temperature: Option<f64>,
    top_p: Option<f64>,
    top_k: Option<u32>,
    repeat_penalty: Option<f64>,
    frequency_penalty: Option<f64>,
    presence_penalty: Option<f64>,
    /// rkllm-server's own: a LoRA adapter of the model.
    lora: Option<String>,
}

#[derive(Debug, Deserialize)]
struct GenerateRequest {
    model: Option<String>,
    #[serde(default)]
    prompt: String,
    system: Option<String>,
    stream: Option<bool>,
    #[serde(default)]
    options: Options,
    think: Option<bool>,
    keep_alive: Option<Value>,
    #[serde(default)]
    images: Vec<String>,
}

#[derive(Debug, Deserialize)]
struct ChatRequest {
    model: Option<String>,
    #[serde(default)]
    messages: Vec<ChatMessage>,
    stream: Option<bool>,
    #[serde(default)]
    options: Options,
    think: Option<bool>,
    tools: Option<Vec<Value>>,
    keep_alive: Option<Value>,
}

#[derive(Debug, Deserialize)]
struct EmbedRequest {
    model: Option<String>,
    #[serde(default)]
    input: Value,
    keep_alive: Option<Value>,
    dimensions: Option<Value>,
}

#[derive(Debug, Deserialize)]
struct LegacyEmbedRequest {
    model: Option<String>,
    #[serde(default)]
    prompt: String,
    keep_alive: Option<Value>,
}

fn embed_error(failure: EmbedFailure) -> Response {
    match failure {
        EmbedFailure::Refused(err) => engine_error(err),
        EmbedFailure::Failed(message) => error(StatusCode::INTERNAL_SERVER_ERROR, message),
    }
}

/// `POST /api/embed`: `input` a string or a list of strings.
pub async fn embed(State(state): State<Arc<AppState>>, body: Bytes) -> Response {
    log_ignored_fields(
        "/api/embed",
        &body,
        &[
            "model",
            "input",
            "keep_alive",
            "truncate",
            "options",
            "dimensions",
        ],
    );
    let request: EmbedRequest = match parse(&body) {
        Ok(r) => r,
        Err(response) => return *response,
    };
    if request.dimensions.is_some() {
        return error(
            StatusCode::BAD_REQUEST,
            "`dimensions` is not supported: the model's vectors have the width it was built with",
        );
    }
    let (model, keep_alive) =
        match model_and_keep_alive(&state, &request.model, &request.keep_alive) {
            Ok(both) => both,
            Err(response) => return *response,
        };
    let inputs = match embedding_inputs(&request.input, state.rpc.limits.max_embedding_inputs) {
        Ok(inputs) => inputs,
        Err(message) => return error(StatusCode::BAD_REQUEST, message),
    };
    match embed_all(&state, model, inputs, keep_alive).await {
        Ok(embedded) => {
            let nanos = u64::try_from(embedded.elapsed.as_nanos()).unwrap_or(u64::MAX);
            Json(json!({
                "model": embedded.model,
                "embeddings": embedded.vectors.iter().map(|v| json!(&v[..])).collect::<Vec<_>>(),
                "total_duration": nanos,
                "load_duration": 0,
                "prompt_eval_count": embedded.prompt_tokens,
            }))
            .into_response()
        }
        Err(failure) => embed_error(failure),
    }
}

/// `POST /api/embeddings`, Ollama's older form: one `prompt`, one
/// `embedding`.
pub async fn embeddings(State(state): State<Arc<AppState>>, body: Bytes) -> Response {
    log_ignored_fields(
        "/api/embeddings",
        &body,
        &["model", "prompt", "keep_alive", "options"],
    );
    let request: LegacyEmbedRequest = match parse(&body) {
        Ok(r) => r,
        Err(response) => return *response,
    };
    if request.prompt.is_empty() {
        return error(StatusCode::BAD_REQUEST, "`prompt` must not be empty");
    }
    let (model, keep_alive) =
        match model_and_keep_alive(&state, &request.model, &request.keep_alive) {
            Ok(both) => both,
            Err(response) => return *response,
        };
    match embed_all(&state, model, vec![request.prompt], keep_alive).await {
        Ok(embedded) => {
            Json(json!({"embedding": embedded.vectors.first().map(|v| &v[..])})).into_response()
        }
        Err(failure) => embed_error(failure),
    }
}

/// A request body as `T`; a malformed one is a 400.
pub(super) fn parse<T: serde::de::DeserializeOwned>(body: &Bytes) -> Result<T, Box<Response>> {
    serde_json::from_slice(body).map_err(|e| {
        Box::new(error(
            StatusCode::BAD_REQUEST,
            format!("invalid request body: {e}"),
        ))
    })
}

/// A request's `model` (resolved; `None`: the default) and `keep_alive`.
fn model_and_keep_alive(
    state: &AppState,
    model: &Option<String>,
    keep_alive_value: &Option<Value>,
) -> Result<(Option<String>, Option<KeepAlive>), Box<Response>> {
    Ok((
        resolve(state, model.as_deref())?,
        keep_alive(keep_alive_value.as_ref())?,
    ))
}

/// The request's images as bytes; a bad one is a 400.
async fn load_images(
    state: &AppState,
    sources: Result<Vec<images::ImageSource>, String>,
) -> Result<Vec<ImageData>, Box<Response>> {
    let sources = sources.map_err(|m| Box::new(error(StatusCode::BAD_REQUEST, m)))?;
    if sources.is_empty() {
        return Ok(Vec::new());
    }
    images::load(sources, &state.settings.remote_images)
        .await
        .map_err(|m| Box::new(error(StatusCode::BAD_REQUEST, m)))
}

fn run_request(
    model: Option<String>,
    prompt: String,
    role: Role,
    options: &Options,
    think: Option<bool>,
    conversation: Option<Vec<Turn>>,
    tools: Option<String>,
) -> RunRequest {
    RunRequest {
        prompt,
        model,
        max_tokens: options
            .num_predict
            .and_then(|n| u64::try_from(n).ok())
            .filter(|n| *n > 0),
        sampling: Sampling {
            temperature: options.temperature,
            top_p: options.top_p,
            top_k: options.top_k,
            repeat_penalty: options.repeat_penalty,
            frequency_penalty: options.frequency_penalty,
            presence_penalty: options.presence_penalty,
        },
        role,
        enable_thinking: think,
        conversation,
        tools,
        images: Vec::new(),
        embed: false,
        clear_cache: false,
        lora: options.lora.clone(),
        stop: Vec::new(),
    }
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum Api {
    Generate,
    Chat,
}

/// `POST /api/generate`.
pub async fn generate(State(state): State<Arc<AppState>>, body: Bytes) -> Response {
    log_ignored_fields(
        "/api/generate",
        &body,
        &[
            "model",
            "prompt",
            "system",
            "stream",
            "options",
            "think",
            "keep_alive",
            "images",
        ],
    );
    let request: GenerateRequest = match parse(&body) {
        Ok(r) => r,
        Err(response) => return *response,
    };
    let (model, keep_alive) =
        match model_and_keep_alive(&state, &request.model, &request.keep_alive) {
            Ok(both) => both,
            Err(response) => return *response,
        };
    let name = model.clone().unwrap_or_else(|| default_model(&state));
    if request.prompt.is_empty() && request.images.is_empty() {
        return load_or_unload(&state, model.as_deref(), keep_alive, Api::Generate).await;
    }
    // The images' tags go before the text unless the prompt places them.
    let user = if request.images.is_empty() || request.prompt.contains(IMAGE_TAG) {
        request.prompt.clone()
    } else {
        IMAGE_TAG.repeat(request.images.len()) + &request.prompt
    };
    let prompt = match &request.system {
        Some(system) if !system.is_empty() => format!("{system}\n\n{user}"),
        _ => user,
    };
    let sources = request
        .images
        .iter()
        .enumerate()
        .map(|(i, image)| images::parse_source(image, i + 1))
        .collect::<Result<Vec<_>, _>>();
    let mut run = run_request(
        model,
        prompt,
        Role::User,
        &request.options,
        request.think,
        None,
        None,
    );
    match load_images(&state, sources).await {
        Ok(images) => run.images = images,
        Err(response) => return *response,
    }
    respond(
        &state,
        run,
        keep_alive,
        name,
        request.stream.unwrap_or(true),
        Api::Generate,
    )
    .await
}

/// `POST /api/chat`.
pub async fn chat(State(state): State<Arc<AppState>>, body: Bytes) -> Response {
    log_ignored_fields(
        "/api/chat",
        &body,
        &[
            "model",
            "messages",
            "stream",
            "options",
            "think",
            "tools",
            "keep_alive",
        ],
    );
    let request: ChatRequest = match parse(&body) {
        Ok(r) => r,
        Err(response) => return *response,
    };
    let tools = request
        .tools
        .as_ref()
        .filter(|t| !t.is_empty())
        .map(|t| Value::Array(t.clone()).to_string());
    let (model, keep_alive) =
        match model_and_keep_alive(&state, &request.model, &request.keep_alive) {
            Ok(both) => both,
            Err(response) => return *response,
        };
    let name = model.clone().unwrap_or_else(|| default_model(&state));
    if request.messages.is_empty() {
        return load_or_unload(&state, model.as_deref(), keep_alive, Api::Chat).await;
    }
    let (prompt, role) = match prompt_from_messages(&request.messages) {
        Ok(p) => p,
        Err(message) => return error(StatusCode::BAD_REQUEST, message),
    };
    let mut run = run_request(
        model,
        prompt,
        role,
        &request.options,
        request.think,
        Some(turns(&request.messages)),
        tools,
    );
    match load_images(&state, image_sources(&request.messages)).await {
        Ok(images) => run.images = images,
        Err(response) => return *response,
    }
    respond(
        &state,
        run,
        keep_alive,
        name,
        request.stream.unwrap_or(true),
        Api::Chat,
    )
    .await
}

fn default_model(state: &AppState) -> String {
    state
        .engine
        .models()
        .first()
        .map(|m| m.name.clone())
        .unwrap_or_default()
}

/// A streamed NDJSON body: each batch of the stream becomes the lines of
/// one body frame.
struct Ndjson {
    private: PrivateStream,
    filter: Option<ToolCallFilter>,
    api: Api,
    model: String,
    started: Instant,
    done: bool,
}

impl Ndjson {
    /// The lines of the next batch: what the batch's chunks show, merged
    /// into one line (a client that keeps up gets a line per chunk, one
    /// that falls behind catches up in fewer), then the last line(s) at
    /// the end. `None` once the stream is over.
    async fn next_lines(&mut self) -> Option<Vec<u8>> {
        if self.done {
            return None;
        }
        let Some(shown) = next_shown(&mut self.private, &mut self.filter).await else {
            self.done = true;
            return None;
        };
        let mut out = Vec::new();
        if !shown.text.is_empty() {
            write_line(
                &mut out,
                self.api,
                &self.model,
                &shown.text,
                shown.produced_ns,
            );
        }
        let Some(end) = shown.end else {
            return Some(out);
        };
        self.done = true;
        let last = match &end.error {
            Some(err) => json!({"error": err.message}),
            None => {
                let (rest, calls) = self
                    .filter
                    .as_mut()
                    .map(ToolCallFilter::finish)
                    .unwrap_or_default();
                if calls.is_empty() {
                    last_line(self.api, &self.model, &rest, &end, self.started)
                } else {
                    let with = with_calls(line(self.api, &self.model, &rest), &calls);
                    push_value(&mut out, &with);
                    last_line(self.api, &self.model, "", &end, self.started)
                }
            }
        };
        push_value(&mut out, &last);
        Some(out)
    }
}

fn push_value(out: &mut Vec<u8>, value: &Value) {
    if serde_json::to_writer(&mut *out, value).is_ok() {
        out.push(b'\n');
    }
}

/// Writes one streamed text line, serialised directly: `line(api, model,
/// text)` without a `Value` tree, plus, in benchmark mode, the production
/// time of its oldest text (`produced_ns`).
fn write_line(out: &mut Vec<u8>, api: Api, model: &str, text: &str, produced_ns: Option<u64>) {
    #[derive(serde::Serialize)]
    struct Line<'a> {
        model: &'a str,
        created_at: String,
        #[serde(skip_serializing_if = "Option::is_none")]
        response: Option<&'a str>,
        #[serde(skip_serializing_if = "Option::is_none")]
        message: Option<Message<'a>>,
        done: bool,
        #[serde(skip_serializing_if = "Option::is_none")]
        produced_ns: Option<u64>,
    }
    #[derive(serde::Serialize)]
    struct Message<'a> {
        role: &'static str,
        content: &'a str,
    }
    let line = Line {
        model,
        created_at: rfc3339(SystemTime::now()),
        response: (api == Api::Generate).then_some(text),
        message: (api == Api::Chat).then_some(Message {
            role: "assistant",
            content: text,
        }),
        done: false,
        produced_ns,
    };
    if serde_json::to_writer(&mut *out, &line).is_ok() {
        out.push(b'\n');
    }
}

fn line(api: Api, model: &str, text: &str) -> Value {
    let now = rfc3339(SystemTime::now());
    match api {
        Api::Generate => {
            json!({"model": model, "created_at": now, "response": text, "done": false})
        }
        Api::Chat => {
            json!({"model": model, "created_at": now, "message": {"role": "assistant", "content": text}, "done": false})
        }
    }
}

/// The final line: done, the reason, counts and integer-nanosecond durations.
fn last_line(api: Api, model: &str, text: &str, end: &EndInfo, started: Instant) -> Value {
    let mut value = line(api, model, text);
    let ns = |ms: f64| (ms * 1_000_000.0).round() as u64;
    let timings = end.timings.unwrap_or_default();
    value["done"] = json!(true);
    value["done_reason"] = json!(if end.finish_reason == FinishReason::Length {
        "length"
    } else {
        "stop"
    });
    value["total_duration"] =
        json!(u64::try_from(started.elapsed().as_nanos()).unwrap_or(u64::MAX));
    value["load_duration"] = json!(0);
    value["prompt_eval_count"] = json!(end.usage.prompt_tokens);
    value["prompt_eval_duration"] = json!(ns(timings.prefill_ms));
    value["eval_count"] = json!(end.usage.completion_tokens);
    value["eval_duration"] = json!(ns(timings.generate_ms));
    value
}

/// Tool calls in Ollama's shape: arguments as an object.
fn ollama_calls(calls: &[ToolCall]) -> Vec<Value> {
    calls
        .iter()
        .map(|call| json!({"function": {"name": call.name, "arguments": call.arguments}}))
        .collect()
}

/// Adds parsed tool calls to a chat line.
fn with_calls(mut line: Value, calls: &[ToolCall]) -> Value {
    if !calls.is_empty() {
        line["message"]["tool_calls"] = json!(ollama_calls(calls));
    }
    line
}

async fn respond(
    state: &Arc<AppState>,
    run: RunRequest,
    keep_alive: Option<KeepAlive>,
    model: String,
    stream: bool,
    api: Api,
) -> Response {
    let started = Instant::now();
    // Tool calls are parsed out of chat answers to requests that offered tools.
    let mut filter = (api == Api::Chat && run.tools.is_some()).then(ToolCallFilter::default);
    let mut private = match start_private(state, run, keep_alive) {
        Ok(p) => p,
        Err(err) => return engine_error(err),
    };
    if !stream {
        let mut text = String::new();
        loop {
            let batch = private.consumer.next_batch().await;
            if batch.is_empty() {
                return error(StatusCode::INTERNAL_SERVER_ERROR, "the generation expired");
            }
            for chunk in batch {
                text.push_str(&chunk.delta);
                if let Some(end) = chunk.end {
                    if let Some(err) = &end.error {
                        return error(StatusCode::INTERNAL_SERVER_ERROR, err.message.clone());
                    }
                    let (text, calls) = match &mut filter {
                        Some(filter) => {
                            let mut shown = filter.push(&text);
                            let (rest, calls) = filter.finish();
                            shown.push_str(&rest);
                            (shown, calls)
                        }
                        None => (text, Vec::new()),
                    };
                    let last = with_calls(last_line(api, &model, &text, &end, started), &calls);
                    return Json(last).into_response();
                }
            }
        }
    }
    // NDJSON, read by the response body itself: the connection's task
    // waits on the stream and writes what it finds, with no task in
    // between. A client that leaves drops the body, which drops the
    // generation and aborts it.
    let lines = Ndjson {
        private,
        filter,
        api,
        model,
        started,
        done: false,
    };
    let body = Body::from_stream(futures_util::stream::unfold(
        lines,
        |mut lines| async move {
            let bytes = lines.next_lines().await?;
            Some((Ok::<_, Infallible>(Bytes::from(bytes)), lines))
        },
    ));
    ([(header::CONTENT_TYPE, "application/x-ndjson")], body).into_response()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_streamed_line_is_the_line_value_serialised() {
        for api in [Api::Generate, Api::Chat] {
            let text = "é \"quoted\"\n";
            let mut out = Vec::new();
            write_line(&mut out, api, "mock", text, None);
            assert_eq!(out.last(), Some(&b'\n'));
            let mut written: Value = serde_json::from_slice(&out).unwrap();
            let mut expected = line(api, "mock", text);
            // Both carry the time they were made.
            assert!(written["created_at"].as_str().unwrap().ends_with('Z'));
            written["created_at"] = json!(null);
            expected["created_at"] = json!(null);
            assert_eq!(written, expected);
            let mut stamped = Vec::new();
            write_line(&mut stamped, api, "mock", text, Some(42));
            let stamped: Value = serde_json::from_slice(&stamped).unwrap();
            assert_eq!(stamped["produced_ns"], 42);
        }
    }
}
