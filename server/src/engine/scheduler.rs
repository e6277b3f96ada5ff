//! Per-model FIFO queues and their worker threads.
//!
//! Each model has a bounded queue (full → [`EngineError::QueueFull`]) and
//! one OS thread that owns the model's runner and runs queued jobs in
//! order, one at a time. (A backend may ask for more lanes, each a thread
//! with its own runner taking jobs from the same queue: only the mock does,
//! so that benchmarks can run many streams at once.) A job whose stream has ended (aborted, expired,
//! consumer gone) before its turn is skipped and does not count against
//! the queue's bound.

use std::collections::VecDeque;
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Instant;

use parking_lot::{Condvar, Mutex};

use super::{RequestLimits, RunRequest, ValidationError};
use crate::backend::{
    Backend, BackendError, ChatTemplate, ModelSpec, Role, Runner, TokenSink, ValidRunRequest,
};
use crate::stream::{Stream, StreamError, StreamManager};
use crate::vocab::{EndErrorKind, EndInfo, FinishReason, Timings, Usage};

/// Engine limits (config sections `[engine]` and `[limits]`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct EngineLimits {
    /// Jobs that may wait per model (the running one not counted).
    pub queue_len: usize,
    /// Request validation limits.
    pub request: RequestLimits,
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
    /// The model's worker is not running.
    #[error("model `{0}` is not loaded")]
    NotLoaded(String),
    /// The stream could not be created.
    #[error(transparent)]
    Stream(#[from] StreamError),
    /// A model failed to load at start.
    #[error(transparent)]
    Load(#[from] BackendError),
}

/// A model as `models` reports it.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct ModelInfo {
    /// Name clients use.
    pub name: String,
    /// Backend kind.
    pub backend: &'static str,
    /// Whether its worker runs with the model loaded.
    pub loaded: bool,
    /// Whether it is used when a request names no model.
    pub default: bool,
    /// The per-request parameters the backend applies.
    pub overrides: &'static [&'static str],
    /// The model file, for backends that load one (not on the wire).
    #[serde(skip)]
    pub path: Option<std::path::PathBuf>,
}

struct Job {
    stream: Arc<Stream>,
    request: ValidRunRequest,
    enqueued: Instant,
    /// Stop strings of a server-side template.
    stop: Vec<String>,
}

#[derive(Default)]
struct Queue {
    jobs: VecDeque<Job>,
    shutdown: bool,
}

struct ModelSlot {
    name: String,
    path: Option<std::path::PathBuf>,
    template: ChatTemplate,
    // Synchronous lock: pushes and pops of a short queue; the worker parks
    // on the condvar, never an async task.
    queue: Mutex<Queue>,
    wake: Condvar,
    loaded: AtomicBool,
    /// Moving average of recent job durations, for `retry_after_ms`.
    avg_job_ms: AtomicU64,
}

impl ModelSlot {
    /// Jobs still waiting (a job whose stream ended before its turn does
    /// not count: the worker skips it).
    fn waiting(&self) -> usize {
        self.queue
            .lock()
            .jobs
            .iter()
            .filter(|job| !job.stream.is_ended())
            .count()
    }
}

impl std::fmt::Debug for ModelSlot {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ModelSlot")
            .field("name", &self.name)
            .finish_non_exhaustive()
    }
}

/// Counts running model workers, so shutdown can wait for them to release
/// their models.
#[derive(Debug, Default)]
struct Workers {
    running: Mutex<usize>,
    stopped: Condvar,
}

/// Owns the model workers and admits requests.
#[derive(Debug)]
pub struct Engine {
    models: Vec<Arc<ModelSlot>>,
    workers: Arc<Workers>,
    backend: Arc<dyn Backend>,
    streams: Arc<StreamManager>,
    limits: EngineLimits,
}

impl Engine {
    /// Starts one worker thread per model, each loading its model, and
    /// waits until all are loaded. The first model is the default.
    ///
    /// # Errors
    /// The first load failure.
    pub fn start(
        backend: Arc<dyn Backend>,
        models: &[ModelSpec],
        limits: EngineLimits,
        streams: Arc<StreamManager>,
    ) -> Result<Self, EngineError> {
        let mut slots = Vec::with_capacity(models.len());
        let mut pending = Vec::new();
        let workers = Arc::new(Workers::default());
        let lanes = backend.lanes().max(1);
        for spec in models {
            let slot = Arc::new(ModelSlot {
                name: spec.name.clone(),
                path: spec.path.clone(),
                template: spec.template.clone(),
                queue: Mutex::new(Queue::default()),
                wake: Condvar::new(),
                loaded: AtomicBool::new(false),
                avg_job_ms: AtomicU64::new(1000),
            });
            for lane in 0..lanes {
                let thread_name = if lanes == 1 {
                    format!("model-{}", spec.name)
                } else {
                    format!("model-{}-{lane}", spec.name)
                };
                pending.push(spawn_worker(thread_name, &slot, &backend, spec, &workers)?);
            }
            slots.push(slot);
        }
        for ready in pending {
            match ready.recv() {
                Ok(Ok(())) => {}
                Ok(Err(err)) => return Err(err.into()),
                Err(_) => {
                    return Err(BackendError::Load {
                        model: String::new(),
                        message: "the worker thread died while loading".into(),
                    }
                    .into());
                }
            }
        }
        Ok(Self {
            models: slots,
            workers,
            backend,
            streams,
            limits,
        })
    }

    /// The stream manager the engine feeds.
    pub fn streams(&self) -> &Arc<StreamManager> {
        &self.streams
    }

    /// Every model with its state.
    pub fn models(&self) -> Vec<ModelInfo> {
        self.models
            .iter()
            .enumerate()
            .map(|(i, slot)| ModelInfo {
                name: slot.name.clone(),
                backend: self.backend.kind(),
                loaded: slot.loaded.load(Ordering::Acquire),
                default: i == 0,
                overrides: self.backend.overrides(),
                path: slot.path.clone(),
            })
            .collect()
    }

    fn unknown_model(&self, name: &str) -> ValidationError {
        ValidationError::UnknownModel {
            name: name.to_owned(),
            available: self.models.iter().map(|slot| slot.name.clone()).collect(),
        }
    }

    fn slot(&self, name: Option<&str>) -> Result<&Arc<ModelSlot>, ValidationError> {
        match name {
            None => self.models.first().ok_or_else(|| self.unknown_model("")),
            Some(name) => self
                .models
                .iter()
                .find(|slot| slot.name == name)
                .ok_or_else(|| self.unknown_model(name)),
        }
    }

    /// Validates `request`, creates its stream and queues it. `polled`
    /// streams keep chunks for HTTP polling (see [`StreamManager::create`]).
    ///
    /// # Errors
    /// Invalid request, unknown or unloaded model, full queue, too many
    /// streams, shutdown.
    pub fn submit(&self, request: RunRequest, polled: bool) -> Result<Arc<Stream>, EngineError> {
        let slot = self.slot(request.model.as_deref())?;
        let mut request = request;
        let mut stop = Vec::new();
        if slot.template.is_server_side() {
            // The server renders the chat; the runtime's template is off.
            if let Some(conversation) = request.conversation.take() {
                request.prompt = slot.template.render(&conversation);
                request.role = Role::User;
            }
            stop = slot.template.stop_strings();
        }
        let request = request.validate(slot.name.clone(), &self.limits.request)?;
        self.backend
            .check(&request)
            .map_err(|message| ValidationError::Invalid {
                field: "prompt",
                message,
            })?;
        if !slot.loaded.load(Ordering::Acquire) {
            return Err(EngineError::NotLoaded(slot.name.clone()));
        }
        let mut queue = slot.queue.lock();
        queue.jobs.retain(|job| !job.stream.is_ended());
        if queue.jobs.len() >= self.limits.queue_len {
            let waiting = queue.jobs.len() as u64 + 1;
            return Err(EngineError::QueueFull {
                model: slot.name.clone(),
                queue_len: self.limits.queue_len,
                retry_after_ms: (slot.avg_job_ms.load(Ordering::Relaxed) * waiting).max(100),
            });
        }
        let stream = self.streams.create(&slot.name, polled)?;
        queue.jobs.push_back(Job {
            stream: Arc::clone(&stream),
            request,
            enqueued: Instant::now(),
            stop,
        });
        drop(queue);
        slot.wake.notify_one();
        Ok(stream)
    }

    /// `Ok` when every model is loaded and has room in its queue; else why not.
    ///
    /// # Errors
    /// The first model that is not ready, with the reason.
    pub fn readiness(&self) -> Result<(), String> {
        for slot in &self.models {
            if !slot.loaded.load(Ordering::Acquire) {
                return Err(format!("model `{}` is not loaded", slot.name));
            }
            let waiting = slot.waiting();
            if waiting >= self.limits.queue_len {
                return Err(format!(
                    "the queue of model `{}` is full ({waiting} waiting)",
                    slot.name
                ));
            }
        }
        Ok(())
    }

    /// Requests waiting per model (for metrics).
    pub fn queued(&self) -> usize {
        self.models.iter().map(|slot| slot.waiting()).sum()
    }

    /// 1-based position of a queued stream in its model's queue (1 = next).
    pub fn queue_position(&self, stream: &Stream) -> Option<usize> {
        let slot = self.slot(Some(stream.model())).ok()?;
        let queue = slot.queue.lock();
        queue
            .jobs
            .iter()
            .filter(|job| !job.stream.is_ended())
            .position(|job| std::ptr::eq(Arc::as_ptr(&job.stream), stream))
            .map(|i| i + 1)
    }

    /// Waits up to `timeout` for every worker to stop and release its
    /// model. Returns whether they all did. Blocks: call it off the async
    /// runtime.
    pub fn wait_stopped(&self, timeout: std::time::Duration) -> bool {
        let deadline = Instant::now() + timeout;
        let mut running = self.workers.running.lock();
        while *running > 0 {
            if self
                .workers
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
    /// manager's shutdown has already aborted).
    pub fn shutdown(&self) {
        for slot in &self.models {
            slot.queue.lock().shutdown = true;
            slot.wake.notify_all();
        }
    }
}

/// Starts one worker thread of `slot`: it loads the model, reports the
/// outcome on the returned channel, then runs jobs until shutdown.
fn spawn_worker(
    thread_name: String,
    slot: &Arc<ModelSlot>,
    backend: &Arc<dyn Backend>,
    spec: &ModelSpec,
    workers: &Arc<Workers>,
) -> Result<std::sync::mpsc::Receiver<Result<(), BackendError>>, BackendError> {
    let (ready_tx, ready_rx) = std::sync::mpsc::sync_channel(1);
    let worker_slot = Arc::clone(slot);
    let worker_backend = Arc::clone(backend);
    let spec = spec.clone();
    let worker_count = Arc::clone(workers);
    *workers.running.lock() += 1;
    let spawned = std::thread::Builder::new()
        .name(thread_name)
        .spawn(move || {
            match worker_backend.load(&spec) {
                Ok(runner) => {
                    worker_slot.loaded.store(true, Ordering::Release);
                    let _ = ready_tx.send(Ok(()));
                    // The runner (and its model) is dropped when the loop ends.
                    worker_loop(&worker_slot, runner);
                    worker_slot.loaded.store(false, Ordering::Release);
                }
                Err(err) => {
                    let _ = ready_tx.send(Err(err));
                }
            }
            *worker_count.running.lock() -= 1;
            worker_count.stopped.notify_all();
        });
    match spawned {
        Ok(_) => Ok(ready_rx),
        Err(e) => {
            *workers.running.lock() -= 1;
            Err(BackendError::Load {
                model: slot.name.clone(),
                message: format!("cannot start its worker thread: {e}"),
            })
        }
    }
}

fn worker_loop(slot: &ModelSlot, mut runner: Box<dyn Runner>) {
    loop {
        let job = {
            let mut queue = slot.queue.lock();
            loop {
                if queue.shutdown {
                    return;
                }
                match queue.jobs.pop_front() {
                    Some(job) if job.stream.is_ended() => continue,
                    Some(job) => break job,
                    None => slot.wake.wait(&mut queue),
                }
            }
        };
        let started = Instant::now();
        run_job(runner.as_mut(), &job);
        let took = started.elapsed().as_millis().min(u128::from(u32::MAX)) as u64;
        let avg = slot.avg_job_ms.load(Ordering::Relaxed);
        slot.avg_job_ms
            .store((avg * 3 + took) / 4, Ordering::Relaxed);
    }
}

/// Counts a generation that ran and writes its log line.
fn record_generation(
    stream: &Stream,
    finish_reason: FinishReason,
    usage: Usage,
    timings: &Timings,
    memory_mb: Option<f64>,
) {
    crate::metrics::generation(
        timings.queue_ms,
        timings.prefill_ms,
        usage.completion_tokens,
        timings.tokens_per_second,
        memory_mb,
    );
    tracing::info!(
        model = stream.model(),
        finish_reason = finish_reason.as_str(),
        prompt_tokens = usage.prompt_tokens,
        completion_tokens = usage.completion_tokens,
        queue_ms = timings.queue_ms,
        prefill_ms = timings.prefill_ms,
        generate_ms = timings.generate_ms,
        "generation"
    );
}

fn run_job(runner: &mut dyn Runner, job: &Job) {
    let stream = &job.stream;
    stream.set_initializing();
    let queue_ms = (Instant::now() - job.enqueued).as_secs_f64() * 1000.0;
    let mut sink = TokenSink::new(stream.as_ref(), job.request.conversation.is_some())
        .with_stop(job.stop.clone());
    let result = catch_unwind(AssertUnwindSafe(|| {
        runner.generate(&job.request, &mut sink)
    }));
    // A generation that ended normally but mid-character shows the loss as
    // U+FFFD; after a failure or an abort the incomplete tail is dropped.
    if matches!(result, Ok(Ok(_))) && !stream.cancel_token().is_cancelled() {
        sink.flush();
    }
    let (measured_prefill, measured_generate) = sink.measured();
    let cancelled = stream.cancel_token().is_cancelled();
    let hit_stop = sink.hit_stop();
    match result {
        Ok(Ok(generation)) => {
            let (prefill_ms, generate_ms) = generation
                .runtime_timings
                .unwrap_or((measured_prefill, measured_generate));
            let outcome = |counted: Usage| {
                let usage = generation.usage.unwrap_or(counted);
                let finish_reason = if cancelled {
                    FinishReason::Abort
                } else if hit_stop {
                    FinishReason::Stop
                } else {
                    generation.finish_reason
                };
                let timings = Timings {
                    queue_ms,
                    prefill_ms,
                    generate_ms,
                    tokens_per_second: 0.0,
                }
                .with_rate(usage.completion_tokens);
                (finish_reason, usage, timings)
            };
            let mut ended_here = None;
            stream.end_with(|counted| {
                let (finish_reason, usage, timings) = outcome(counted);
                ended_here = Some((finish_reason, usage, timings));
                EndInfo {
                    timings: Some(timings),
                    ..EndInfo::new(finish_reason, usage)
                }
            });
            // A stream aborted (or expired) while it ran ended before the
            // runner returned: the generation is recorded all the same.
            let (finish_reason, usage, timings) = ended_here.unwrap_or_else(|| {
                let end = stream.end_info();
                let (_, usage, timings) =
                    outcome(end.as_ref().map(|e| e.usage).unwrap_or_default());
                let finish_reason = end.map_or(FinishReason::Abort, |e| e.finish_reason);
                (finish_reason, usage, timings)
            });
            record_generation(stream, finish_reason, usage, &timings, generation.memory_mb);
        }
        Ok(Err(err)) => {
            tracing::warn!(model = stream.model(), error = %err, "generation failed");
            stream.end_with(|usage| EndInfo::error(EndErrorKind::Runtime, err.to_string(), usage));
        }
        Err(_) => {
            tracing::error!(
                model = stream.model(),
                "the backend panicked during a generation"
            );
            stream.end_with(|usage| {
                EndInfo::error(
                    EndErrorKind::Internal,
                    "generation failed: internal backend error",
                    usage,
                )
            });
        }
    }
    debug_assert!(stream.is_ended());
}
