//! The server's shared state: configuration, stream manager, engine and
//! the shutdown signal. Built once at start, shared by every transport.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use tokio::sync::{Notify, watch};

use crate::backend::{MockBackend, RkllmBackend};
use crate::config::{BackendKind, Config};
use crate::engine::{Backend, BackendError, Engine, EngineError};
use crate::stream::StreamManager;
use crate::transport::auth::ApiKeys;
use crate::transport::mcp_http::McpSessions;

/// Everything a request handler needs.
#[derive(Debug)]
pub struct AppState {
    /// The validated configuration.
    pub config: Config,
    /// Every stream of the process.
    pub streams: Arc<StreamManager>,
    /// Queues and model workers.
    pub engine: Engine,
    /// MCP sessions over HTTP.
    pub mcp_sessions: McpSessions,
    /// API keys for the HTTP and WebSocket routes.
    pub api_keys: ApiKeys,
    /// When the server started.
    pub started: std::time::SystemTime,
    /// The same, in seconds since the Unix epoch.
    pub started_unix: u64,
    shutdown: watch::Sender<bool>,
    connections: Arc<ConnectionCount>,
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
    /// Builds the backend, loads the models and starts their workers.
    ///
    /// # Errors
    /// When a model cannot be loaded or the backend is unavailable.
    pub fn new(config: Config) -> Result<Arc<Self>, EngineError> {
        let streams = Arc::new(
            StreamManager::new(config.stream_limits()).with_timestamps(config.bench.timestamps),
        );
        let backend: Arc<dyn Backend> = match config.backend {
            BackendKind::Mock => Arc::new(MockBackend::new(config.mock_config())),
            BackendKind::Rkllm => Arc::new(
                RkllmBackend::new(&config).map_err(|e| BackendError::Unavailable(e.to_string()))?,
            ),
        };
        let engine = Engine::start(
            backend,
            &config.model_specs(),
            config.engine_limits(),
            Arc::clone(&streams),
        )?;
        let mcp_sessions =
            McpSessions::new(std::time::Duration::from_secs(config.mcp.session_idle_secs));
        Ok(Arc::new(Self {
            api_keys: ApiKeys::new(&config.api_keys),
            started: std::time::SystemTime::now(),
            started_unix: crate::transport::compat::unix_now(),
            mcp_sessions,
            config,
            streams,
            engine,
            shutdown: watch::Sender::new(false),
            connections: Arc::default(),
        }))
    }

    /// Starts the shutdown: refuses new streams, ends every open stream
    /// with an abort end chunk, stops the model workers, then tells every
    /// connection to close (after the end chunks exist, so they can be
    /// delivered).
    pub fn begin_shutdown(&self) {
        if *self.shutdown.borrow() {
            return;
        }
        let ended = self.streams.shutdown();
        self.engine.shutdown();
        self.shutdown.send_replace(true);
        tracing::info!(ended_streams = ended, "shutting down");
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
