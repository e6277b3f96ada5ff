//! What every transport shares: the engine and stream manager below,
//! the JSON-RPC services, the transports' own settings and state (API
//! keys, MCP sessions, open connections, the WebSocket cap), the shutdown
//! signal, and the background tasks that live as long as the state. Built
//! once at start (see `startup`), from settings the configuration gives.
//! (What one API keeps for itself, such as the Responses API's store,
//! belongs to that API's routes, not here.)

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use tokio::sync::{Notify, watch};

use super::auth::ApiKeys;
use super::clock::unix_now;
use super::lines::LineOptions;
use super::mcp_session::McpSessions;
use super::ws_slots::WsSlots;
use crate::engine::Engine;
use crate::rpc::{Dispatcher, RpcLimits, Services};
use crate::service::Service;
use crate::stream::StreamManager;
use crate::task::Tasks;

/// The transports' settings (config sections `[http]`, `[ui]`,
/// `[websocket]`, `[mcp]`, `[stdio]` and the request size limit).
#[derive(Debug, Clone)]
pub struct Settings {
    /// Largest HTTP body, WebSocket message or line.
    pub max_request_bytes: usize,
    /// Time a client has to send a request's headers.
    pub header_read_timeout: Duration,
    /// Time a client has to send a request's body, from its headers on.
    pub body_read_timeout: Duration,
    /// Origins allowed by CORS.
    pub cors_origins: Vec<String>,
    /// Whether the chat page is served (`[ui] enabled`).
    pub ui: bool,
    /// This node's name, in the `X-Rkllm-Node` header of every response.
    pub node_id: String,
    /// Host names accepted in `Host` besides IP literals and loopback
    /// names (`"*"`: any); see `origin`.
    pub allowed_hosts: Vec<String>,
    /// Origins accepted in `Origin` besides the server's own (`"*"`: any).
    pub allowed_origins: Vec<String>,
    /// Idle time after which an MCP session ends.
    pub mcp_session_idle: Duration,
    /// WebSocket ping period.
    pub ws_ping_interval: Duration,
    /// WebSocket silence after which the connection is closed.
    pub ws_idle_timeout: Duration,
    /// WebSocket connections open at once.
    pub ws_max_connections: usize,
    /// WebSocket connections open at once from one address (0: no limit).
    pub ws_max_connections_per_ip: usize,
    /// API keys; none: no authentication.
    pub api_keys: Vec<String>,
    /// The line transports (stdio; TCP takes the same with its own name).
    pub line: LineOptions,
    /// Whether and how image URLs are fetched.
    pub remote_images: crate::service::RemoteImages,
    /// Whether known clients' background tasks are put in the background
    /// lane (`[engine] detect_background`).
    pub detect_background: bool,
    /// The Responses API's store of finished responses (`[responses]`).
    pub responses_store: ResponsesSettings,
    /// The root under which the board's files are read for `/metrics`
    /// (`[board] sys_root`).
    pub sys_root: std::path::PathBuf,
    /// What `doctor` found at start that keeps this server from serving
    /// (one line each); `/ready` answers 503 with them.
    pub blocking: Vec<String>,
}

/// How much the Responses API keeps of finished responses for
/// `previous_response_id`, and for how long (`[responses]`). The store
/// itself is the Responses routes' own (`api::responses`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ResponsesSettings {
    /// Responses kept at once; 0 turns the store off.
    pub max_entries: usize,
    /// Bytes their conversations may take together.
    pub max_bytes: usize,
    /// How long a response is kept after it finished.
    pub ttl: Duration,
}

/// Everything a request handler needs.
#[derive(Debug)]
pub struct AppState {
    /// The transports' settings.
    pub settings: Settings,
    /// Every stream of the process.
    pub streams: Arc<StreamManager>,
    /// Queues and model workers, for start-up and shutdown only:
    /// handlers go through `service`.
    pub(crate) engine: Arc<Engine>,
    /// What the JSON-RPC methods work with.
    pub rpc: Arc<Services>,
    /// The generation service every API calls.
    pub service: Arc<Service>,
    /// MCP sessions over HTTP.
    pub mcp_sessions: Arc<McpSessions>,
    /// API keys for the HTTP and WebSocket routes.
    pub api_keys: Arc<ApiKeys>,
    /// When the server started.
    pub started: std::time::SystemTime,
    /// The same, in seconds since the Unix epoch.
    pub started_unix: u64,
    /// The model store (`/api/pull`, `/api/delete`, store details).
    pub store: Arc<crate::store::Service>,
    /// The open WebSocket connections, against their cap.
    pub ws_slots: Arc<WsSlots>,
    /// The board's reads for `/metrics` (`[board] sys_root`).
    pub board: crate::board::Sampler,
    shutdown: watch::Sender<bool>,
    connections: Arc<ConnectionCount>,
    /// The tasks that live as long as this state; they end when it drops.
    tasks: Tasks,
}

/// Counts long-lived connections (WebSocket) that the HTTP server's own
/// graceful shutdown does not track, so shutdown can wait for them.
#[derive(Debug, Default)]
struct ConnectionCount {
    open: AtomicUsize,
    closed: Notify,
}

/// Held by a long-lived connection for its whole life.
#[derive(Debug)]
pub struct ConnectionGuard(Arc<ConnectionCount>);

impl Drop for ConnectionGuard {
    fn drop(&mut self) {
        if self.0.open.fetch_sub(1, Ordering::AcqRel) == 1 {
            self.0.closed.notify_waiters();
        }
    }
}

impl AppState {
    /// The state of a server whose engine (with its stream manager) is
    /// running: adds what the transports keep themselves.
    pub fn new(
        engine: Engine,
        rpc: RpcLimits,
        settings: Settings,
        store: crate::store::Service,
    ) -> Arc<Self> {
        let engine = Arc::new(engine);
        let streams = Arc::clone(engine.streams());
        let service = Arc::new(
            Service::new(
                Arc::clone(&engine),
                Arc::clone(&store.sandbox),
                settings.remote_images.clone(),
                rpc.max_embedding_inputs,
            )
            .detecting_background(settings.detect_background),
        );
        Arc::new(Self {
            api_keys: Arc::new(ApiKeys::new(&settings.api_keys)),
            started: std::time::SystemTime::now(),
            started_unix: unix_now(),
            mcp_sessions: Arc::new(McpSessions::new(settings.mcp_session_idle)),
            rpc: Arc::new(Services {
                service: Arc::clone(&service),
                limits: rpc,
            }),
            service,
            engine,
            streams,
            store: Arc::new(store),
            ws_slots: Arc::new(WsSlots::new(
                settings.ws_max_connections,
                settings.ws_max_connections_per_ip,
            )),
            board: crate::board::Sampler::new(settings.sys_root.clone()),
            settings,
            shutdown: watch::Sender::new(false),
            connections: Arc::default(),
            tasks: Tasks::new(),
        })
    }

    /// The background tasks that live as long as this state (those
    /// `startup` starts, the listeners beside HTTP): each ends when the
    /// state drops, so none may hold the state itself (only the parts it
    /// works on, or a `Weak`). `live()` counts those still running.
    pub fn tasks(&self) -> &Tasks {
        &self.tasks
    }

    /// A dispatcher for one connection's JSON-RPC messages.
    pub fn dispatcher(&self) -> Dispatcher {
        Dispatcher::new(Arc::clone(&self.rpc))
    }

    /// Starts the shutdown: refuses new streams, ends every open stream
    /// with an abort end chunk, stops the model workers, then tells every
    /// connection to close (after the end chunks exist, so they can be
    /// delivered).
    pub fn begin_shutdown(&self) {
        if self.is_shutting_down() {
            return;
        }
        let ended = self.streams.shutdown();
        self.engine.shutdown();
        self.shutdown.send_replace(true);
        tracing::info!(ended_streams = ended, "shutting down");
    }

    /// Whether shutdown has begun.
    pub fn is_shutting_down(&self) -> bool {
        *self.shutdown.borrow()
    }

    /// Registers a long-lived connection until the guard drops.
    pub fn track_connection(&self) -> ConnectionGuard {
        self.connections.open.fetch_add(1, Ordering::AcqRel);
        ConnectionGuard(Arc::clone(&self.connections))
    }

    /// Resolves when no tracked connection is open.
    pub async fn connections_closed(&self) {
        loop {
            let closed = self.connections.closed.notified();
            tokio::pin!(closed);
            closed.as_mut().enable();
            if self.connections.open.load(Ordering::Acquire) == 0 {
                return;
            }
            closed.await;
        }
    }

    /// Resolves once shutdown has begun.
    pub fn shutdown_signal(&self) -> impl Future<Output = ()> + Send + 'static {
        let mut rx = self.shutdown.subscribe();
        async move {
            let _ = rx.wait_for(|down| *down).await;
        }
    }
}
