//! rkllm-server: a streaming token-generation server for Rockchip
//! RK3588/RK3576 NPUs.
//!
//! [`app`] builds the HTTP/WebSocket router over an [`AppState`];
//! [`run`] serves it on a listener until a shutdown future resolves, then
//! ends every stream and returns within the shutdown budget.

#![deny(unsafe_code)]

pub mod backend;
pub mod board;
pub mod commands;
pub mod config;
pub mod doctor;
pub mod engine;
#[allow(unsafe_code)]
pub mod memory;
pub mod metrics;
pub mod model;
pub mod notify;
pub mod plan;
pub mod rpc;
pub mod sandbox;
pub mod service;
pub mod startup;
pub mod store;
pub mod stream;
pub mod task;
pub mod transport;
pub mod vocab;

use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use axum::routing::{get, post};
use tokio::net::TcpListener;

pub use config::{Cli, Config};
pub use transport::AppState;

/// Time allowed, after shutdown begins, for connections to finish.
pub const SHUTDOWN_GRACE: Duration = Duration::from_millis(1500);
/// Time allowed after that for model workers to release their models: a
/// runner process gets 3 s to exit once told, then SIGTERM and 2 s more
/// before SIGKILL.
pub const WORKER_GRACE: Duration = Duration::from_millis(6000);

/// The HTTP and WebSocket routes over `state`. Each API's routes carry
/// their own layers (`transport::api::with_layers`): the browser guard
/// (`transport::origin`), the API keys where they apply, the body limit,
/// and the API's own error shape, so every error on a route comes in
/// the shape of the API the route belongs to. The OpenAI API is under
/// `/v1`, the Ollama API under `/api`, JSON-RPC and MCP at `/mcp` and
/// `/ws` (with `/metrics`, behind the keys); `/health`, `/ready` and the
/// chat page (unless `[ui] enabled = false`) are open. CORS for the
/// configured origins.
pub fn app(state: Arc<AppState>) -> Router {
    use transport::api::{ollama, openai, responses, with_layers};
    use transport::errors::{not_found, rpc_shape};
    let v1 = with_layers(openai::routes(), &state, openai::shape, true);
    let ollama = with_layers(ollama::routes(), &state, ollama::shape, true);
    let rpc = Router::new()
        .route(
            "/mcp",
            post(transport::http::post_mcp).delete(transport::http::delete_mcp),
        )
        .route("/ws", get(transport::ws::upgrade))
        .route("/metrics", get(transport::health::metrics));
    let page = if state.settings.ui {
        transport::ui::routes()
    } else {
        Router::new()
    };
    let open = page
        .route("/health", get(transport::health::health))
        .route("/ready", get(transport::health::ready))
        .fallback(not_found);
    let router = Router::new()
        .merge(with_layers(
            responses::routes(state.settings.responses_store),
            &state,
            openai::shape,
            true,
        ))
        .merge(with_layers(
            transport::api::text::routes(),
            &state,
            openai::shape,
            true,
        ))
        .merge(v1)
        .merge(with_layers(
            transport::api::anthropic::routes(),
            &state,
            transport::api::anthropic::shape,
            true,
        ))
        .merge(ollama)
        .merge(with_layers(rpc, &state, rpc_shape, true))
        .merge(with_layers(open, &state, rpc_shape, false));
    // Every answer names the node that gave it (a balancer's user can tell
    // where a request went).
    let node = axum::http::HeaderValue::from_str(&state.settings.node_id)
        .unwrap_or_else(|_| axum::http::HeaderValue::from_static("rkllm-server"));
    let router = router.layer(axum::middleware::map_response(
        move |mut response: axum::response::Response| {
            let node = node.clone();
            async move {
                response.headers_mut().insert(transport::NODE_HEADER, node);
                response
            }
        },
    ));
    // Every API's generations honour `X-Rkllm-Priority` (the service reads
    // it; see `transport::priority`).
    let router = router.layer(axum::middleware::from_fn(transport::priority::layer));
    let router = match cors(&state.settings.cors_origins) {
        Some(cors) => router.layer(cors),
        None => router,
    };
    router.with_state(state)
}

/// The CORS layer for the configured origins (none: no CORS).
fn cors(origins: &[String]) -> Option<tower_http::cors::CorsLayer> {
    use axum::http::{HeaderName, HeaderValue, Method, header};
    use tower_http::cors::{AllowOrigin, CorsLayer};
    if origins.is_empty() {
        return None;
    }
    let allowed: Vec<HeaderValue> = origins
        .iter()
        .filter_map(|o| HeaderValue::from_str(o).ok())
        .collect();
    Some(
        CorsLayer::new()
            .allow_origin(AllowOrigin::list(allowed))
            .allow_methods([Method::GET, Method::POST, Method::DELETE, Method::OPTIONS])
            .allow_headers([
                header::AUTHORIZATION,
                header::CONTENT_TYPE,
                header::ACCEPT,
                HeaderName::from_static("mcp-session-id"),
                HeaderName::from_static("mcp-protocol-version"),
                HeaderName::from_static(service::background::HEADER),
            ])
            .expose_headers([HeaderName::from_static("mcp-session-id")]),
    )
}

/// Serves the stdio line protocol (see [`transport::stdio`]) until end of
/// input or until `shutdown` resolves; then ends every stream and lets the
/// model workers release their models. `output` comes from
/// [`transport::stdio::claim_stdout`].
pub async fn run_stdio(
    state: Arc<AppState>,
    output: std::fs::File,
    shutdown: impl Future<Output = ()> + Send + 'static,
) {
    // Ends with this run, however it ends.
    let reaper = state.streams.spawn_reaper();
    let options = state.settings.line;
    let served = transport::stdio::serve_stdio(Arc::clone(&state), output, options);
    tokio::pin!(served);
    tokio::select! {
        () = &mut served => {}
        () = shutdown => {
            state.begin_shutdown();
            let _ = tokio::time::timeout(SHUTDOWN_GRACE, &mut served).await;
        }
    }
    state.begin_shutdown();
    reaper.abort();
    stop_workers(&state).await;
}

/// Answers HAProxy's agent check on `listener` (`agent_listen`) until
/// `state` drops (it goes on while shutting down). The task is one of the
/// state's own (`AppState::tasks`).
pub fn spawn_agent(listener: TcpListener, state: Arc<AppState>) -> tokio::task::JoinHandle<()> {
    let serve = transport::agent::serve_agent(listener, Arc::downgrade(&state));
    state.tasks().spawn(serve)
}

/// Serves the line protocol on a TCP listener (`--tcp`) until shutdown,
/// or until `state` drops. The task is one of the state's own
/// (`AppState::tasks`).
pub fn spawn_tcp(listener: TcpListener, state: Arc<AppState>) -> tokio::task::JoinHandle<()> {
    let options = transport::lines::LineOptions {
        transport: "tcp",
        ..state.settings.line
    };
    let serve = transport::tcp::serve_tcp(listener, &state, options);
    state.tasks().spawn(serve)
}

async fn stop_workers(state: &Arc<AppState>) {
    let workers = Arc::clone(state);
    let stopped = tokio::task::spawn_blocking(move || workers.engine.wait_stopped(WORKER_GRACE))
        .await
        .unwrap_or(false);
    if !stopped {
        tracing::warn!("a model worker is still busy; exiting without waiting for it");
    }
}

/// Serves `state` on `listener` until `shutdown` resolves. Then it stops
/// accepting, ends every open stream with an abort end chunk, waits at
/// most [`SHUTDOWN_GRACE`] for connections to finish and at most
/// [`WORKER_GRACE`] for model workers to release their models.
pub async fn run(
    listener: TcpListener,
    state: Arc<AppState>,
    shutdown: impl Future<Output = ()> + Send + 'static,
) {
    // Both end with this run, however it ends.
    let reaper = state.streams.spawn_reaper();
    let sessions_reaper = state.mcp_sessions.spawn_reaper();
    let server = transport::serve::serve(listener, app(Arc::clone(&state)), Arc::clone(&state));
    tokio::pin!(server);
    tokio::select! {
        () = &mut server => {}
        () = shutdown => {
            state.begin_shutdown();
            let drained = async {
                (&mut server).await;
                state.connections_closed().await;
            };
            if tokio::time::timeout(SHUTDOWN_GRACE, drained).await.is_err() {
                tracing::warn!("connections still open after the shutdown grace period; closing them");
            }
        }
    }
    reaper.abort();
    sessions_reaper.abort();
    stop_workers(&state).await;
}
