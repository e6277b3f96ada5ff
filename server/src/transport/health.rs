//! `GET /health` (the process is alive) and `GET /ready` (some model can
//! serve and every queue has room), both open, without API keys, for
//! supervisors and load balancers; and `GET /metrics` (behind the keys).

use std::sync::Arc;

use axum::Json;
use axum::extract::State;
use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};
use serde_json::json;

use super::state::AppState;
use crate::{board, metrics};

/// `GET /health`: 200 while the process serves requests, with this
/// node's name.
pub async fn health(State(state): State<Arc<AppState>>) -> Response {
    Json(json!({"status": "ok", "version": env!("CARGO_PKG_VERSION"),
                "node_id": state.settings.node_id}))
    .into_response()
}

/// `GET /ready`: 200 while some model can serve and no queue is full,
/// 503 with the reason otherwise; failed models are listed with why
/// either way (`failed`). What `doctor` found at start to block serving
/// (the wrong NPU driver, a runtime known to crash on this chip) makes it
/// 503 too, with those findings as the reason and in `blocking`.
pub async fn ready(State(state): State<Arc<AppState>>) -> Response {
    let mut readiness = state.service.readiness();
    let blocking = &state.settings.blocking;
    if !blocking.is_empty() {
        readiness.ready = false;
        readiness.reason = Some(format!("doctor: {}", blocking.join("; ")));
    }
    let mut body = json!({"ready": readiness.ready});
    if let Some(reason) = &readiness.reason {
        body["reason"] = json!(reason);
    }
    if !blocking.is_empty() {
        body["blocking"] = json!(blocking);
    }
    if !readiness.failed.is_empty() {
        body["failed"] = readiness
            .failed
            .iter()
            .map(|(model, error)| json!({"model": model, "error": error}))
            .collect();
    }
    let status = if readiness.ready {
        StatusCode::OK
    } else {
        StatusCode::SERVICE_UNAVAILABLE
    };
    (status, Json(body)).into_response()
}

/// `GET /metrics`: the Prometheus text exposition with the current gauges,
/// the board's read now (a few small files, off the async threads, within
/// the board's read budget: see `board::Sampler`).
pub async fn metrics(State(state): State<Arc<AppState>>) -> Response {
    let snapshot = state.board.sample().await;
    board::log_missing_once(&snapshot);
    let board = board::samples(&snapshot);
    let gauges = metrics::Gauges {
        board,
        active_streams: state.streams.active_streams(),
        queued_requests: state.service.queued(),
        buffered_bytes: state.streams.total_bytes(),
        mcp_sessions: state.mcp_sessions.len(),
        models: state
            .service
            .models()
            .into_iter()
            .map(|m| metrics::ModelGauge {
                name: m.name,
                state: m.state.as_str(),
                memory_bytes: m.memory_bytes,
                tokenizer_memory_bytes: m.tokenizer.and_then(|t| t.memory_bytes),
                kv_cache_tokens: m.kv_cache_tokens.filter(|_| m.loaded),
                context_length: m.context_length,
                lora_adapters: if m.loaded {
                    m.lora_adapters
                } else {
                    Vec::new()
                },
            })
            .collect(),
    };
    match metrics::render(gauges) {
        Ok(text) => (
            [(
                header::CONTENT_TYPE,
                "application/openmetrics-text; version=1.0.0; charset=utf-8",
            )],
            text,
        )
            .into_response(),
        Err(_) => StatusCode::INTERNAL_SERVER_ERROR.into_response(),
    }
}
