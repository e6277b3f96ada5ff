//! Start-up: the one place that reads the whole [`Config`]. It builds the
//! backend, the stream manager and the engine, then the transports' shared
//! state, handing each part only its own typed settings.

use std::sync::Arc;

use crate::backend::process::{ProcessBackend, RunnerSettings};
use crate::backend::{Backend, BackendError, BackendSettings, MockBackend, RkllmBackend};
use crate::config::{BackendKind, Config, RunnerKind};
use crate::engine::{Engine, EngineError};
use crate::stream::StreamManager;
use crate::transport::AppState;

/// Builds the backend, starts the models' workers, loads the models
/// `engine.preload` names and returns the state every transport shares.
///
/// # Errors
/// When the backend is unavailable or a preloaded model cannot be loaded.
pub fn build(config: &Config) -> Result<Arc<AppState>, EngineError> {
    // Models load on demand: a missing file is caught now, not at the
    // first request.
    config
        .check_files()
        .map_err(|e| BackendError::Unavailable(e.in_file(config.source.as_deref()).to_string()))?;
    let streams = Arc::new(
        StreamManager::new(config.stream_limits()).with_timestamps(config.bench.timestamps),
    );
    let (backend, settings, runner): (Arc<dyn Backend>, BackendSettings, RunnerKind) =
        match config.backend {
            BackendKind::Mock => (
                Arc::new(MockBackend::new(config.mock_config())),
                BackendSettings::Mock(config.mock_config()),
                config.mock.runner,
            ),
            BackendKind::Rkllm => {
                // Loaded here too: a missing or unsupported runtime stops
                // the start with a clear message, and runners are told the
                // ABI chosen here.
                let rkllm = RkllmBackend::new(config.rkllm_settings())
                    .map_err(|e| BackendError::Unavailable(e.to_string()))?;
                let settings = BackendSettings::Rkllm(rkllm.settings());
                (Arc::new(rkllm), settings, config.rkllm.runner)
            }
        };
    let backend: Arc<dyn Backend> = match runner {
        RunnerKind::Thread => backend,
        RunnerKind::Process => Arc::new(ProcessBackend::new(
            backend,
            settings,
            RunnerSettings {
                command: config.runner_command().map_err(BackendError::Unavailable)?,
                load_timeout: std::time::Duration::from_secs(config.engine.load_timeout_secs),
                stall_timeout: std::time::Duration::from_secs(config.engine.stall_timeout_secs),
                stop_timeout: std::time::Duration::from_secs(3),
            },
        )),
    };
    let engine = Engine::start(
        backend,
        &config.model_specs(),
        config.engine_limits(),
        streams,
    )?;
    engine.preload(&config.engine.preload)?;
    Ok(AppState::new(
        engine,
        config.rpc_limits(),
        config.transport_settings(),
    ))
}

/// The runner process's main (`rkllm-server --runner NAME`): its orders
/// come on stdin, its reports go out on a private copy of stdout, and
/// stdout itself goes to stderr, so what the runtime prints cannot
/// corrupt the reports. Returns the exit code.
pub fn run_runner() -> i32 {
    let reports = match crate::transport::stdio::claim_stdout() {
        Ok(reports) => reports,
        Err(err) => {
            eprintln!("rkllm-server runner: cannot set up its pipes: {err}");
            return 2;
        }
    };
    crate::backend::process::serve(std::io::stdin(), reports)
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
