//! The Anthropic Messages API, as Claude Code and the official clients
//! speak it: `POST /v1/messages` (the beta namespace's `?beta=true`
//! ignored), streaming as named SSE events or not, and
//! `POST /v1/messages/count_tokens`. Each request is read into a
//! [`Generate`](crate::service::Generate), started on the generation
//! service, and what comes back is written as Anthropic's message or
//! events; `ping` events go out during a long prefill; errors are
//! Anthropic's `{"type": "error", "error": {…}}`. `anthropic-version` and
//! `anthropic-beta` are accepted and not read.

mod content;
mod error;
mod stream;
mod wire;

use std::sync::Arc;
use std::time::Duration;

use axum::Json;
use axum::Router;
use axum::body::Bytes;
use axum::extract::{OriginalUri, State};
use axum::http::{Method, StatusCode};
use axum::response::sse::{Event as SseEvent, KeepAlive};
use axum::response::{IntoResponse, Response};
use axum::routing::{any, post};
use serde_json::json;

pub use error::{AnthropicError, shape};
use stream::{Blocks, Events, Ids};

use super::super::errors::neutral;
use super::super::state::AppState;
use super::drive::{frames, sse};
use crate::service::streams::new_stream_id;
use crate::service::{Running, parse_body};

type Result<T> = std::result::Result<T, AnthropicError>;

/// How often a `ping` event goes out while nothing else does.
const PING_INTERVAL: Duration = Duration::from_secs(3);

/// The routes, and the answer to any other path under `/v1/messages`.
pub fn routes() -> Router<Arc<AppState>> {
    Router::new()
        .route("/v1/messages", post(messages))
        .route("/v1/messages/count_tokens", post(count_tokens))
        .route("/v1/messages/{*rest}", any(not_found))
}

/// The answer to a path under `/v1/messages` that no route serves.
async fn not_found(method: Method, uri: OriginalUri) -> Response {
    neutral(
        StatusCode::NOT_FOUND,
        format!(
            "no endpoint {method} {}: the Anthropic Messages API has POST /v1/messages and \
             POST /v1/messages/count_tokens; see docs/anthropic-responses.md",
            uri.path()
        ),
    )
}

/// `POST /v1/messages`.
async fn messages(State(state): State<Arc<AppState>>, body: Bytes) -> Result<Response> {
    crate::metrics::api_request("anthropic");
    let request: wire::Request = parse_body(&body)?;
    let model = request.model()?;
    request.require_max_tokens()?;
    let streaming = request.stream;
    let mut generate = request.generate()?;
    // `max_tokens` is a bound the model may stop short of, and clients
    // ask for far more than a board holds (Claude Code: 32000): above the
    // server's own bound it is that bound.
    let limit = u64::from(state.service.request_limits().max_tokens_limit);
    generate.max_tokens = generate.max_tokens.map(|n| n.min(limit));
    let estimate = if streaming {
        state.service.count_tokens(&generate).await.unwrap_or(0)
    } else {
        0
    };
    let running = state.service.start(generate).await.map_err(|err| {
        error::prompt_too_long(
            err.renamed("prompt", "messages")
                .renamed("stop", "stop_sequences"),
        )
    })?;
    let ids = Ids {
        id: format!("msg_{}", new_stream_id()),
        model,
    };
    if streaming {
        return Ok(stream_response(running, ids, estimate));
    }
    let done = running.collect().await?.ok()?;
    Ok(Json(stream::message(&ids, &done)).into_response())
}

/// Streams the generation as named SSE events (see
/// [`drive`](super::drive)), `message_start` first, with `ping` events
/// during a long prefill.
fn stream_response(running: Running, ids: Ids, estimate: u32) -> Response {
    let events = Events {
        blocks: Blocks::new(ids),
        estimate,
    };
    let ping = SseEvent::default().event("ping").data(r#"{"type":"ping"}"#);
    sse(
        frames(running, events),
        KeepAlive::new().interval(PING_INTERVAL).event(ping),
    )
}

/// `POST /v1/messages/count_tokens`: the input tokens a messages request
/// would take, estimated as the server checks a prompt against a model's
/// context.
async fn count_tokens(State(state): State<Arc<AppState>>, body: Bytes) -> Result<Response> {
    let request: wire::Request = parse_body(&body)?;
    let model = request.model()?;
    state.service.model(Some(&model))?;
    let tokens = state.service.count_tokens(&request.generate()?).await?;
    Ok(Json(json!({"input_tokens": tokens})).into_response())
}
