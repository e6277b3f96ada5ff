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

/// What `--check-config` checks beyond the values themselves, as start-up
/// would but without loading a model: that model files exist and, for the
/// `rkllm` backend, that the runtime library loads with a supported
/// version and every symbol. Returns a one-line summary.
///
/// # Errors
/// What start-up would stop on, as a message.
pub fn check(config: &Config) -> Result<String, String> {
    config
        .check_files()
        .map_err(|e| e.in_file(config.source.as_deref()).to_string())?;
    let models = config.model_specs().len();
    let backend = match config.backend {
        BackendKind::Mock => "mock".to_owned(),
        BackendKind::Rkllm => {
            let backend = RkllmBackend::new(config.rkllm_settings()).map_err(|e| e.to_string())?;
            format!("rkllm, {}", backend.describe())
        }
    };
    let file = config
        .source
        .as_ref()
        .map_or_else(|| "no file".to_owned(), |p| p.display().to_string());
    Ok(format!(
        "configuration OK ({file}): backend {backend}, {models} model(s), listen {}",
        config.listen
    ))
}
