//! The server's shared state: configuration, stream manager, engine and
//! the shutdown signal. Built once at start, shared by every transport.

use std::sync::Arc;

use tokio::sync::watch;

use crate::backend::MockBackend;
use crate::config::{BackendKind, Config};
use crate::engine::{Backend, BackendError, Engine, EngineError};
use crate::stream::StreamManager;

/// Everything a request handler needs.
#[derive(Debug)]
pub struct AppState {
    /// The validated configuration.
    pub config: Config,
    /// Every stream of the process.
    pub streams: Arc<StreamManager>,
    /// Queues and model workers.
    pub engine: Engine,
    shutdown: watch::Sender<bool>,
}

impl AppState {
    /// Builds the backend, loads the models and starts their workers.
    ///
    /// # Errors
    /// When a model cannot be loaded or the backend is unavailable.
    pub fn new(config: Config) -> Result<Arc<Self>, EngineError> {
        let streams = Arc::new(StreamManager::new(config.stream_limits()));
        let backend: Arc<dyn Backend> = match config.backend {
            BackendKind::Mock => Arc::new(MockBackend::new(config.mock_config())),
            BackendKind::Rkllm => {
                return Err(BackendError::Load {
                    model: String::new(),
                    message: "the rkllm backend is not available in this build".into(),
                }
                .into());
            }
        };
        let engine = Engine::start(
            backend,
            &config.model_specs(),
            config.engine_limits(),
            Arc::clone(&streams),
        )?;
        Ok(Arc::new(Self {
            config,
            streams,
            engine,
            shutdown: watch::Sender::new(false),
        }))
    }

    /// Starts the shutdown: refuses new streams, ends every open stream
    /// with an abort end chunk, stops the model workers and tells every
    /// connection to close.
    pub fn begin_shutdown(&self) {
        self.shutdown.send_replace(true);
        let ended = self.streams.shutdown();
        self.engine.shutdown();
        tracing::info!(ended_streams = ended, "shutting down");
    }

    /// Resolves once shutdown has begun.
    pub fn shutdown_signal(&self) -> impl Future<Output = ()> + Send + 'static {
        let mut rx = self.shutdown.subscribe();
        async move {
            let _ = rx.wait_for(|down| *down).await;
        }
    }
}
