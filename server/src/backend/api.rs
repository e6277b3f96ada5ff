//! What a backend offers the engine (mock, rkllm).
//!
//! A [`Backend`] is a shared factory; [`Backend::load`] runs on the
//! model's own worker thread and returns a [`Runner`] that never leaves
//! that thread. A runner generates one request at a time and reports
//! tokens through a [`TokenSink`], which assembles whole UTF-8 characters
//! and hands them to whatever the engine gave it (a stream).

use super::{TokenSink, ValidRunRequest};
use crate::model::ModelSpec;
use crate::vocab::{FinishReason, Usage};
use std::fmt;

/// Why a backend failed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error, serde::Serialize, serde::Deserialize)]
pub enum BackendError {
    /// The model could not be loaded.
    #[error("model `{model}` could not be loaded: {message}")]
    Load {
        /// Model name.
        model: String,
        /// What went wrong, for the operator.
        message: String,
    },
    /// The backend itself cannot run (for example, no usable runtime library).
    #[error("{0}")]
    Unavailable(String),
    /// A generation failed in the runtime.
    #[error("generation failed in the runtime: {message}")]
    Runtime {
        /// The runtime's own return code, when it gave one.
        code: Option<i32>,
        /// What went wrong, safe to show to a client.
        message: String,
    },
    /// The runner process died or stalled (and was killed): the model is
    /// no longer loaded. The message names the cause, e.g. `runtime
    /// crashed: SIGABRT`.
    #[error("{message}")]
    Lost {
        /// The cause, for the client and the log.
        message: String,
    },
}

/// How a generation ended, as the runner saw it.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct Generation {
    /// `Stop` or `Length` (the engine turns it into `Abort` when cancelled).
    pub finish_reason: FinishReason,
    /// Counts from the runtime, when it reports them; otherwise the sink's.
    pub usage: Option<Usage>,
    /// Prefill and generation times from the runtime, when it reports them.
    pub runtime_timings: Option<(f64, f64)>,
    /// Peak memory the runtime reported, in MB.
    pub memory_mb: Option<f64>,
    /// The input's embedding, for an embedding run.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub embedding: Option<Vec<f32>>,
    /// Positions the runtime's KV cache holds after the run, when it says.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kv_cache_tokens: Option<u32>,
    /// The model's conversation snapshots after the run, when it keeps
    /// them.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub snapshots: Option<SnapshotReport>,
    /// The runner has work for when nothing waits (a returning
    /// conversation's snapshot to bring up to date): the engine asks for
    /// it with a `refresh_snapshot` request once the NPU is idle.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub idle_work: bool,
    /// The verdicts of a probe order.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub verdicts: Option<Box<crate::plan::probe::Verdicts>>,
    /// How much of the prompt the runtime prefilled, and how much it
    /// started from (a snapshot, a prompt cache, its history), when the
    /// runner knows.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub prompt_reuse: Option<PromptReuse>,
}

/// The prompt tokens of one request the runtime started from and those it
/// prefilled.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct PromptReuse {
    /// Tokens a snapshot, the model's prompt cache or the runtime's history
    /// held already.
    pub reused: u32,
    /// Tokens the runtime prefilled.
    pub prefilled: u32,
}

/// A model's conversation snapshots, as a run leaves them: the hits and
/// misses since the last report, and what is kept.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct SnapshotReport {
    /// Conversations sent whole that started from a snapshot.
    pub hits: u32,
    /// Conversations sent whole with none to start from.
    pub misses: u32,
    /// Snapshot files kept.
    pub files: u32,
    /// What their folder takes on disk: the snapshots, the `.json` beside
    /// each, the folder itself (what `snapshot_max_mb` bounds).
    pub bytes: u64,
}

impl Generation {
    /// A generation that ended for `finish_reason` with nothing reported:
    /// the counts and timings are then the sink's own.
    pub fn ended(finish_reason: FinishReason) -> Self {
        Self {
            finish_reason,
            usage: None,
            runtime_timings: None,
            memory_mb: None,
            embedding: None,
            kv_cache_tokens: None,
            snapshots: None,
            idle_work: false,
            verdicts: None,
            prompt_reuse: None,
        }
    }
}

/// Which backend to build, with its settings: what start-up chooses from
/// the config, and what a runner process is told to build.
#[derive(Debug, Clone, serde::Serialize, serde::Deserialize)]
pub enum BackendSettings {
    /// The mock backend.
    Mock(super::MockConfig),
    /// The RKLLM runtime.
    Rkllm(super::RkllmSettings),
}

impl BackendSettings {
    /// Builds the backend (for `rkllm`, loads the runtime library).
    ///
    /// # Errors
    /// [`BackendError::Unavailable`] when the runtime cannot be loaded.
    pub fn build(&self) -> Result<std::sync::Arc<dyn Backend>, BackendError> {
        Ok(match self {
            Self::Mock(config) => std::sync::Arc::new(super::MockBackend::new(*config)),
            Self::Rkllm(settings) => std::sync::Arc::new(
                super::RkllmBackend::new(settings.clone())
                    .map_err(|e| BackendError::Unavailable(e.to_string()))?,
            ),
        })
    }
}

/// Every per-request parameter a backend can apply, for `models`.
pub const ALL_OVERRIDES: &[&str] = &[
    "max_tokens",
    "temperature",
    "top_p",
    "top_k",
    "repeat_penalty",
    "frequency_penalty",
    "presence_penalty",
    "mirostat",
    "mirostat_tau",
    "mirostat_eta",
    "role",
    "enable_thinking",
];

/// A factory of runners, shared by all models of one backend kind.
pub trait Backend: Send + Sync + fmt::Debug {
    /// The backend's name in `models` (`"mock"`, `"rkllm"`).
    fn kind(&self) -> &'static str;

    /// The per-request parameters this backend applies, for `models`.
    fn overrides(&self) -> &'static [&'static str];

    /// Whether its sampler takes a request's `seed`. The runtime's takes
    /// none: there a seed is kept only where sampling is greedy.
    fn seeded(&self) -> bool {
        false
    }

    /// Whether `model` samples greedily (temperature 0) when a request
    /// sets no temperature of its own.
    fn greedy(&self, model: &ModelSpec) -> bool {
        model.settings.temperature == Some(0.0)
    }

    /// Whether its runners probe the runtime at load ([`Runner::verdicts`]):
    /// a request resting on a probed feature of a model not loaded yet
    /// waits for the load to be checked.
    fn probes(&self) -> bool {
        false
    }

    /// Generations that may run at once per model, each lane on its own
    /// worker thread with its own runner. The NPU runs one at a time; only
    /// the mock offers more, for benchmarks.
    fn lanes(&self) -> usize {
        1
    }

    /// Refuses, before it is queued, a request that this backend can tell
    /// will fail (the mock: a malformed `@mock(...)` directive). The
    /// message names what is wrong.
    ///
    /// # Errors
    /// A message for the client, about the prompt.
    fn check(&self, _request: &ValidRunRequest) -> Result<(), String> {
        Ok(())
    }

    /// The tokenizer structured output works over for `model`: its own
    /// (`tokenizer`), or one the backend brings (the mock's).
    fn tokenizer(&self, model: &ModelSpec) -> Option<crate::model::tokenizer::TokenizerSource> {
        model.tokenizer.clone()
    }

    /// Tokens `model`'s context holds, when the backend knows.
    fn context_length(&self, model: &ModelSpec) -> Option<u32> {
        model.settings.max_context_len
    }

    /// Why `model` cannot be served, found without loading it: its file or
    /// its vision encoder's is missing (the rkllm backend adds: the RKNN
    /// runtime its encoder needs does not load). The engine lists such a
    /// model as failed with this reason and serves the others.
    ///
    /// # Errors
    /// The reason, for `models` and the log.
    fn preflight(&self, model: &ModelSpec) -> Result<(), String> {
        files_present(model)
    }

    /// Loads a model. Called on the model's worker thread, which then owns
    /// the runner for its whole life.
    ///
    /// # Errors
    /// [`BackendError::Load`] when the model cannot be loaded.
    fn load(&self, model: &ModelSpec) -> Result<Box<dyn Runner>, BackendError>;
}

/// That a model's files (its own, its vision encoder's) exist.
///
/// # Errors
/// Which file is missing.
pub fn files_present(model: &ModelSpec) -> Result<(), String> {
    if let Some(path) = model.path.as_ref().filter(|p| !p.is_file()) {
        return Err(format!("its file {} does not exist", path.display()));
    }
    if let Some(vision) = model.vision.as_ref().filter(|v| !v.encoder.is_file()) {
        return Err(format!(
            "its vision encoder {} does not exist",
            vision.encoder.display()
        ));
    }
    Ok(())
}

/// One loaded model, owned by its worker thread.
pub trait Runner {
    /// Generates text for `request`, reporting tokens to `sink`, until the
    /// model stops, the token cap is reached or `sink` says to stop.
    ///
    /// # Errors
    /// [`BackendError::Runtime`] when the runtime fails.
    fn generate(
        &mut self,
        request: &ValidRunRequest,
        sink: &mut TokenSink<'_>,
    ) -> Result<Generation, BackendError>;

    /// Checks, between generations, that the runner can still generate.
    /// Runners in this process always can; a runner process may have died.
    ///
    /// # Errors
    /// [`BackendError::Lost`] with the cause.
    fn alive(&mut self) -> Result<(), BackendError> {
        Ok(())
    }

    /// The runner's process, when it has its own.
    fn process_id(&self) -> Option<u32> {
        None
    }

    /// What the probes found of the model's runtime at load (none for a
    /// backend with nothing to probe).
    fn verdicts(&self) -> Option<crate::plan::probe::Verdicts> {
        None
    }
}
