//! Start-up: the one place that reads the whole [`Config`]. It builds the
//! backend, the stream manager and the engine, then the transports' shared
//! state, handing each part only its own typed settings.

use std::sync::Arc;

use crate::backend::{Backend, BackendError, MockBackend, RkllmBackend};
use crate::config::{BackendKind, Config};
use crate::engine::{Engine, EngineError};
use crate::stream::StreamManager;
use crate::transport::AppState;

/// Builds the backend, loads the models, starts their workers and returns
/// the state every transport shares.
///
/// # Errors
/// When the backend is unavailable or a model cannot be loaded.
pub fn build(config: &Config) -> Result<Arc<AppState>, EngineError> {
    let streams = Arc::new(
        StreamManager::new(config.stream_limits()).with_timestamps(config.bench.timestamps),
    );
    let backend: Arc<dyn Backend> = match config.backend {
        BackendKind::Mock => Arc::new(MockBackend::new(config.mock_config())),
        BackendKind::Rkllm => Arc::new(
            RkllmBackend::new(config.rkllm_settings())
                .map_err(|e| BackendError::Unavailable(e.to_string()))?,
        ),
    };
    let engine = Engine::start(
        backend,
        &config.model_specs(),
        config.engine_limits(),
        streams,
    )?;
    Ok(AppState::new(
        engine,
        config.rpc_limits(),
        config.transport_settings(),
    ))
}
