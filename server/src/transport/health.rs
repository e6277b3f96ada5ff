//! `GET /health` (the process is alive) and `GET /ready` (no model has
//! failed and every queue has room), both open, without API keys, for
//! supervisors and load balancers; and `GET /metrics` (behind the keys).

use std::sync::Arc;

use axum::Json;
use axum::extract::State;
use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};
use serde_json::json;

use super::state::AppState;
use crate::metrics;

/// `GET /health`: 200 while the process serves requests, with this
/// node's name.
pub async fn health(State(state): State<Arc<AppState>>) -> Response {
    Json(json!({"status": "ok", "version": env!("CARGO_PKG_VERSION"),
                "node_id": state.settings.node_id}))
    .into_response()
}

/// `GET /ready`: 200 when no model has failed and no queue is full;
/// 503 with the reason otherwise.
pub async fn ready(State(state): State<Arc<AppState>>) -> Response {
    match state.engine.readiness() {
        Ok(()) => Json(json!({"ready": true})).into_response(),
        Err(reason) => (
            StatusCode::SERVICE_UNAVAILABLE,
            Json(json!({"ready": false, "reason": reason})),
        )
            .into_response(),
    }
}

/// `GET /metrics`: the Prometheus text exposition with the current gauges.
pub async fn metrics(State(state): State<Arc<AppState>>) -> Response {
    let gauges = metrics::Gauges {
        active_streams: state.streams.active_streams(),
        queued_requests: state.engine.queued(),
        buffered_bytes: state.streams.total_bytes(),
        mcp_sessions: state.mcp_sessions.len(),
        models: state
            .engine
            .models()
            .into_iter()
            .map(|m| metrics::ModelGauge {
                name: m.name,
                state: m.state.as_str(),
                memory_bytes: m.memory_bytes,
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
