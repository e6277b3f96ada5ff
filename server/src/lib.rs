//! rkllm-server: a streaming token-generation server for Rockchip
//! RK3588/RK3576 NPUs.
//!
//! [`app`] builds the HTTP/WebSocket router over an [`AppState`];
//! [`run`] serves it on a listener until a shutdown future resolves, then
//! ends every stream and returns within the shutdown budget.

#![deny(unsafe_code)]

pub mod backend;
pub mod config;
pub mod engine;
pub mod rpc;
pub mod state;
pub mod stream;
pub mod transport;

use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use axum::extract::DefaultBodyLimit;
use axum::routing::{get, post};
use tokio::net::TcpListener;

pub use config::{Cli, Config};
pub use state::AppState;

/// Time allowed, after shutdown begins, for connections to finish.
pub const SHUTDOWN_GRACE: Duration = Duration::from_millis(1500);
/// Time allowed after that for model workers to release their models.
pub const WORKER_GRACE: Duration = Duration::from_millis(400);

/// The HTTP and WebSocket routes over `state`.
pub fn app(state: Arc<AppState>) -> Router {
    let body_limit = state.config.limits.max_request_bytes;
    Router::new()
        .route("/mcp", post(transport::http::post_mcp))
        .route("/ws", get(transport::ws::upgrade))
        .layer(DefaultBodyLimit::max(body_limit))
        .with_state(state)
}

/// Serves `state` on `listener` until `shutdown` resolves. Then it stops
/// accepting, ends every open stream with an abort end chunk, waits at
/// most [`SHUTDOWN_GRACE`] for connections to finish and at most
/// [`WORKER_GRACE`] for model workers to release their models.
///
/// # Errors
/// An I/O error of the listener.
pub async fn run(
    listener: TcpListener,
    state: Arc<AppState>,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> std::io::Result<()> {
    let reaper = state.streams.spawn_reaper();
    let server = axum::serve(listener, app(Arc::clone(&state)))
        .with_graceful_shutdown(state.shutdown_signal());
    let server = server.into_future();
    tokio::pin!(server);
    let result = tokio::select! {
        result = &mut server => result,
        () = shutdown => {
            state.begin_shutdown();
            let drained = async {
                let result = (&mut server).await;
                state.connections_closed().await;
                result
            };
            match tokio::time::timeout(SHUTDOWN_GRACE, drained).await {
                Ok(result) => result,
                Err(_) => {
                    tracing::warn!("connections still open after the shutdown grace period; closing them");
                    Ok(())
                }
            }
        }
    };
    reaper.abort();
    let workers = Arc::clone(&state);
    let stopped = tokio::task::spawn_blocking(move || workers.engine.wait_stopped(WORKER_GRACE))
        .await
        .unwrap_or(false);
    if !stopped {
        tracing::warn!("a model worker is still busy; exiting without waiting for it");
    }
    result
}
