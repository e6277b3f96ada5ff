//! Admission and per-model queues.
//!
//! Each model has a bounded queue (full → [`EngineError::QueueFull`]) in
//! two lanes, interactive and background, each first come, first served:
//! interactive jobs that arrive after a background job go ahead of it
//! until it has aged ([`super::Ageing`]); the bound counts both. It has
//! worker threads ([`super::lifecycle`]) that load the model when work
//! comes, run queued jobs in order, one at a time per lane, and unload it
//! when idle. (A backend may ask for more lanes, each with its own runner
//! taking jobs from the same queue: only the mock does, so that benchmarks
//! can run many streams at once.) A job whose stream has ended (aborted,
//! expired, consumer gone) before its turn is skipped and does not count
//! against the queue's bound.

use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use super::job::Job;
use super::keep_alive::KeepAlive;
use super::lifecycle::{self, Lifecycle, ModelSlot, ModelState, Shared};
use super::priority::Ageing;
use super::tokenizers::{TokenizerInfo, TokenizerOrigin, Tokenizers};
use super::{RequestLimits, RunRequest, ValidationError};
use crate::backend::{Backend, BackendError};
use crate::model::ModelSpec;
use crate::stream::{Stream, StreamError, StreamManager};
use crate::vocab::{EndErrorKind, EndInfo};

/// Engine limits (config sections `[engine]` and `[limits]`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct EngineLimits {
    /// Jobs that may wait per model (the running one not counted).
    pub queue_len: usize,
    /// How long later interactive jobs may go ahead of a background job.
    pub ageing: Ageing,
    /// Request validation limits.
    pub request: RequestLimits,
    /// When models load and unload.
    pub lifecycle: Lifecycle,
}

/// Why the engine refused a request.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum EngineError {
    /// The request is invalid.
    #[error(transparent)]
    Invalid(#[from] ValidationError),
    /// The model's queue is full.
    #[error(
        "server busy: the queue of model `{model}` is full ({queue_len} waiting, engine.queue_len)"
    )]
    QueueFull {
        /// Model name.
        model: String,
        /// The queue's bound.
        queue_len: usize,
        /// A suggestion for when to retry.
        retry_after_ms: u64,
    },
    /// The model failed (it crashed too often) or could not be loaded.
    #[error("model `{model}` is unavailable: {reason}")]
    Unavailable {
        /// Model name.
        model: String,
        /// Why.
        reason: String,
    },
    /// The stream could not be created.
    #[error(transparent)]
    Stream(#[from] StreamError),
    /// A model failed to load at start.
    #[error(transparent)]
    Load(#[from] BackendError),
}

/// How busy a node is ([`Engine::node_load`]).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct NodeLoad {
    /// Requests waiting in the models' queues.
    pub queued: usize,
    /// Generations running now.
    pub running: usize,
    /// Models loaded.
    pub loaded_models: usize,
}

/// Whether a node can serve ([`Engine::readiness`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Readiness {
    /// Some model can serve and no queue is full.
    pub ready: bool,
    /// Why not, when not.
    pub reason: Option<String>,
    /// The failed models, with why.
    pub failed: Vec<(String, String)>,
}

/// A model as `models` reports it.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct ModelInfo {
    /// Name clients use.
    pub name: String,
    /// Backend kind.
    pub backend: &'static str,
    /// Lifecycle state.
    pub state: ModelState,
    /// Whether it is loaded (`state == loaded`).
    pub loaded: bool,
    /// Whether it is used when a request names no model.
    pub default: bool,
    /// The per-request parameters the backend applies.
    pub overrides: &'static [&'static str],
    /// What it takes: `completion`, and `vision` for a model with a
    /// vision encoder.
    pub capabilities: Vec<&'static str>,
    /// Why it failed, or why its last load failed.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    /// Seconds until an idle loaded model unloads (absent: not loaded, or
    /// loaded for good).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub expires_in_secs: Option<u64>,
    /// Process ids of its runner processes.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub runner_pids: Vec<u32>,
    /// Resident memory of its runner processes.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub memory_bytes: Option<u64>,
    /// Names of its LoRA adapters (a request's `lora`).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub lora_adapters: Vec<String>,
    /// Positions the runtime's KV cache held after the last request
    /// (runtimes 1.2.1 and later; absent when unknown or not loaded).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub kv_cache_tokens: Option<u64>,
    /// Its conversation snapshots (absent: it keeps none, or has not run a
    /// conversation since it loaded).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub snapshots: Option<crate::backend::SnapshotReport>,
    /// Size of the model file.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub size_bytes: Option<u64>,
    /// Its tokenizer, which structured output needs (absent: none).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tokenizer: Option<TokenizerInfo>,
    /// Tokens its context holds (prompt and reply together).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub context_length: Option<u32>,
    /// What the probes found of its runtime at its last load: each probe's
    /// verdict and the features they leave on (absent: not loaded since
    /// the server started, or a backend with nothing to probe).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub probes: Option<crate::plan::probe::Verdicts>,
    /// Strings that end its replies (a server-side template's).
    #[serde(skip)]
    pub stop_strings: Vec<String>,
    /// The model file, for backends that load one (not on the wire).
    #[serde(skip)]
    pub path: Option<std::path::PathBuf>,
    /// Time until it unloads, exactly (not on the wire).
    #[serde(skip)]
    pub expires_in: Option<Duration>,
}

/// A place held in a model's queue while a request is prepared (its
/// schema compiled, which costs memory and time): it counts against the
/// queue's bound, so that a request that would be refused for a full queue
/// is refused before that work. Given back on drop, unless the request is
/// submitted with it ([`Engine::submit_reserved`]).
#[derive(Debug)]
pub struct Reservation {
    slot: Arc<ModelSlot>,
    held: bool,
}

impl Drop for Reservation {
    fn drop(&mut self) {
        if self.held {
            self.slot.life.lock().reserved -= 1;
        }
    }
}

/// Owns the model workers and admits requests.
#[derive(Debug)]
pub struct Engine {
    shared: Arc<Shared>,
    streams: Arc<StreamManager>,
    limits: EngineLimits,
    tokenizers: Tokenizers,
}

impl Engine {
    /// Starts the worker threads of every model; no model is loaded yet
    /// (see [`Engine::preload`]). The first model is the default.
    ///
    /// # Errors
    /// When a worker thread cannot be started.
    pub fn start(
        backend: Arc<dyn Backend>,
        models: &[ModelSpec],
        limits: EngineLimits,
        streams: Arc<StreamManager>,
    ) -> Result<Self, EngineError> {
        let shared = Arc::new(Shared::new(
            backend,
            models,
            limits.lifecycle,
            limits.ageing,
        ));
        for slot in shared.snapshot() {
            lifecycle::start_lanes(&shared, &slot)?;
        }
        let engine = Self {
            shared,
            streams,
            limits,
            tokenizers: Tokenizers::default(),
        };
        for spec in models {
            engine.preflight(spec);
        }
        Ok(engine)
    }

    /// Loads `names` and waits until they are loaded (start-up). Blocks.
    /// A model that does not load is marked failed with why (the others
    /// still load): the start never depends on every model.
    ///
    /// # Errors
    /// A name that is no model (a configuration error).
    pub fn preload(&self, names: &[String]) -> Result<(), EngineError> {
        let mut waiting = Vec::new();
        for name in names {
            let slot = self.slot(Some(name))?;
            if let Some(target) = self.shared.want_loaded(&slot, None) {
                waiting.push((slot, target));
            }
        }
        let lanes = self.shared.backend.lanes().max(1);
        for (slot, target) in waiting {
            loop {
                match self.shared.load_outcome(&slot, target) {
                    // Every lane's runner, so that none loads on a request.
                    Ok(true) if self.shared.lanes_loaded(&slot) >= lanes => break,
                    Ok(_) => std::thread::sleep(Duration::from_millis(10)),
                    Err(message) => {
                        self.mark_failed(slot.name(), format!("preload failed: {message}"));
                        break;
                    }
                }
            }
        }
        Ok(())
    }

    /// The tokenizer structured output works over for `slot`'s model.
    fn tokenizer_of(
        &self,
        slot: &ModelSlot,
    ) -> Result<crate::model::tokenizer::TokenizerSource, ValidationError> {
        self.shared
            .backend
            .tokenizer(&slot.spec)
            .ok_or_else(|| ValidationError::Invalid {
                field: "format",
                message: format!(
                    "model `{}` has no tokenizer, which a format or a forced tool call needs: set \
                     `tokenizer` (a tokenizer.json file, or a Hugging Face repository owner/repo \
                     holding one) in its [[models]] entry",
                    slot.name()
                ),
            })
    }

    /// What the runner reads beyond the text, checked against `slot`'s
    /// model: log probabilities need its tokenizer (its logits rows are
    /// read with it) and no constraint; a thinking budget of a model that
    /// thinks needs its tokenizer too, without which it is not kept (and
    /// the log says so).
    ///
    /// # Errors
    /// A [`ValidationError::Invalid`] on `logprobs`.
    fn check_reading(
        &self,
        slot: &ModelSlot,
        request: &mut crate::backend::ValidRunRequest,
    ) -> Result<(), EngineError> {
        if request.sampling.logprobs.is_some() {
            let refused = |message: String| -> EngineError {
                ValidationError::Invalid {
                    field: "logprobs",
                    message,
                }
                .into()
            };
            if request.constraint.is_some() {
                return Err(refused(
                    "`logprobs` cannot go with a format or a forced tool call: the answer's \
                     tokens are chosen under the constraint, not as the model ranks them"
                        .into(),
                ));
            }
            if self.shared.backend.tokenizer(&slot.spec).is_none() {
                return Err(refused(format!(
                    "model `{}` cannot report log probabilities: its logits rows are read with its \
                     tokenizer; set `tokenizer` (a tokenizer.json file, or a Hugging Face \
                     repository owner/repo holding one) in its [[models]] entry",
                    slot.name()
                )));
            }
        }
        super::gates::gate(slot, request)?;
        if let Some(budget) = request.sampling.thinking_budget
            && slot.spec.reasoning.thinks(slot.name())
            && self.shared.backend.tokenizer(&slot.spec).is_none()
        {
            // The runner closes the block in the model's own tokens;
            // without them the model thinks to its end. Refusing instead
            // would refuse every request of clients that always send a
            // budget (Claude Code).
            tracing::warn!(
                model = slot.name(),
                tokens = budget.tokens,
                named = budget.named,
                "the request's thinking budget is not kept: the model has no tokenizer (set \
                 `tokenizer` in its [[models]] entry)"
            );
            request.sampling.thinking_budget = None;
        }
        Ok(())
    }

    /// Where `model`'s tokenizer comes from (`None`: an unknown model, or
    /// one without a tokenizer).
    pub fn tokenizer_source(
        &self,
        model: &str,
    ) -> Option<crate::model::tokenizer::TokenizerSource> {
        let slot = self.slot(Some(model)).ok()?;
        self.shared.backend.tokenizer(&slot.spec)
    }

    /// The encoder of `model`'s tokenizer (the default model when `None`),
    /// for true token counts; `None` for a model without a usable one.
    /// Blocks: a first use loads it.
    pub fn encoder(&self, model: Option<&str>) -> Option<Arc<crate::model::tokenizer::Encoder>> {
        let slot = self.slot(model).ok()?;
        let source = self.shared.backend.tokenizer(&slot.spec)?;
        self.tokenizers.encoder(slot.name(), &source)
    }

    /// [`Engine::encoder`] when it is loaded already, without loading or
    /// reading anything: for counting in place, where blocking is not
    /// allowed.
    pub fn cached_encoder(
        &self,
        model: Option<&str>,
    ) -> Option<Arc<crate::model::tokenizer::Encoder>> {
        let slot = self.slot(model).ok()?;
        let source = self.shared.backend.tokenizer(&slot.spec)?;
        crate::backend::vocabularies::cached_encoder(&source)
    }

    /// Checks that `constraint` can hold an answer of `model` (the default
    /// when `None`): the model has a tokenizer, and the engine compiles the
    /// constraint over it (kept for the generation). Blocks: a first use
    /// loads the tokenizer and compiles.
    ///
    /// # Errors
    /// An unknown model; a [`ValidationError::Invalid`] on `format` naming
    /// the model and the setting to add, or what in the schema the engine
    /// cannot take.
    pub fn check_constraint(
        &self,
        model: Option<&str>,
        constraint: &crate::model::constraint::Constraint,
    ) -> Result<(), ValidationError> {
        let slot = self.slot(model)?;
        let source = self.tokenizer_of(&slot)?;
        let invalid = |message: String| ValidationError::Invalid {
            field: "format",
            message,
        };
        let vocabulary = self
            .tokenizers
            .load(slot.name(), &source)
            .map_err(invalid)?;
        crate::model::constraint::check(&vocabulary, constraint)
            .map_err(|e| invalid(format!("`format` cannot be followed: {e}")))
    }

    /// Records where `model`'s tokenizer comes from and, when its file is
    /// not there, why (what a constrained request for it is refused with).
    pub fn set_tokenizer_origin(&self, model: &str, origin: TokenizerOrigin) {
        self.tokenizers.set_origin(model, origin);
    }

    /// Marks a model failed when the backend can tell, without loading it,
    /// that it cannot be served (a missing file or runtime library).
    fn preflight(&self, spec: &ModelSpec) {
        if let Err(reason) = self.shared.backend.preflight(spec) {
            self.mark_failed(&spec.name, reason);
        }
    }

    /// Marks a model failed with `reason` (one that cannot load: a missing
    /// file or runtime library, a failed preload), logged once. It is
    /// listed with the reason and refused until an explicit load retries
    /// it; the other models are not affected.
    pub fn mark_failed(&self, name: &str, reason: String) {
        let Ok(slot) = self.slot(Some(name)) else {
            return;
        };
        tracing::error!(model = name, %reason, "model cannot be served");
        {
            let mut life = slot.life.lock();
            life.state = ModelState::Failed;
            life.last_error = Some(reason);
        }
        slot.changed.send_modify(|n| *n = n.wrapping_add(1));
        slot.wake.notify_all();
    }

    /// Loads a model (the default one when `model` is `None`) and waits
    /// until it is loaded; `keep_alive` sets how long it then stays idle.
    /// An explicit load also retries a failed model. Returns its name.
    ///
    /// # Errors
    /// Unknown model, or the load failed or timed out.
    pub async fn load(
        &self,
        model: Option<&str>,
        keep_alive: Option<KeepAlive>,
    ) -> Result<String, EngineError> {
        let slot = self.slot(model)?;
        let mut changes = slot.changed.subscribe();
        let Some(target) = self.shared.want_loaded(&slot, keep_alive) else {
            return Ok(slot.name().to_owned());
        };
        // The lane keeps its own deadline for the gate and the load; this
        // one only guards against waiting forever.
        let deadline = tokio::time::Instant::now()
            + self.limits.lifecycle.load_timeout * 2
            + Duration::from_secs(5);
        loop {
            match self.shared.load_outcome(&slot, target) {
                Ok(true) => return Ok(slot.name().to_owned()),
                Ok(false) => {}
                Err(message) => {
                    return Err(EngineError::Unavailable {
                        model: slot.name().to_owned(),
                        reason: message,
                    });
                }
            }
            if !matches!(
                tokio::time::timeout_at(deadline, changes.changed()).await,
                Ok(Ok(()))
            ) {
                return Err(EngineError::Unavailable {
                    model: slot.name().to_owned(),
                    reason: "it did not load in time".into(),
                });
            }
        }
    }

    /// Unloads a model once its current generation is over, and waits
    /// until it is. Returns its name and whether it was loaded.
    ///
    /// # Errors
    /// Unknown model.
    pub async fn unload(&self, model: Option<&str>) -> Result<(String, bool), EngineError> {
        let slot = self.slot(model)?;
        let mut changes = slot.changed.subscribe();
        let was_loaded = self.shared.want_unloaded(&slot);
        while !self.shared.unloaded(&slot) {
            if changes.changed().await.is_err() {
                break;
            }
        }
        Ok((slot.name().to_owned(), was_loaded))
    }

    /// One model with its state: `name`, or the default model.
    ///
    /// # Errors
    /// Unknown model (the message lists the models).
    pub fn model(&self, name: Option<&str>) -> Result<ModelInfo, EngineError> {
        let slot = self.slot(name)?;
        self.models()
            .into_iter()
            .find(|m| m.name == slot.name())
            .ok_or_else(|| self.unknown_model(slot.name()).into())
    }

    /// The limits requests are checked against (`[limits]`).
    pub fn request_limits(&self) -> RequestLimits {
        self.limits.request
    }

    /// Whether a model of this name is served (whatever its state).
    pub fn has_model(&self, name: &str) -> bool {
        self.slot(Some(name)).is_ok()
    }

    /// The stream manager the engine feeds.
    pub fn streams(&self) -> &Arc<StreamManager> {
        &self.streams
    }

    /// Every model with its state.
    pub fn models(&self) -> Vec<ModelInfo> {
        self.shared
            .snapshot()
            .iter()
            .enumerate()
            .map(|(index, slot)| {
                let (state, error) = {
                    let life = slot.life.lock();
                    (life.state, life.last_error.clone())
                };
                let (runner_pids, expires_in) = self.shared.runtime_view(slot);
                let memory_bytes = runner_pids
                    .iter()
                    .filter_map(|&pid| resident_bytes(pid))
                    .reduce(|a, b| a + b);
                ModelInfo {
                    name: slot.name().to_owned(),
                    backend: self.shared.backend.kind(),
                    state,
                    loaded: state == ModelState::Loaded,
                    default: index == 0,
                    overrides: self.shared.backend.overrides(),
                    capabilities: if slot.spec.embedding.is_some() {
                        vec!["embedding"]
                    } else {
                        let mut takes = vec!["completion"];
                        if slot.spec.vision.is_some() {
                            takes.push("vision");
                        }
                        if slot.spec.reasoning.thinks(slot.name()) {
                            takes.push("thinking");
                        }
                        if slot.spec.reranker {
                            takes.push("rerank");
                        }
                        takes
                    },
                    error: matches!(state, ModelState::Failed | ModelState::Available)
                        .then_some(error)
                        .flatten(),
                    expires_in_secs: expires_in.map(|d| d.as_secs()),
                    runner_pids,
                    memory_bytes,
                    lora_adapters: slot.spec.lora.iter().map(|a| a.name.clone()).collect(),
                    kv_cache_tokens: Some(slot.kv_cache_tokens.load(Ordering::Relaxed))
                        .filter(|n| *n != u64::MAX && state == ModelState::Loaded),
                    snapshots: *slot.snapshots.lock(),
                    size_bytes: slot
                        .spec
                        .path
                        .as_ref()
                        .and_then(|p| std::fs::metadata(p).ok())
                        .map(|m| m.len()),
                    context_length: self.shared.backend.context_length(&slot.spec),
                    tokenizer: self.tokenizers.info(
                        slot.name(),
                        self.shared.backend.tokenizer(&slot.spec).as_ref(),
                    ),
                    probes: slot.verdicts.lock().clone(),
                    stop_strings: slot.spec.template.stop_strings(),
                    path: slot.spec.path.clone(),
                    expires_in,
                }
            })
            .collect()
    }

    /// The context of `model` (the default when `None`) in tokens, when
    /// the backend knows it.
    pub fn context_length(&self, model: Option<&str>) -> Option<u32> {
        let slot = self.slot(model).ok()?;
        self.shared.backend.context_length(&slot.spec)
    }

    /// What the service needs of `model` (the default when `None`) to
    /// prepare a request, in one value: resolved when first asked, and
    /// again after its probes' verdicts change.
    ///
    /// # Errors
    /// An unknown model.
    pub fn profile(
        &self,
        model: Option<&str>,
    ) -> Result<Arc<super::ModelProfile>, ValidationError> {
        let slot = self.slot(model)?;
        Ok(super::lifecycle::profile_of(
            &slot,
            self.shared.backend.as_ref(),
        ))
    }

    /// Whether the backend probes its models' runtime at load.
    pub fn probes(&self) -> bool {
        self.shared.backend.probes()
    }

    fn unknown_model(&self, name: &str) -> ValidationError {
        ValidationError::UnknownModel {
            name: name.to_owned(),
            available: self
                .shared
                .snapshot()
                .iter()
                .map(|slot| slot.name().to_owned())
                .collect(),
        }
    }

    fn slot(&self, name: Option<&str>) -> Result<Arc<ModelSlot>, ValidationError> {
        let slots = self.shared.slots.read();
        let found = match name {
            None => slots.first(),
            Some(name) => slots.iter().find(|slot| slot.name() == name),
        };
        found
            .cloned()
            .ok_or_else(|| self.unknown_model(name.unwrap_or_default()))
    }

    /// Adds a model while the server runs (one the store pulled): it is
    /// available at once. A model of that name with the same file is left
    /// as it is.
    ///
    /// # Errors
    /// A model of that name with another file, or no worker thread.
    pub fn add_model(&self, spec: ModelSpec) -> Result<(), EngineError> {
        let slot = {
            let mut slots = self.shared.slots.write();
            if let Some(existing) = slots.iter().find(|s| s.name() == spec.name) {
                if existing.spec.path == spec.path {
                    return Ok(());
                }
                return Err(EngineError::Unavailable {
                    model: spec.name,
                    reason: "a model of that name is already configured with another file".into(),
                });
            }
            let slot = Arc::new(ModelSlot::new(spec, self.limits.ageing));
            slots.push(Arc::clone(&slot));
            slot
        };
        lifecycle::start_lanes(&self.shared, &slot)?;
        self.preflight(&slot.spec);
        Ok(())
    }

    /// Removes a model while the server runs (`rm`, `/api/delete`): its
    /// queued requests end with an error, a generation in progress ends,
    /// and its runners unload. Returns once it is unloaded.
    ///
    /// # Errors
    /// An unknown model.
    pub async fn remove_model(&self, name: &str) -> Result<(), EngineError> {
        let slot = self.slot(Some(name))?;
        self.shared.slots.write().retain(|s| !Arc::ptr_eq(s, &slot));
        self.tokenizers.forget(name);
        let mut changes = slot.changed.subscribe();
        let jobs: Vec<_> = {
            let mut life = slot.life.lock();
            life.shutdown = true;
            life.jobs.drain()
        };
        for job in jobs {
            job.stream.end_with(|usage| {
                EndInfo::error(
                    EndErrorKind::Runtime,
                    format!("model `{name}` was removed"),
                    usage,
                )
            });
        }
        slot.wake.notify_all();
        slot.changed.send_modify(|n| *n = n.wrapping_add(1));
        while !self.shared.unloaded(&slot) {
            if changes.changed().await.is_err() {
                break;
            }
        }
        Ok(())
    }

    /// Validates `request`, creates its stream and queues it. `polled`
    /// streams keep chunks for HTTP polling (see [`StreamManager::create`]).
    ///
    /// # Errors
    /// Invalid request, unknown or failed model, full queue, too many
    /// streams, shutdown.
    pub fn submit(&self, request: RunRequest, polled: bool) -> Result<Arc<Stream>, EngineError> {
        self.submit_with(request, polled, None)
    }

    /// [`Engine::submit`] with the keep-alive the model gets after this
    /// request (Ollama's `keep_alive`).
    ///
    /// # Errors
    /// As [`Engine::submit`].
    pub fn submit_with(
        &self,
        request: RunRequest,
        polled: bool,
        keep_alive: Option<KeepAlive>,
    ) -> Result<Arc<Stream>, EngineError> {
        self.submit_reserved(request, polled, keep_alive, None)
    }

    /// Holds a place in `model`'s queue for a request being prepared.
    ///
    /// # Errors
    /// Unknown or failed model, or a full queue (places held count).
    pub fn reserve(&self, model: Option<&str>) -> Result<Reservation, EngineError> {
        let slot = self.slot(model)?;
        let mut life = slot.life.lock();
        self.room(&slot, &mut life, 0)?;
        life.reserved += 1;
        drop(life);
        Ok(Reservation { slot, held: true })
    }

    /// Refuses a job for a failed model or a full queue, counting the
    /// places held for others (`own` of them are this request's).
    fn room(
        &self,
        slot: &ModelSlot,
        life: &mut super::lifecycle::Life,
        own: usize,
    ) -> Result<(), EngineError> {
        if life.state == ModelState::Failed {
            return Err(EngineError::Unavailable {
                model: slot.name().to_owned(),
                reason: life
                    .last_error
                    .clone()
                    .unwrap_or_else(|| "it failed".into()),
            });
        }
        life.jobs.retain(|job| !job.stream.is_ended());
        if life.jobs.len() + life.reserved - own >= self.limits.queue_len {
            let waiting = life.jobs.len() as u64 + 1;
            return Err(EngineError::QueueFull {
                model: slot.name().to_owned(),
                queue_len: self.limits.queue_len,
                retry_after_ms: (slot.avg_job_ms.load(Ordering::Relaxed) * waiting).max(100),
            });
        }
        Ok(())
    }

    /// [`Engine::submit_with`] for a request that holds a place in its
    /// model's queue (taken by the job).
    ///
    /// # Errors
    /// As [`Engine::submit`].
    pub fn submit_reserved(
        &self,
        request: RunRequest,
        polled: bool,
        keep_alive: Option<KeepAlive>,
        mut reservation: Option<Reservation>,
    ) -> Result<Arc<Stream>, EngineError> {
        let slot = self.slot(request.model.as_deref())?;
        let mut request = request;
        // The template's own stop strings (the prompt was built for it).
        let stop = request.prompt.stop.clone();
        let wants_embedding = request.embed;
        let priority = request.priority;
        let constraint = request.constraint.take();
        let asked_context = request.context;
        let conversation = request.conversation.take();
        let mut request = request.validate(slot.name().to_owned(), &self.limits.request)?;
        let model_context = self.shared.backend.context_length(&slot.spec);
        let context = super::request_context(&request, asked_context, model_context)?;
        super::check_overrides(&request, self.shared.backend.overrides())?;
        let backend = &self.shared.backend;
        super::check_seed(&request, backend.seeded(), || backend.greedy(&slot.spec))?;
        fit_window(
            &mut request,
            asked_context,
            context,
            self.limits.request.default_max_tokens.is_none(),
        )?;
        if let Some(constraint) = constraint {
            let tokenizer = self.tokenizer_of(&slot)?;
            request.constraint = Some(crate::backend::Constrained {
                constraint,
                tokenizer,
            });
        }
        self.check_reading(&slot, &mut request)?;
        super::check_images(&request, slot.spec.vision.as_ref())?;
        let request = super::check_embedding(request, slot.spec.embedding, wants_embedding)?;
        super::check_lora(&request, &slot.spec.lora)?;
        super::check_context(&request, model_context)?;
        self.shared
            .backend
            .check(&request)
            .map_err(|message| ValidationError::Invalid {
                field: "prompt",
                message,
            })?;
        let mut life = slot.life.lock();
        let own = reservation
            .as_ref()
            .filter(|r| r.held && Arc::ptr_eq(&r.slot, &slot))
            .map_or(0, |_| 1);
        self.room(&slot, &mut life, own)?;
        let stream = self.streams.create(slot.name(), polled)?;
        if own == 1
            && let Some(reservation) = reservation.as_mut()
        {
            // The job takes the place (given back here, under the lock
            // the job is queued under).
            life.reserved -= 1;
            reservation.held = false;
        }
        let now = Instant::now();
        life.jobs.push(
            Job {
                stream: Arc::clone(&stream),
                request,
                enqueued: now,
                stop,
                reasoning: slot.spec.reasoning,
                keep_alive,
                priority,
                conversation,
            },
            priority,
            now,
        );
        crate::metrics::queued(priority.as_str());
        drop(life);
        // Whatever a lane does while the NPU is idle stops for it.
        self.shared.interrupt_idle_work();
        slot.wake.notify_all();
        Ok(stream)
    }

    /// Whether this node can serve: ready while at least one model can
    /// serve (not failed) and no model's queue is full. Failed models are
    /// listed with why either way, so a node with one broken model keeps
    /// serving the others (and a balancer keeps it in rotation).
    pub fn readiness(&self) -> Readiness {
        let mut readiness = Readiness {
            ready: true,
            reason: None,
            failed: Vec::new(),
        };
        let slots = self.shared.snapshot();
        for slot in &slots {
            let life = slot.life.lock();
            if life.state == ModelState::Failed {
                let why = life
                    .last_error
                    .clone()
                    .unwrap_or_else(|| "it crashed repeatedly".into());
                readiness.failed.push((slot.name().to_owned(), why));
                continue;
            }
            let waiting = life.waiting();
            if waiting >= self.limits.queue_len && readiness.reason.is_none() {
                readiness.ready = false;
                readiness.reason = Some(format!(
                    "the queue of model `{}` is full ({waiting} waiting)",
                    slot.name()
                ));
            }
        }
        if slots.is_empty() {
            readiness.ready = false;
            readiness.reason = Some(
                "no model to serve: pull one (`rkllm-server pull`, /api/pull) or configure [[models]]"
                    .into(),
            );
        } else if readiness.failed.len() == slots.len() {
            readiness.ready = false;
            let reasons: Vec<String> = readiness
                .failed
                .iter()
                .map(|(model, why)| format!("model `{model}` failed: {why}"))
                .collect();
            readiness.reason = Some(reasons.join("; "));
        }
        readiness
    }

    /// Whether the supervisor is sound: every worker thread runs and no
    /// model's lock is stuck. For the systemd watchdog.
    pub fn supervisor_healthy(&self) -> bool {
        let slots = self.shared.snapshot();
        // Removed models' threads may still be stopping: more is fine.
        let expected = slots.len() * self.shared.backend.lanes().max(1);
        if *self.shared.threads.running.lock() < expected {
            return false;
        }
        slots
            .iter()
            .all(|slot| slot.life.try_lock_for(Duration::from_secs(2)).is_some())
    }

    /// How busy this node is, for a load balancer: requests waiting and
    /// running over every model, and the models loaded.
    pub fn node_load(&self) -> NodeLoad {
        let mut load = NodeLoad::default();
        for slot in self.shared.snapshot() {
            let life = slot.life.lock();
            load.queued += life.waiting();
            load.running += life.running();
            load.loaded_models += usize::from(life.state == ModelState::Loaded);
        }
        load
    }

    /// Requests waiting, over every model (for metrics).
    pub fn queued(&self) -> usize {
        self.node_load().queued
    }

    /// 1-based position of a queued stream in its model's queue (1 = next),
    /// background jobs that have aged by now counted among the interactive
    /// ones by arrival.
    pub fn queue_position(&self, stream: &Stream) -> Option<usize> {
        let slot = self.slot(Some(stream.model())).ok()?;
        let mut life = slot.life.lock();
        life.jobs
            .ordered(Instant::now())
            .filter(|job| !job.stream.is_ended())
            .position(|job| std::ptr::eq(Arc::as_ptr(&job.stream), stream))
            .map(|i| i + 1)
    }

    /// Waits up to `timeout` for every worker to stop and release its
    /// model. Returns whether they all did. Blocks: call it off the async
    /// runtime.
    pub fn wait_stopped(&self, timeout: Duration) -> bool {
        let deadline = Instant::now() + timeout;
        let threads = &self.shared.threads;
        let mut running = threads.running.lock();
        while *running > 0 {
            if threads
                .stopped
                .wait_until(&mut running, deadline)
                .timed_out()
            {
                return *running == 0;
            }
        }
        true
    }

    /// Stops the workers after their current job (which the stream
    /// manager's shutdown has already aborted); they unload their models.
    pub fn shutdown(&self) {
        for slot in self.shared.snapshot() {
            slot.life.lock().shutdown = true;
            slot.idle_stop.interrupt();
            slot.wake.notify_all();
            slot.changed.send_modify(|n| *n = n.wrapping_add(1));
        }
    }
}

/// The worker threads end with their engine: they hold its shared state,
/// not the engine itself, so dropping the last handle stops them (after
/// their current job) and unloads their models.
impl Drop for Engine {
    fn drop(&mut self) {
        self.shutdown();
    }
}

/// Resident memory of a process, from `/proc/PID/status`.
fn resident_bytes(pid: u32) -> Option<u64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    let line = status.lines().find(|l| l.starts_with("VmRSS:"))?;
    let kib: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kib * 1024)
}

/// The token cap of a request in the context it runs in (`context`): with
/// no length named and no default cap (`uncapped`), until the context is
/// full; in a window of its own (`asked`, Ollama's `num_ctx`), the prompt
/// must fit it and the answer ends where it is full.
///
/// # Errors
/// A prompt as long as the window or longer, naming `prompt`.
fn fit_window(
    request: &mut crate::backend::ValidRunRequest,
    asked: Option<u64>,
    context: Option<u32>,
    uncapped: bool,
) -> Result<(), ValidationError> {
    if !request.max_tokens_requested && uncapped {
        // No length named, and no cap configured: until the model ends
        // or its context is full.
        if let Some(context) = context {
            request.max_tokens = context.max(1);
        }
    }
    if let Some(window) = asked.and(context) {
        // A window of its own: the prompt must fit it, and the answer
        // ends where it is full.
        let (tokens, how) = super::prompt_tokens(request);
        let room = (window as usize).checked_sub(tokens).filter(|&n| n > 0);
        let Some(room) = room else {
            return Err(ValidationError::TooLarge {
                field: "prompt",
                message: format!(
                    "the prompt is {tokens} tokens ({how}), as many as or more than the \
                     {window} tokens of context the request asked for (`options.num_ctx`): \
                     ask for a larger context, or shorten the conversation"
                ),
            });
        };
        request.max_tokens = request
            .max_tokens
            .min(u32::try_from(room).unwrap_or(u32::MAX));
    }
    Ok(())
}
