//! `GET /health` (the process is alive) and `GET /ready` (every model is
//! loaded and has room in its queue). Both are open, without API keys, for
//! supervisors and load balancers.

use std::sync::Arc;

use axum::Json;
use axum::extract::State;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use serde_json::json;

use crate::state::AppState;

/// `GET /health`: 200 while the process serves requests.
pub async fn health() -> Response {
    Json(json!({"status": "ok", "version": env!("CARGO_PKG_VERSION")})).into_response()
}

/// `GET /ready`: 200 when every model is loaded and its queue is not full;
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
