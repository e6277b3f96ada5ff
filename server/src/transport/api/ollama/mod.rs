//! The Ollama API under `/api`: `GET /version`, `/tags`, `/ps`,
//! `POST /show`, `/generate`, `/chat`, `/embed`, `/embeddings`, `/pull` and
//! `DELETE /delete`, streaming as NDJSON (one object per line) and not.
//! Each generating handler reads its body into a [`Generate`] on the
//! generation service and writes what comes back as Ollama's lines; errors
//! are `{"error": "…"}` with the service's status and `Retry-After`.

mod error;
mod ndjson;
mod store;
mod wire;

use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime};

use axum::Json;
use axum::Router;
use axum::body::Bytes;
use axum::extract::State;
use axum::http::{Method, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::{any, delete, get, post};
use serde::Deserialize;
use serde_json::{Value, json};

pub use error::{OllamaError, shape};
use ndjson::{Api, Lines, call_value};

use super::super::clock::rfc3339;
use super::super::errors::neutral;
use super::super::state::AppState;
use super::drive::{frames, ndjson};
use super::logprobs::{Entries, Spliced, Step, json_response};
use crate::service::{Generate, Running, ServiceError, parse_body};
use crate::service::{KeepAlive, ModelInfo, ModelState};

/// The Ollama API version reported to clients that probe it.
pub const OLLAMA_VERSION: &str = "0.9.0";

type Result<T> = std::result::Result<T, OllamaError>;

/// The routes, and the answer to any other path under `/api`.
pub fn routes() -> Router<Arc<AppState>> {
    Router::new()
        .route("/api/version", get(version))
        .route("/api/tags", get(tags))
        .route("/api/ps", get(ps))
        .route("/api/show", post(show))
        .route("/api/generate", post(generate))
        .route("/api/chat", post(chat))
        .route("/api/embed", post(embed))
        .route("/api/embeddings", post(embeddings))
        .route("/api/pull", post(store::pull))
        .route("/api/delete", delete(store::delete))
        .route("/api/{*rest}", any(not_found))
}

/// Ollama endpoints this server does not offer, with what to do instead.
const UNSUPPORTED: &[(&str, &str)] = &[
    (
        "/api/push",
        "rkllm-server does not push models to a registry",
    ),
    (
        "/api/create",
        "rkllm-server does not create models: convert one with Rockchip's rkllm-toolkit and add \
         the .rkllm file to [[models]] in the configuration",
    ),
    (
        "/api/copy",
        "rkllm-server does not copy models: add another [[models]] entry with the same path",
    ),
];

/// The answer to a path under `/api` that no route serves.
async fn not_found(method: Method, uri: axum::extract::OriginalUri) -> Response {
    let path = uri.path();
    match UNSUPPORTED.iter().find(|(p, _)| *p == path) {
        Some((_, advice)) => neutral(
            StatusCode::NOT_FOUND,
            format!("{path} is not supported: {advice}"),
        ),
        None => super::super::errors::not_found(method, uri).await,
    }
}

/// A request body as `T`; a malformed one is a 400 naming the field.
fn parse<T: serde::de::DeserializeOwned>(body: &[u8]) -> std::result::Result<T, Box<Response>> {
    parse_body(body).map_err(|err| Box::new(OllamaError(err).into_response()))
}

/// `GET /api/version`.
async fn version() -> Response {
    Json(json!({"version": OLLAMA_VERSION})).into_response()
}

/// The architecture a model's name says, as Ollama names it.
fn architecture(name: &str) -> &'static str {
    let name = name.to_ascii_lowercase();
    [
        ("qwen3", "qwen3"),
        ("qwen2", "qwen2"),
        ("qwq", "qwen2"),
        ("qwen", "qwen2"),
        ("llama", "llama"),
        ("gemma", "gemma"),
        ("phi", "phi3"),
        ("minicpm", "minicpm"),
        ("internlm", "internlm2"),
        ("glm", "chatglm"),
        ("deepseek", "qwen2"),
    ]
    .iter()
    .find(|(part, _)| name.contains(part))
    .map_or("rkllm", |(_, arch)| arch)
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
    let mut details = json!({"parent_model": "", "format": "rkllm",
                             "family": architecture(&model.name), "families": [],
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

/// The store's manifest of `model`, when the model is the stored one (not
/// a configured model of the same name).
fn stored_manifest(state: &AppState, model: &ModelInfo) -> Option<crate::store::Manifest> {
    state.store.manifest_of(&model.name, model.path.as_deref())
}

fn model_entry(state: &AppState, model: &ModelInfo) -> Value {
    let meta = model.path.as_ref().and_then(|p| std::fs::metadata(p).ok());
    let size = meta.as_ref().map_or(0, std::fs::Metadata::len);
    let stored = stored_manifest(state, model);
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
    if let Some(m) = &stored {
        // A key Ollama does not have, present only for a model of the
        // store: what it was pulled as and its tokenizer's repository
        // (what `rkllm-server list` shows).
        entry["stored"] = json!({"source": m.source.spec,
                                 "tokenizer": m.tokenizer.as_ref().map(|t| &t.repository)});
    }
    if model.state == ModelState::Failed {
        // Keys Ollama does not have, present only for a model that cannot
        // be served: why.
        entry["state"] = json!("failed");
        entry["error"] = json!(model.error);
    }
    entry
}

/// `GET /api/tags`.
async fn tags(State(state): State<Arc<AppState>>) -> Response {
    // The entries read each model file's size and each stored model's
    // manifest: off the async workers.
    let listed = Arc::clone(&state);
    let models: Vec<Value> = tokio::task::spawn_blocking(move || {
        listed
            .service
            .models()
            .iter()
            .map(|m| model_entry(&listed, m))
            .collect()
    })
    .await
    .unwrap_or_default();
    // `store` is this server's own key: where its store is and whether the
    // API may change it, which the command line reads to work through it.
    let store = &state.store;
    Json(json!({"models": models,
                "store": {"models_dir": store.models_dir(), "api_pull": store.api_pull}}))
    .into_response()
}

/// `GET /api/ps`: the loaded models, with when each unloads (a model kept
/// loaded for good shows a date far ahead) and its size: the larger of the
/// model file and its runners' resident memory, all of it NPU-reachable
/// memory (`size_vram`), the NPU sharing the board's RAM. Failed models
/// are listed apart, under `failed` (a key Ollama does not have, present
/// only then), with why.
async fn ps(State(state): State<Arc<AppState>>) -> Response {
    let now = SystemTime::now();
    let all = state.service.models();
    let failed: Vec<Value> = all
        .iter()
        .filter(|m| m.state == ModelState::Failed)
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

/// Resolves an Ollama model name (`name` or `name:latest`, or what a
/// stored model was pulled as) to one of ours; `None`: the default.
fn resolve(
    state: &AppState,
    name: Option<&str>,
) -> std::result::Result<Option<String>, ServiceError> {
    let Some(name) = name.filter(|n| !n.is_empty()) else {
        return Ok(None);
    };
    let models = state.service.models();
    let bare = name.strip_suffix(":latest").unwrap_or(name);
    let pulled_as = || state.store.find_by_source(name).map(|m| m.name);
    models
        .iter()
        .find(|m| m.name == name || m.name == bare)
        .map(|m| m.name.clone())
        .or_else(pulled_as)
        .filter(|found| models.iter().any(|m| &m.name == found))
        .map(Some)
        .ok_or_else(|| ServiceError::UnknownModel {
            name: name.to_owned(),
            available: models.iter().map(|m| m.name.clone()).collect(),
        })
}

#[derive(Debug, Deserialize)]
struct ShowRequest {
    model: Option<String>,
    name: Option<String>,
}

/// `POST /api/show`: details, what the model takes, its context length
/// (`model_info`) and the strings that end its replies (`parameters`).
async fn show(State(state): State<Arc<AppState>>, body: Bytes) -> Result<Response> {
    let request: ShowRequest = parse_body(&body)?;
    let name = resolve(&state, request.model.as_deref().or(request.name.as_deref()))?
        .ok_or_else(|| ServiceError::invalid("model", "`model` is required"))?;
    let info = state.service.model(Some(&name))?;
    let entry = model_entry(&state, &info);
    let mut capabilities = vec!["completion", "tools"];
    if info.capabilities.contains(&"vision") {
        capabilities.push("vision");
    }
    if info.capabilities.contains(&"thinking") {
        capabilities.push("thinking");
    }
    // A model that fills in the middle: Ollama's `insert`, and a template
    // that takes `.Suffix` (which editors such as Continue look for).
    let fim = if info.capabilities.contains(&"embedding") {
        capabilities = vec!["embedding"];
        None
    } else {
        state.service.fim(Some(&name)).await.ok()
    };
    if fim.is_some() {
        capabilities.push("insert");
    }
    let arch = architecture(&name);
    let mut model_info = json!({"general.architecture": arch, "general.basename": name});
    if let Some(length) = info.context_length {
        model_info[format!("{arch}.context_length")] = json!(length);
    }
    // The model's context as `num_ctx` (clients such as Continue send it
    // back as `options.num_ctx`, which must not exceed it), and its stops.
    let parameters: Vec<String> = info
        .context_length
        .map(|n| format!("num_ctx {n}"))
        .into_iter()
        .chain(
            info.stop_strings
                .iter()
                .map(|s| format!("stop {}", json!(s))),
        )
        .collect();
    let mut shown = json!({
        "modelfile": "", "parameters": parameters.join("\n"),
        "template": fim.map(|f| f.ollama_template()).unwrap_or_default(),
        "details": details(&info), "model_info": model_info,
        "capabilities": capabilities, "modified_at": entry["modified_at"],
        "tokenizer": info.tokenizer
    });
    // This server's own key: what the probes found of its runtime (absent
    // before its first load, and on the mock).
    if let Some(probes) = &info.probes {
        shown["probes"] = json!(probes);
    }
    if let Some(manifest) = stored_manifest(&state, &info) {
        // This server's own keys, for a model of the store: its manifest
        // and its file (what `rkllm-server show` prints).
        shown["path"] = json!(state.store.model_dir(&manifest.name).join(&manifest.file));
        shown["manifest"] = json!(manifest);
    }
    Ok(Json(shown).into_response())
}

/// A request without input loads the model (or, with `keep_alive: 0`,
/// unloads it), as Ollama does; the answer says which.
async fn load_or_unload(
    state: &AppState,
    model: Option<&str>,
    keep_alive: Option<KeepAlive>,
    api: Api,
) -> Result<Response> {
    let (name, reason) = if keep_alive == Some(KeepAlive::For(Duration::ZERO)) {
        let (name, _) = state.service.unload(model).await?;
        (name, "unload")
    } else {
        let name = state.service.load(model, keep_alive).await?;
        (name, "load")
    };
    let mut answer = json!({"model": name, "created_at": rfc3339(SystemTime::now()),
                            "done": true, "done_reason": reason});
    match api {
        Api::Generate => answer["response"] = json!(""),
        Api::Chat => answer["message"] = json!({"role": "assistant", "content": ""}),
    }
    Ok(Json(answer).into_response())
}

fn default_model(state: &AppState) -> String {
    state
        .service
        .models()
        .first()
        .map(|m| m.name.clone())
        .unwrap_or_default()
}

/// `POST /api/generate`.
async fn generate(State(state): State<Arc<AppState>>, body: Bytes) -> Result<Response> {
    crate::metrics::api_request("ollama");
    let request: wire::GenerateRequest = parse_body(&body)?;
    let model = resolve(&state, request.model.as_deref())?;
    let stream = request.stream.unwrap_or(true);
    if request.prompt.is_empty() && request.images.is_empty() {
        let keep_alive = wire::keep_alive(request.keep_alive.as_ref())?;
        return load_or_unload(&state, model.as_deref(), keep_alive, Api::Generate).await;
    }
    let generate = request.generate(model)?;
    respond(&state, generate, stream, Api::Generate).await
}

/// `POST /api/chat`.
async fn chat(State(state): State<Arc<AppState>>, body: Bytes) -> Result<Response> {
    crate::metrics::api_request("ollama");
    let request: wire::ChatRequest = parse_body(&body)?;
    let model = resolve(&state, request.model.as_deref())?;
    let stream = request.stream.unwrap_or(true);
    if request.messages.is_empty() {
        let keep_alive = wire::keep_alive(request.keep_alive.as_ref())?;
        return load_or_unload(&state, model.as_deref(), keep_alive, Api::Chat).await;
    }
    let generate = request.generate(model)?;
    respond(&state, generate, stream, Api::Chat).await
}

async fn respond(
    state: &Arc<AppState>,
    generate: Generate,
    stream: bool,
    api: Api,
) -> Result<Response> {
    let started = Instant::now();
    let fallback = generate
        .model
        .clone()
        .unwrap_or_else(|| default_model(state));
    let running = state.service.start(generate).await?;
    let lines = Lines {
        api,
        model: if running.model().is_empty() {
            fallback
        } else {
            running.model().to_owned()
        },
        started,
    };
    if stream {
        return Ok(stream_response(running, lines));
    }
    let done = running.collect().await?.ok()?;
    let thinking = (!done.thinking.is_empty()).then_some(done.thinking.as_str());
    let mut last = lines.last_line(&done.text, thinking, &done.ending);
    if api == Api::Chat && !done.calls.is_empty() {
        last["message"]["tool_calls"] = done.calls.iter().map(call_value).collect();
    }
    if done.logprobs.is_empty() {
        return Ok(Json(last).into_response());
    }
    // The log probabilities written straight into the body.
    let fields = [(vec![Step::Key("logprobs")], Entries(&done.logprobs))];
    Ok(json_response(&Spliced {
        value: &last,
        fields: &fields,
    }))
}

/// Streams the generation as NDJSON (see [`drive`](super::drive)): each
/// batch's lines in one body chunk.
fn stream_response(running: Running, lines: Lines) -> Response {
    ndjson(frames(running, lines))
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

/// `POST /api/embed`: `input` a string or a list of strings.
async fn embed(State(state): State<Arc<AppState>>, body: Bytes) -> Result<Response> {
    let request: EmbedRequest = parse_body(&body)?;
    if request.dimensions.is_some() {
        return Err(ServiceError::unsupported(
            "dimensions",
            "`dimensions` is not supported: the model's vectors have the width it was built with",
        )
        .into());
    }
    let model = resolve(&state, request.model.as_deref())?;
    let keep_alive = wire::keep_alive(request.keep_alive.as_ref())?;
    let embedded = state
        .service
        .embed(model, &request.input, keep_alive)
        .await?;
    let nanos = u64::try_from(embedded.elapsed.as_nanos()).unwrap_or(u64::MAX);
    Ok(Json(json!({
        "model": embedded.model,
        "embeddings": embedded.vectors.iter().map(|v| json!(&v[..])).collect::<Vec<_>>(),
        "total_duration": nanos,
        "load_duration": 0,
        "prompt_eval_count": embedded.prompt_tokens,
    }))
    .into_response())
}

/// `POST /api/embeddings`, Ollama's older form: one `prompt`, one
/// `embedding`.
async fn embeddings(State(state): State<Arc<AppState>>, body: Bytes) -> Result<Response> {
    let request: LegacyEmbedRequest = parse_body(&body)?;
    if request.prompt.is_empty() {
        return Err(ServiceError::invalid("prompt", "`prompt` must not be empty").into());
    }
    let model = resolve(&state, request.model.as_deref())?;
    let keep_alive = wire::keep_alive(request.keep_alive.as_ref())?;
    let embedded = state
        .service
        .embed(model, &json!(request.prompt), keep_alive)
        .await?;
    Ok(Json(json!({"embedding": embedded.vectors.first().map(|v| &v[..])})).into_response())
}
