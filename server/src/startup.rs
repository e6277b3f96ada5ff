//! Start-up: the one place that reads the whole [`Config`]. It builds the
//! backend, the stream manager and the engine, then the transports' shared
//! state, handing each part only its own typed settings. The background
//! tasks it starts (following the store, fetching and checking tokenizers)
//! are the state's own (`AppState::tasks`): they end when it drops.

use std::path::PathBuf;
use std::sync::Arc;

use crate::backend::process::{ProcessBackend, RunnerSettings};
use crate::backend::{Backend, BackendError, BackendSettings, MockBackend, RkllmBackend};
use crate::config::{BackendKind, Config, RunnerKind};
use crate::engine::{Engine, EngineError, TokenizerOrigin};
use crate::model::ModelSpec;
use crate::store::tokenizer::NoTokenizer;
use crate::store::{HubTokenizer, Manifest, Service as StoreService};
use crate::stream::StreamManager;
use crate::task::Tasks;
use crate::transport::AppState;

/// Builds the backend, starts the models' workers, loads the models
/// `engine.preload` names and returns the state every transport shares.
///
/// The start depends on the server's own configuration only (the config,
/// the runtime library, the store's settings), never on every model: a
/// model that cannot load (its file or its encoder's missing, an encoder
/// without an RKNN runtime, a failed preload) is listed as failed with its
/// reason and the others are served. A server with no model at all starts
/// too (not ready until one is pulled), so that removing the last model
/// cannot keep the service from starting.
///
/// # Errors
/// When the backend itself is unavailable (the runtime library).
pub fn build(config: &Config) -> Result<Arc<AppState>, EngineError> {
    let streams = Arc::new(
        StreamManager::new(config.stream_limits()).with_timestamps(config.bench.timestamps),
    );
    let (backend, runtime_version) = backend(config)?;
    let store = config
        .store_service(runtime_version, config.vision_runtime())
        .map_err(BackendError::Unavailable)?;
    let Models {
        specs,
        configured,
        configured_files,
        stored,
    } = models(config, &store);
    let engine = Engine::start(backend, &specs, config.engine_limits(), streams)?;
    for manifest in &stored {
        engine.set_tokenizer_origin(&manifest.name, store.store.tokenizer_origin(manifest));
    }
    let hub_tokenizers = config.hub_tokenizers();
    for (model, wanted) in &hub_tokenizers {
        engine.set_tokenizer_origin(
            model,
            TokenizerOrigin {
                from: Some(wanted.label()),
                missing: Some(format!(
                    "it is being fetched from {} (into {})",
                    wanted.label(),
                    wanted.cached_path(store.store.dir()).display()
                )),
                fix: None,
            },
        );
    }
    let failed: Vec<String> = engine
        .models()
        .into_iter()
        .filter(|m| m.state == crate::engine::ModelState::Failed)
        .map(|m| m.name)
        .collect();
    let preload: Vec<String> = config
        .engine
        .preload
        .iter()
        .filter(|name| !failed.contains(name))
        .cloned()
        .collect();
    engine.preload(&preload)?;
    // The board and runtime checks of `doctor`, logged; what blocks
    // serving goes to `/ready`.
    let mut transport = config.transport_settings();
    transport.blocking = crate::doctor::at_start(config);
    let state = AppState::new(engine, config.rpc_limits(), transport, store);
    if tokio::runtime::Handle::try_current().is_ok() {
        // Each holds the engine and the store, never the state, which owns
        // them: dropping the state ends them.
        let (engine, store) = (&state.engine, &state.store);
        let tasks = state.tasks();
        tasks.spawn(follow_store(
            Arc::clone(engine),
            Arc::clone(store),
            configured,
            configured_files,
        ));
        fetch_tokenizers(tasks, engine, store, hub_tokenizers);
        tasks.spawn(check_tokenizers(Arc::clone(engine), Arc::clone(store)));
    }
    Ok(state)
}

/// The configured backend, in a runner process when so configured, and
/// the runtime's version (the rkllm backend's).
///
/// # Errors
/// When the runtime library cannot be loaded, or the runner command not
/// be found.
fn backend(config: &Config) -> Result<(Arc<dyn Backend>, Option<String>), EngineError> {
    let mut runtime_version = None;
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
                    .map_err(|e| BackendError::Unavailable(e.to_string()))?
                    .decoding_in_server(config.rkllm.runner == RunnerKind::Thread);
                let settings = BackendSettings::Rkllm(rkllm.settings());
                runtime_version = rkllm.version();
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
    Ok((backend, runtime_version))
}

/// The models served at start.
struct Models {
    /// Every model's spec: the configured ones, then the store's.
    specs: Vec<ModelSpec>,
    /// The configured models' names.
    configured: Vec<String>,
    /// The configured models' files.
    configured_files: Vec<PathBuf>,
    /// The manifests of the stored models served.
    stored: Vec<Manifest>,
}

/// The configured models, then the store's (a configured name wins).
fn models(config: &Config, store: &StoreService) -> Models {
    let mut specs = config.model_specs();
    let configured: Vec<String> = specs.iter().map(|s| s.name.clone()).collect();
    let configured_files: Vec<PathBuf> = specs.iter().filter_map(|s| s.path.clone()).collect();
    let mut stored = Vec::new();
    for manifest in store.store.list() {
        if configured.contains(&manifest.name) {
            tracing::warn!(
                model = %manifest.name,
                "a stored model has the name of a configured one; the configured one is used"
            );
        } else {
            specs.push(store.store.spec(&manifest));
            stored.push(manifest);
        }
    }
    if specs.is_empty() {
        tracing::warn!(
            models_dir = %config.models_dir().display(),
            "no model to serve yet: pull one (`rkllm-server pull OWNER/REPO` or /api/pull), \
             pass --model PATH or declare [[models]]; /ready answers 503 until then"
        );
    }
    Models {
        specs,
        configured,
        configured_files,
        stored,
    }
}

/// Reads every model's tokenizer file that is there at start in the
/// sandbox: one that breaks the bounds of a tokenizer (a damaged or
/// hostile file) leaves its model failed with why, and the others are
/// served. (A pull checks what it brings; a configured repository's
/// tokenizer is checked when it is fetched.)
async fn check_tokenizers(engine: Arc<Engine>, store: Arc<StoreService>) {
    for model in engine.models() {
        let Some(crate::model::tokenizer::TokenizerSource::File(path)) =
            engine.tokenizer_source(&model.name)
        else {
            continue;
        };
        if !path.is_file() {
            continue;
        }
        let why = match store.sandbox.check_tokenizer(path.clone()).await {
            Ok(crate::sandbox::Reply::OutOfBounds(why)) => why,
            Err(e) => format!("reading it, {e}"),
            Ok(_) => continue,
        };
        engine.mark_failed(
            &model.name,
            format!(
                "its tokenizer {} is not a tokenizer this server takes: {why}",
                path.display()
            ),
        );
    }
}

/// Longest wait before a tokenizer that could not be fetched is tried again.
const TOKENIZER_RETRY_MAX: std::time::Duration = std::time::Duration::from_secs(3600);

/// Fetches the configured `tokenizer = "owner/repo"` settings into the
/// store in the background (each repository once, however many models
/// name it), so that the start never waits for the hub. Until one is
/// there, its models refuse structured output saying why; one that cannot
/// be fetched is tried again after 30 s, then after twice as long each
/// time, up to an hour. The tasks are `tasks`' own.
fn fetch_tokenizers(
    tasks: &Tasks,
    engine: &Arc<Engine>,
    service: &Arc<StoreService>,
    wanted: Vec<(String, HubTokenizer)>,
) {
    let mut by_repo: Vec<(HubTokenizer, Vec<String>)> = Vec::new();
    for (model, tokenizer) in wanted {
        match by_repo.iter_mut().find(|(t, _)| *t == tokenizer) {
            Some((_, models)) => models.push(model),
            None => by_repo.push((tokenizer, vec![model])),
        }
    }
    for (tokenizer, models) in by_repo {
        let (engine, service) = (Arc::clone(engine), Arc::clone(service));
        tasks.spawn(async move {
            let label = tokenizer.label();
            let origin = |missing: Option<String>| TokenizerOrigin {
                from: Some(label.clone()),
                missing,
                fix: None,
            };
            let mut delay = std::time::Duration::from_secs(30);
            loop {
                let fetched = crate::store::tokenizer::fetch_configured(
                    &service.store,
                    &service.hub,
                    &service.limits,
                    &service.sandbox,
                    &tokenizer,
                )
                .await;
                match fetched {
                    Err(NoTokenizer::Refused(why)) => {
                        // Fetching it again would bring the same file.
                        for model in &models {
                            engine.mark_failed(model, format!("its tokenizer is refused: {why}"));
                        }
                        return;
                    }
                    Ok(path) => {
                        tracing::info!(tokenizer = %label, path = %path.display(), ?models, "tokenizer in place");
                        for model in &models {
                            engine.set_tokenizer_origin(model, origin(None));
                        }
                        return;
                    }
                    Err(NoTokenizer::Missing(why)) => {
                        tracing::warn!(
                            tokenizer = %label,
                            error = %why,
                            ?models,
                            retry_secs = delay.as_secs(),
                            "tokenizer not fetched: structured output is refused for its models \
                             until it is"
                        );
                        let missing = format!(
                            "it could not be fetched from {label}: {why} (tried again within {} \
                             s; check the `tokenizer` setting, or set HF_TOKEN for a gated \
                             repository)",
                            delay.as_secs()
                        );
                        for model in &models {
                            engine.set_tokenizer_origin(model, origin(Some(missing.clone())));
                        }
                    }
                }
                tokio::time::sleep(delay).await;
                delay = (delay * 2).min(TOKENIZER_RETRY_MAX);
            }
        });
    }
}

/// Keeps the engine's models in step with the store while the server
/// runs, so that `rkllm-server pull` and `rm` from a shell take effect
/// within seconds: new stored models become available, removed ones go,
/// and a `.rkllm` file put into the store by hand becomes a model (unless
/// it is one of `configured_files`).
async fn follow_store(
    engine: Arc<Engine>,
    service: Arc<StoreService>,
    configured: Vec<String>,
    configured_files: Vec<PathBuf>,
) {
    let mut ticks = tokio::time::interval(std::time::Duration::from_secs(2));
    // A late look runs once, and the next a whole period after it.
    ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        ticks.tick().await;
        let store = Arc::clone(&service);
        let keep = configured_files.clone();
        let scan = move || {
            store.store.adopt_dropped(&keep);
            store.store.list()
        };
        let Ok(stored) = tokio::task::spawn_blocking(scan).await else {
            continue;
        };
        for manifest in &stored {
            if configured.contains(&manifest.name) {
                continue;
            }
            if !engine.has_model(&manifest.name) {
                let spec = service.store.spec(manifest);
                if let Err(err) = engine.add_model(spec) {
                    tracing::debug!(model = %manifest.name, error = %err, "stored model not added");
                    continue;
                }
            }
            // A pull may have brought its tokenizer since (or said why not).
            engine.set_tokenizer_origin(&manifest.name, service.store.tokenizer_origin(manifest));
        }
        for model in engine.models() {
            let gone =
                !configured.contains(&model.name) && !stored.iter().any(|m| m.name == model.name);
            if gone {
                tracing::info!(model = %model.name, "removed from the store");
                let _ = engine.remove_model(&model.name).await;
            }
        }
    }
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
    // The runner's own log lines (a prompt cache rebuilt, an adapter
    // loaded) go to stderr, which the server logs line by line, a warning
    // as a warning (`backend::process`).
    let _ = tracing_subscriber::fmt()
        .with_writer(std::io::stderr)
        .with_ansi(false)
        .without_time()
        .with_target(false)
        .with_max_level(tracing::Level::INFO)
        .try_init();
    crate::backend::process::serve(std::io::stdin(), reports)
}

/// Raises the soft limit of open files to the hard limit: every client
/// connection holds a descriptor, and the usual soft limit (1024) is below
/// `websocket.max_connections`. (The systemd unit sets `LimitNOFILE`;
/// started any other way, the server sets it itself.) The new limit is
/// logged at debug; a failure, or a limit too low for `max_connections`,
/// is a warning, never fatal.
pub fn raise_open_file_limit(max_connections: usize) {
    use rustix::process::{Resource, Rlimit, getrlimit, setrlimit};
    let limit = getrlimit(Resource::Nofile);
    let soft = match (limit.current, limit.maximum) {
        (Some(soft), Some(hard)) if soft < hard => {
            let raised = Rlimit {
                current: Some(hard),
                maximum: Some(hard),
            };
            match setrlimit(Resource::Nofile, raised) {
                Ok(()) => {
                    tracing::debug!(from = soft, to = hard, "open-file limit raised");
                    Some(hard)
                }
                Err(err) => {
                    tracing::warn!(error = %err, soft, hard, "cannot raise the open-file limit");
                    Some(soft)
                }
            }
        }
        (soft, _) => {
            tracing::debug!(limit = ?soft, "open-file limit already at its hard limit");
            soft
        }
    };
    // Beside the WebSockets: HTTP clients, runner pipes, model files.
    let needed = u64::try_from(max_connections)
        .unwrap_or(u64::MAX)
        .saturating_add(256);
    if let Some(soft) = soft.filter(|&soft| soft < needed) {
        tracing::warn!(
            limit = soft,
            max_connections,
            "the open-file limit is below websocket.max_connections plus room for the rest: \
             connections past it cannot be accepted; raise the hard limit (ulimit -Hn, \
             LimitNOFILE=) or lower websocket.max_connections"
        );
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    /// Upper bound on waiting for the tasks to end, so that one that does
    /// not fails the test instead of hanging it.
    const LIVENESS: Duration = Duration::from_secs(30);

    #[tokio::test]
    async fn dropping_the_state_ends_the_tasks_started_for_it() {
        let dir =
            std::env::temp_dir().join(format!("rkllm-server-startup-tasks-{}", std::process::id()));
        let mut config = Config::default();
        config.store.models_dir = Some(dir.join("store"));
        // A tokenizer from a hub that cannot be reached: its fetch fails
        // at once and then waits to try again.
        config.store.endpoint = Some("http://127.0.0.1:1".to_owned());
        config.model = Some(dir.join("tiny.rkllm"));
        config.tokenizer = Some(PathBuf::from("owner/repo"));
        let state = build(&config).expect("the mock backend starts");
        assert_eq!(config.hub_tokenizers().len(), 1);

        let live = state.tasks().live();
        // Following the store and fetching the tokenizer never end by
        // themselves (checking the tokenizers may have ended already).
        assert!(live.count() >= 2, "{} tasks running", live.count());
        tokio::time::sleep(Duration::from_millis(50)).await;
        assert!(live.count() >= 2, "{} tasks running", live.count());
        // No task holds the state: dropping this handle drops it.
        assert_eq!(Arc::strong_count(&state), 1);
        let weak = Arc::downgrade(&state);

        drop(state);
        assert!(weak.upgrade().is_none(), "the state is gone");
        tokio::time::timeout(LIVENESS, live.ended())
            .await
            .expect("every task started for the state ends when it drops");
        assert_eq!(live.count(), 0);
        let _ = std::fs::remove_dir_all(&dir);
    }
}
