//! The model lifecycle with backends in this process: the mock, and a
//! backend whose loads always fail (a test double).

use std::sync::Arc;
use std::time::{Duration, Instant};

use super::*;
use crate::backend::{MockBackend, MockConfig, Runner};
use crate::model::ModelSpec;
use crate::stream::{StreamLimits, StreamManager};
use crate::vocab::FinishReason;

fn spec(name: &str) -> ModelSpec {
    ModelSpec::named(name)
}

fn engine(
    backend: Arc<dyn Backend>,
    names: &[&str],
    max_loaded: usize,
    keep_alive: KeepAlive,
) -> Engine {
    let streams = Arc::new(StreamManager::new(StreamLimits {
        idle_timeout: Duration::from_secs(60),
        max_stream_bytes: 1 << 20,
        max_total_bytes: 1 << 24,
        max_streams: 100,
        resume_grace: Duration::ZERO,
    }));
    let limits = EngineLimits {
        queue_len: 16,
        ageing: Ageing {
            max_wait: Duration::from_secs(15),
            max_overtaken: 4,
        },
        request: RequestLimits {
            max_prompt_bytes: 4096,
            default_max_tokens: Some(16),
            max_tokens_limit: 64,
            max_schema_bytes: DEFAULT_MAX_SCHEMA_BYTES,
            max_rerank_tokens: crate::engine::DEFAULT_MAX_RERANK_TOKENS,
        },
        lifecycle: Lifecycle {
            max_loaded_models: max_loaded,
            keep_alive,
            load_timeout: Duration::from_secs(10),
            max_crashes: 2,
            crash_window: Duration::from_secs(60),
            first_domain: 0,
        },
    };
    let specs: Vec<ModelSpec> = names.iter().map(|n| spec(n)).collect();
    Engine::start(backend, &specs, limits, streams).unwrap()
}

fn mock() -> Arc<dyn Backend> {
    Arc::new(MockBackend::new(MockConfig {
        tokens_per_second: 0.0,
        prefill_ms: 0,
        lanes: 1,
        isolated: false,
    }))
}

/// Runs a prompt on `model` to its end; returns how it ended.
fn run(engine: &Engine, model: &str, keep_alive: Option<KeepAlive>) -> Option<FinishReason> {
    let request = RunRequest {
        prompt: "hello".into(),
        model: Some(model.into()),
        ..RunRequest::default()
    };
    let stream = engine.submit_with(request, true, keep_alive).unwrap();
    let deadline = Instant::now() + Duration::from_secs(10);
    while !stream.is_ended() {
        assert!(Instant::now() < deadline, "the run did not end");
        std::thread::sleep(Duration::from_millis(2));
    }
    stream.end_info().map(|end| end.finish_reason)
}

fn states(engine: &Engine) -> Vec<(String, ModelState)> {
    engine
        .models()
        .into_iter()
        .map(|m| (m.name, m.state))
        .collect()
}

fn wait_state(engine: &Engine, model: &str, state: ModelState) {
    let deadline = Instant::now() + Duration::from_secs(10);
    while !states(engine).contains(&(model.to_owned(), state)) {
        assert!(
            Instant::now() < deadline,
            "{model} never became {state:?}: {:?}",
            states(engine)
        );
        std::thread::sleep(Duration::from_millis(2));
    }
}

#[test]
fn models_load_on_demand_and_the_least_recently_used_idle_one_makes_room() {
    let engine = engine(mock(), &["a", "b", "c"], 2, KeepAlive::Forever);
    assert!(
        states(&engine)
            .iter()
            .all(|(_, s)| *s == ModelState::Available)
    );
    for model in ["a", "b", "a", "c"] {
        let end = run(&engine, model, None);
        assert!(
            matches!(end, Some(FinishReason::Stop | FinishReason::Length)),
            "{end:?}"
        );
    }
    // `b` was used longest ago: it made room for `c`.
    wait_state(&engine, "b", ModelState::Available);
    assert_eq!(
        states(&engine),
        [
            ("a".to_owned(), ModelState::Loaded),
            ("b".to_owned(), ModelState::Available),
            ("c".to_owned(), ModelState::Loaded),
        ]
    );
    // The watchdog's view: sound while the workers run, not once they stopped.
    assert!(engine.supervisor_healthy());
    engine.shutdown();
    assert!(engine.wait_stopped(Duration::from_secs(10)));
    assert!(!engine.supervisor_healthy());
}

#[test]
fn keep_alive_zero_unloads_after_the_request() {
    let engine = engine(mock(), &["a"], 1, KeepAlive::Forever);
    run(&engine, "a", None);
    assert_eq!(states(&engine)[0].1, ModelState::Loaded);
    run(&engine, "a", Some(KeepAlive::For(Duration::ZERO)));
    wait_state(&engine, "a", ModelState::Available);
    engine.shutdown();
}

#[tokio::test]
async fn explicit_loads_and_unloads_wait_for_the_model() {
    let engine = engine(mock(), &["a", "b"], 1, KeepAlive::Forever);
    assert_eq!(engine.load(Some("b"), None).await.unwrap(), "b");
    assert_eq!(states(&engine)[1].1, ModelState::Loaded);
    let (name, was_loaded) = engine.unload(Some("b")).await.unwrap();
    assert_eq!((name.as_str(), was_loaded), ("b", true));
    assert_eq!(states(&engine)[1].1, ModelState::Available);
    assert!(!engine.unload(Some("b")).await.unwrap().1);
    assert!(engine.load(Some("nope"), None).await.is_err());
    engine.shutdown();
}

/// A backend whose models never load (a test double).
#[derive(Debug)]
struct NeverLoads;

impl Backend for NeverLoads {
    fn kind(&self) -> &'static str {
        "never"
    }
    fn overrides(&self) -> &'static [&'static str] {
        &[]
    }
    fn load(&self, model: &ModelSpec) -> Result<Box<dyn Runner>, BackendError> {
        Err(BackendError::Load {
            model: model.name.clone(),
            message: "the file is not a model".into(),
        })
    }
}

#[tokio::test]
async fn failed_loads_end_their_requests_and_too_many_mark_the_model_failed() {
    let engine = engine(Arc::new(NeverLoads), &["a"], 1, KeepAlive::Forever);
    // Each failure ends its request with the cause.
    for _ in 0..2 {
        assert_eq!(run(&engine, "a", None), Some(FinishReason::Error));
    }
    wait_state(&engine, "a", ModelState::Failed);
    let info = &engine.models()[0];
    assert!(
        info.error.as_deref().unwrap().contains("not a model"),
        "{info:?}"
    );
    let readiness = engine.readiness();
    assert!(!readiness.ready, "{readiness:?}");
    assert_eq!(readiness.failed[0].0, "a");
    let refused = engine.submit(
        RunRequest {
            prompt: "hello".into(),
            ..RunRequest::default()
        },
        true,
    );
    assert!(matches!(refused, Err(EngineError::Unavailable { .. })));
    // An explicit load tries again (and fails again, saying why).
    let retried = engine.load(Some("a"), None).await.unwrap_err();
    assert!(retried.to_string().contains("not a model"), "{retried}");
    engine.shutdown();
}

#[test]
fn places_held_for_requests_being_prepared_count_against_the_queue() {
    let engine = engine(mock(), &["m"], 1, KeepAlive::Forever);
    // The mock's one lane is held by nothing yet: 16 places, then full.
    let held: Vec<Reservation> = (0..16)
        .map(|_| engine.reserve(Some("m")).unwrap())
        .collect();
    assert!(matches!(
        engine.reserve(Some("m")),
        Err(EngineError::QueueFull { .. })
    ));
    let plain = RunRequest {
        prompt: "hello".into(),
        model: Some("m".into()),
        ..RunRequest::default()
    };
    assert!(matches!(
        engine.submit_with(plain.clone(), true, None),
        Err(EngineError::QueueFull { .. })
    ));
    // A request with a place of its own gets in, and its place is taken.
    let mut held = held.into_iter();
    let stream = engine
        .submit_reserved(plain.clone(), true, None, held.next())
        .unwrap();
    // The others given back: room again once the job has run.
    drop(held);
    let deadline = Instant::now() + Duration::from_secs(10);
    while !stream.is_ended() {
        assert!(Instant::now() < deadline, "the run did not end");
        std::thread::sleep(Duration::from_millis(2));
    }
    let again: Vec<Reservation> = (0..16)
        .map(|_| engine.reserve(Some("m")).unwrap())
        .collect();
    drop(again);
    engine.submit_with(plain, true, None).unwrap();
}
