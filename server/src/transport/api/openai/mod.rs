//! The OpenAI API under `/v1`: `GET /models` and `/models/{id}`,
//! `POST /chat/completions`, `/completions` and `/embeddings`, streaming
//! (SSE) and not. Each handler reads its body into a [`Generate`], starts
//! it on the generation service and frames what comes back; keep-alive
//! comments go out during a long prefill; errors are OpenAI's
//! `{"error": {…}}` with the service's status and `Retry-After`.

mod error;
pub mod options;
mod stream;
mod wire;

use std::sync::Arc;
use std::time::Duration;

use axum::Json;
use axum::Router;
use axum::body::Bytes;
use axum::extract::{Path, State};
use axum::response::sse::KeepAlive;
use axum::response::{IntoResponse, Response};
use axum::routing::{any, get, post};
use base64::Engine as _;
use serde::Deserialize;
use serde_json::{Value, json};

pub use error::{OpenAiError, shape};
use stream::{Chunks, Ids, Kind, call_value, finish_reason, usage};

use super::super::clock::unix_now;
use super::super::errors::not_found;
use super::super::state::AppState;
use super::drive::{frames, sse};
use super::logprobs::{Chat, Completion, Spliced, Step, json_response};
use crate::service::ModelInfo;
use crate::service::streams::new_stream_id;
use crate::service::{Running, ServiceError, parse_body};

type Result<T> = std::result::Result<T, OpenAiError>;

/// The routes, and the answer to any other path under `/v1` (another
/// API's routes there, with their own shape, take precedence).
pub fn routes() -> Router<Arc<AppState>> {
    Router::new()
        .route("/v1/models", get(models))
        .route("/v1/models/{*id}", get(model))
        .route("/v1/chat/completions", post(chat_completions))
        .route("/v1/completions", post(completions))
        .route("/v1/embeddings", post(embeddings))
        .route("/v1/{*rest}", any(not_found))
}

fn model_entry(state: &AppState, m: &ModelInfo) -> Value {
    let mut entry = json!({"id": m.name, "object": "model", "created": state.started_unix,
                           "owned_by": "rkllm", "capabilities": m.capabilities,
                           "state": m.state.as_str()});
    if let Some(error) = &m.error {
        entry["error"] = json!(error);
    }
    entry
}

/// `GET /v1/models`: every model, with what it takes and its load state.
async fn models(State(state): State<Arc<AppState>>) -> Response {
    let data: Vec<Value> = state
        .service
        .models()
        .iter()
        .map(|m| model_entry(&state, m))
        .collect();
    Json(json!({"object": "list", "data": data})).into_response()
}

/// `GET /v1/models/{id}` (ids may hold a slash, as Hugging Face's do).
async fn model(State(state): State<Arc<AppState>>, Path(id): Path<String>) -> Result<Response> {
    let info = state.service.model(Some(&id))?;
    Ok(Json(model_entry(&state, &info)).into_response())
}

/// `POST /v1/chat/completions`.
async fn chat_completions(State(state): State<Arc<AppState>>, body: Bytes) -> Result<Response> {
    respond(state, &body, Kind::Chat).await
}

/// `POST /v1/completions`.
async fn completions(State(state): State<Arc<AppState>>, body: Bytes) -> Result<Response> {
    respond(state, &body, Kind::Completion).await
}

async fn respond(state: Arc<AppState>, body: &[u8], kind: Kind) -> Result<Response> {
    crate::metrics::api_request("openai");
    let request: wire::Request = parse_body(body)?;
    let (streaming, include_usage) = (request.stream, request.include_usage());
    let mut generate = request.generate(kind == Kind::Chat)?;
    if kind == Kind::Completion {
        // Text completions have no tools.
        generate.tools.clear();
    }
    let running = state
        .service
        .start(generate)
        .await
        .map_err(|err| match kind {
            // A chat's prompt is its `messages`.
            Kind::Chat => err.renamed("prompt", "messages"),
            Kind::Completion => err,
        })?;
    let ids = Ids {
        id: match kind {
            Kind::Chat => format!("chatcmpl-{}", new_stream_id()),
            Kind::Completion => format!("cmpl-{}", new_stream_id()),
        },
        created: unix_now(),
        model: running.model().to_owned(),
        kind,
    };
    if streaming {
        return Ok(stream_response(running, ids, include_usage));
    }
    whole_response(running, &ids).await
}

async fn whole_response(running: Running, ids: &Ids) -> Result<Response> {
    let done = running.collect().await?.ok()?;
    let thinking = (!done.thinking.is_empty()).then_some(done.thinking.as_str());
    let reason = finish_reason(done.ending.finish);
    let choice = match ids.kind {
        Kind::Chat => {
            let content = if done.calls.is_empty() || !done.text.trim().is_empty() {
                json!(done.text)
            } else {
                Value::Null
            };
            let mut message = json!({"role": "assistant", "content": content});
            if let Some(thinking) = thinking {
                message["reasoning_content"] = json!(thinking);
            }
            if !done.calls.is_empty() {
                message["tool_calls"] = done.calls.iter().map(call_value).collect();
            }
            json!({"index": 0, "message": message, "logprobs": null, "finish_reason": reason})
        }
        Kind::Completion => {
            let mut choice = json!({"index": 0, "text": done.text, "logprobs": null,
                                    "finish_reason": reason});
            if let Some(thinking) = thinking {
                choice["reasoning_content"] = json!(thinking);
            }
            choice
        }
    };
    let mut body = ids.envelope(false, json!([choice]));
    body["usage"] = usage(&done.ending.usage);
    if done.logprobs.is_empty() {
        return Ok(Json(body).into_response());
    }
    // The log probabilities written straight into the body.
    let at = vec![Step::Key("choices"), Step::At(0), Step::Key("logprobs")];
    let es = &done.logprobs;
    Ok(match ids.kind {
        Kind::Chat => json_response(&Spliced {
            value: &body,
            fields: &[(at, Chat(es))],
        }),
        Kind::Completion => json_response(&Spliced {
            value: &body,
            fields: &[(
                at,
                Completion {
                    entries: es,
                    offset: 0,
                },
            )],
        }),
    })
}

/// Streams the generation as SSE (see [`drive`](super::drive)), with
/// keep-alive comments during a long prefill.
fn stream_response(running: Running, ids: Ids, include_usage: bool) -> Response {
    let chunks = Chunks {
        ids,
        include_usage,
        offset: 0,
    };
    let keep_alive = KeepAlive::new()
        .interval(Duration::from_secs(15))
        .text("keep-alive");
    sse(frames(running, chunks), keep_alive)
}

#[derive(Debug, Deserialize)]
struct EmbeddingRequest {
    model: Option<String>,
    #[serde(default)]
    input: Value,
    encoding_format: Option<String>,
    dimensions: Option<Value>,
    /// Read for its type; not used.
    #[allow(dead_code)]
    user: Option<String>,
}

/// `POST /v1/embeddings`: `input` a string or an array of strings, each
/// embedded by the model (an `embedding = true` model) in turn.
async fn embeddings(State(state): State<Arc<AppState>>, body: Bytes) -> Result<Response> {
    let request: EmbeddingRequest = parse_body(&body)?;
    let base64 = match request.encoding_format.as_deref() {
        None | Some("float") => false,
        Some("base64") => true,
        Some(other) => {
            return Err(ServiceError::invalid(
                "encoding_format",
                format!("`encoding_format` must be \"float\" or \"base64\", got {other:?}"),
            )
            .into());
        }
    };
    if request.dimensions.is_some() {
        return Err(ServiceError::unsupported(
            "dimensions",
            "`dimensions` is not supported: the model's vectors have the width it was built with",
        )
        .into());
    }
    let embedded = state
        .service
        .embed(request.model, &request.input, None)
        .await?;
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
    Ok(Json(json!({
        "object": "list",
        "data": data,
        "model": embedded.model,
        "usage": {"prompt_tokens": embedded.prompt_tokens, "total_tokens": embedded.prompt_tokens}
    }))
    .into_response())
}
