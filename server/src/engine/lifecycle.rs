//! When models are loaded and unloaded, and what happens when a runner dies.
//!
//! Each model has one worker thread per lane. A lane loads the model's
//! runner when it takes a job (or an explicit `load`) and the model is not
//! loaded, runs jobs in order, and unloads when the model has been idle
//! for its keep-alive, when the [`Gate`] evicts it to make room for
//! another model (least recently used idle model first), on `unload`, or
//! at shutdown. A runner lost mid-generation ends that stream with an
//! error; the next job reloads the model after a back-off, and a model
//! that fails `max_crashes` times within `crash_window` is marked failed
//! until an explicit `load`.
//!
//! Lock order: the gate's lock before a model's; a model's lock is never
//! held while taking the gate's.

use std::collections::VecDeque;
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use parking_lot::{Condvar, Mutex};

use super::idle::Idle;
use super::job::{Job, run_job};
use super::keep_alive::KeepAlive;
use super::priority::{Ageing, Queue};
use super::profile::ModelProfile;
use crate::backend::{Backend, BackendError, Runner};
use crate::model::ModelSpec;
use crate::vocab::{EndErrorKind, EndInfo};

/// Lifecycle settings (config `[engine]`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Lifecycle {
    /// Models loaded at once.
    pub max_loaded_models: usize,
    /// Default keep-alive of an idle model.
    pub keep_alive: KeepAlive,
    /// How long a request waits for its model to load.
    pub load_timeout: Duration,
    /// Crashes within `crash_window` that mark a model failed.
    pub max_crashes: u32,
    /// The window for `max_crashes`.
    pub crash_window: Duration,
    /// The lowest NPU memory domain models are given (`rkllm.base_domain_id`).
    pub first_domain: i32,
}

/// A model's state, as `models` and `/api/ps` report it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum ModelState {
    /// Configured, not loaded; the next request loads it.
    Available,
    /// Being loaded.
    Loading,
    /// Loaded and ready.
    Loaded,
    /// Crashed too often; refused until an explicit `load`.
    Failed,
}

impl ModelState {
    /// The name in `models` and metrics.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Available => "available",
            Self::Loading => "loading",
            Self::Loaded => "loaded",
            Self::Failed => "failed",
        }
    }
}

/// Whether a model holds (or is getting) one of the gate's places.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Place {
    None,
    Acquiring,
    Held,
}

/// What a model's lock guards.
#[derive(Debug)]
pub(super) struct Life {
    /// The jobs waiting, in the order they will run.
    pub jobs: Queue<Job>,
    /// Places held for requests being prepared (`Reservation`), counted
    /// against the queue's bound.
    pub reserved: usize,
    pub shutdown: bool,
    pub state: ModelState,
    place: Place,
    /// Lanes holding a runner.
    lanes_loaded: usize,
    /// Lanes running a job.
    busy: usize,
    /// Jobs taken from the queue and not yet ended (loading their model
    /// included).
    starting: usize,
    /// Unload as soon as the lanes are idle (eviction, `unload`), and why.
    unload_now: bool,
    unload_reason: &'static str,
    /// Explicit loads asked for, and load attempts made (a lane loads while
    /// `load_wanted > load_attempts`).
    load_wanted: u64,
    load_attempts: u64,
    /// Why the last load or run failed, or why the model failed.
    pub last_error: Option<String>,
    /// When an idle loaded model unloads (`None`: never).
    expires: Option<Instant>,
    /// The keep-alive an explicit load asked for, applied once loaded.
    keep_alive_next: Option<KeepAlive>,
    /// An explicit load asks every lane to load its runner, not only the
    /// first one a job reaches.
    fill_lanes: bool,
    last_used: Instant,
    crashes: VecDeque<Instant>,
    backoff_until: Option<Instant>,
    pids: Vec<u32>,
}

impl Life {
    fn new(ageing: Ageing) -> Self {
        Self {
            jobs: Queue::new(ageing),
            reserved: 0,
            shutdown: false,
            state: ModelState::Available,
            place: Place::None,
            lanes_loaded: 0,
            busy: 0,
            starting: 0,
            unload_now: false,
            unload_reason: "idle",
            load_wanted: 0,
            load_attempts: 0,
            last_error: None,
            expires: None,
            keep_alive_next: None,
            fill_lanes: false,
            last_used: Instant::now(),
            crashes: VecDeque::new(),
            backoff_until: None,
            pids: Vec::new(),
        }
    }

    /// Lanes running a job now.
    pub fn running(&self) -> usize {
        self.busy
    }

    /// Jobs still waiting (a job whose stream has ended is skipped).
    pub fn waiting(&self) -> usize {
        self.jobs.iter().filter(|j| !j.stream.is_ended()).count()
    }

    fn idle(&self) -> bool {
        self.state == ModelState::Loaded && self.busy == 0 && self.waiting() == 0
    }
}

/// One configured model: its spec, queue and lifecycle.
pub(super) struct ModelSlot {
    pub spec: ModelSpec,
    pub life: Mutex<Life>,
    /// Lanes park here for jobs and orders.
    pub wake: Condvar,
    /// Bumped on every state change, for async waiters.
    pub changed: tokio::sync::watch::Sender<u64>,
    /// Moving average of recent job durations, for `retry_after_ms`.
    pub avg_job_ms: AtomicU64,
    /// The runtime's KV cache length after the last job (`u64::MAX`:
    /// unknown, or not loaded).
    pub kv_cache_tokens: AtomicU64,
    /// Its conversation snapshots: hits and misses since the start, files
    /// and bytes after the last job (`None`: it keeps none).
    pub snapshots: Mutex<Option<crate::backend::SnapshotReport>>,
    /// What the probes found of its runtime at its last load (kept while
    /// it is unloaded; `None`: never loaded, or nothing to probe).
    pub verdicts: Mutex<Option<crate::plan::probe::Verdicts>>,
    /// Its profile as the service reads it, once resolved (`None`: to be
    /// resolved again, its verdicts having changed).
    pub profile: Mutex<Option<Arc<ModelProfile>>>,
    /// Stops its lane's idle work (see [`super::idle`]).
    pub idle_stop: super::idle::IdleStop,
    /// How long each recent conversation's previous prompt was, for the
    /// prompt-cache metrics (see [`super::reuse`]).
    pub conversations: Mutex<super::reuse::Conversations>,
}

impl std::fmt::Debug for ModelSlot {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ModelSlot")
            .field("name", &self.spec.name)
            .finish_non_exhaustive()
    }
}

impl ModelSlot {
    pub fn new(spec: ModelSpec, ageing: Ageing) -> Self {
        Self {
            spec,
            life: Mutex::new(Life::new(ageing)),
            wake: Condvar::new(),
            changed: tokio::sync::watch::Sender::new(0),
            avg_job_ms: AtomicU64::new(1000),
            kv_cache_tokens: AtomicU64::new(u64::MAX),
            snapshots: Mutex::new(None),
            verdicts: Mutex::new(None),
            profile: Mutex::new(None),
            idle_stop: super::idle::IdleStop::default(),
            conversations: Mutex::default(),
        }
    }

    pub fn name(&self) -> &str {
        &self.spec.name
    }

    fn publish(&self) {
        self.changed.send_modify(|n| *n = n.wrapping_add(1));
        self.wake.notify_all();
    }
}

/// The places for loaded models (`max_loaded_models`).
#[derive(Debug)]
pub(super) struct Gate {
    held: Mutex<Vec<Arc<ModelSlot>>>,
    freed: Condvar,
    max: usize,
}

impl Gate {
    fn new(max: usize) -> Self {
        Self {
            held: Mutex::new(Vec::new()),
            freed: Condvar::new(),
            max: max.max(1),
        }
    }

    /// Takes a place for `me`, asking the least recently used idle model
    /// to unload when all are taken, until `deadline`.
    fn acquire(&self, me: &Arc<ModelSlot>, deadline: Instant) -> Result<(), String> {
        let mut held = self.held.lock();
        loop {
            if me.life.lock().shutdown {
                return Err("the server is shutting down".into());
            }
            let mine = held.iter().any(|h| Arc::ptr_eq(h, me));
            if mine || held.len() < self.max {
                if !mine {
                    held.push(Arc::clone(me));
                }
                return Ok(());
            }
            // A model already on its way out (asked to unload and not
            // busy, or its place given back but not yet released here)
            // makes the room: wait for it rather than ask another to go too.
            let leaving = held.iter().filter(|h| !Arc::ptr_eq(h, me)).any(|h| {
                let life = h.life.lock();
                (life.unload_now && life.busy == 0) || life.place == Place::None
            });
            let victim = held
                .iter()
                .filter(|h| !leaving && !Arc::ptr_eq(h, me))
                .filter_map(|h| {
                    let life = h.life.lock();
                    life.idle().then(|| (life.last_used, Arc::clone(h)))
                })
                .min_by_key(|(used, _)| *used);
            if let Some((_, v)) = victim {
                let mut life = v.life.lock();
                if !life.unload_now {
                    tracing::info!(
                        model = v.name(),
                        to_load = me.name(),
                        "unloading the least recently used idle model to make room"
                    );
                    life.unload_now = true;
                    life.unload_reason = "evicted";
                }
                drop(life);
                v.idle_stop.interrupt();
                v.wake.notify_all();
            }
            let now = Instant::now();
            if now >= deadline {
                return Err(format!(
                    "no room to load it within engine.load_timeout_secs: engine.max_loaded_models \
                     is {} and the loaded models stayed busy",
                    self.max
                ));
            }
            // Busy models free their place without a signal when they
            // finish; look again soon.
            let _ = self
                .freed
                .wait_for(&mut held, (deadline - now).min(Duration::from_millis(50)));
        }
    }

    fn release(&self, me: &ModelSlot) {
        self.held
            .lock()
            .retain(|h| !std::ptr::eq(Arc::as_ptr(h), me));
        self.freed.notify_all();
    }
}

/// Counts running lane threads, so shutdown can wait for them and the
/// watchdog can tell one died.
#[derive(Debug, Default)]
pub(super) struct Threads {
    pub running: Mutex<usize>,
    pub stopped: Condvar,
}

/// Everything the lanes share.
#[derive(Debug)]
pub(super) struct Shared {
    /// The models, in order (the first is the default); the store adds
    /// and removes models while the server runs.
    pub slots: parking_lot::RwLock<Vec<Arc<ModelSlot>>>,
    pub backend: Arc<dyn Backend>,
    pub lifecycle: Lifecycle,
    gate: Gate,
    /// The NPU memory domains the loaded models hold.
    domains: super::domains::Domains,
    pub threads: Threads,
}

impl Shared {
    pub fn new(
        backend: Arc<dyn Backend>,
        models: &[ModelSpec],
        lifecycle: Lifecycle,
        ageing: Ageing,
    ) -> Self {
        Self {
            slots: parking_lot::RwLock::new(
                models
                    .iter()
                    .map(|spec| Arc::new(ModelSlot::new(spec.clone(), ageing)))
                    .collect(),
            ),
            backend,
            lifecycle,
            gate: Gate::new(lifecycle.max_loaded_models),
            domains: super::domains::Domains::new(lifecycle.first_domain),
            threads: Threads::default(),
        }
    }

    /// Asks for `slot` to be loaded (an explicit `load` or a preload):
    /// clears a failed state, and returns the attempt to wait for, or
    /// `None` when it is loaded already (its keep-alive then renewed).
    pub fn want_loaded(&self, slot: &ModelSlot, keep_alive: Option<KeepAlive>) -> Option<u64> {
        let mut life = slot.life.lock();
        life.fill_lanes = true;
        slot.wake.notify_all();
        if life.state == ModelState::Failed {
            tracing::info!(
                model = slot.name(),
                "failed model reset by an explicit load"
            );
            life.state = ModelState::Available;
            life.crashes.clear();
            life.backoff_until = None;
            life.last_error = None;
        }
        if life.state == ModelState::Loaded && !life.unload_now {
            let now = Instant::now();
            life.last_used = now;
            if let Some(keep_alive) = keep_alive {
                life.expires = keep_alive.expiry(now);
            }
            return None;
        }
        life.keep_alive_next = keep_alive;
        life.load_wanted = life.load_attempts + 1;
        let target = life.load_wanted;
        drop(life);
        slot.publish();
        Some(target)
    }

    /// Whether the load attempt `target` is over: `Ok(true)` loaded,
    /// `Ok(false)` not yet, `Err` why it failed.
    pub fn load_outcome(&self, slot: &ModelSlot, target: u64) -> Result<bool, String> {
        let life = slot.life.lock();
        if life.state == ModelState::Loaded {
            return Ok(true);
        }
        if life.state == ModelState::Failed || life.load_attempts >= target || life.shutdown {
            return Err(life
                .last_error
                .clone()
                .unwrap_or_else(|| "the model was not loaded".into()));
        }
        Ok(false)
    }

    /// Asks `slot` to unload once its lanes are idle; returns whether it
    /// was loaded (or loading).
    pub fn want_unloaded(&self, slot: &ModelSlot) -> bool {
        let mut life = slot.life.lock();
        let loaded = life.lanes_loaded > 0 || life.state == ModelState::Loading;
        if loaded {
            life.unload_now = true;
            life.unload_reason = "requested";
            life.load_wanted = life.load_attempts;
        }
        drop(life);
        slot.idle_stop.interrupt();
        slot.publish();
        loaded
    }

    /// The models now.
    pub fn snapshot(&self) -> Vec<Arc<ModelSlot>> {
        self.slots.read().clone()
    }

    /// Whether `me` may do idle work now: no model has a job taken,
    /// running or waiting, no other model does idle work, and `me` is not
    /// on its way out.
    pub fn npu_idle(&self, me: &ModelSlot) -> bool {
        self.snapshot().iter().all(|slot| {
            let mine = std::ptr::eq(Arc::as_ptr(slot), me);
            if !mine && slot.idle_stop.running() {
                return false;
            }
            let life = slot.life.lock();
            life.busy == 0
                && life.starting == 0
                && life.waiting() == 0
                && !(mine && (life.unload_now || life.shutdown))
        })
    }

    /// A job was queued: every lane's idle work stops.
    pub fn interrupt_idle_work(&self) {
        for slot in self.snapshot() {
            slot.idle_stop.interrupt();
        }
    }

    /// How many of `slot`'s lanes hold a runner.
    pub fn lanes_loaded(&self, slot: &ModelSlot) -> usize {
        slot.life.lock().lanes_loaded
    }

    /// Whether `slot` holds no runner.
    pub fn unloaded(&self, slot: &ModelSlot) -> bool {
        let life = slot.life.lock();
        life.lanes_loaded == 0 && life.state != ModelState::Loading
    }

    /// The runner processes of `slot` and when it unloads, for reports.
    pub fn runtime_view(&self, slot: &ModelSlot) -> (Vec<u32>, Option<Duration>) {
        let life = slot.life.lock();
        let expires = if life.state == ModelState::Loaded {
            life.expires
                .map(|t| t.saturating_duration_since(Instant::now()))
        } else {
            None
        };
        (life.pids.clone(), expires)
    }
}

/// What a lane does next.
enum Step {
    Run(Box<Job>),
    Load,
    Unload,
    Check,
    Fail(Vec<Job>, String),
    /// The runner's idle work, nothing waiting.
    Idle,
    Exit,
}

/// A lane's thread: loads, runs and unloads until shutdown.
pub(super) fn lane(shared: &Shared, slot: &Arc<ModelSlot>, lane: usize) {
    let mut runner: Option<Box<dyn Runner>> = None;
    // When the runner's idle work may run (`None`: it has none).
    let mut idle_at: Option<Instant> = None;
    loop {
        match next_step(slot, lane, runner.is_some(), idle_at) {
            Step::Exit => break,
            Step::Unload => {
                idle_at = None;
                unload(shared, slot, &mut runner, None);
            }
            Step::Check => {
                if let Some(r) = runner.as_mut()
                    && let Err(err) = r.alive()
                {
                    lost(shared, slot, &mut runner, &err);
                }
            }
            Step::Load => {
                let _ = ensure_loaded(shared, slot, &mut runner);
            }
            Step::Fail(jobs, reason) => {
                for job in jobs {
                    job.stream.end_with(|usage| {
                        EndInfo::error(EndErrorKind::Runtime, reason.clone(), usage)
                    });
                }
            }
            Step::Run(job) => {
                let more = run(shared, slot, &mut runner, *job);
                slot.life.lock().starting -= 1;
                idle_at = (more && runner.is_some()).then(|| Instant::now() + super::idle::GRACE);
            }
            Step::Idle => {
                idle_at = None;
                let Some(r) = runner.as_mut() else { continue };
                let idle = super::idle::Lane {
                    model: slot.name(),
                    stop: &slot.idle_stop,
                    snapshots: &slot.snapshots,
                };
                match super::idle::idle_work(&idle, || shared.npu_idle(slot), r.as_mut()) {
                    Idle::Ran(more) => idle_at = more.then(Instant::now),
                    Idle::Deferred => idle_at = Some(Instant::now() + super::idle::RETRY),
                    Idle::Lost(err) => lost(shared, slot, &mut runner, &err),
                }
            }
        }
    }
    if runner.is_some() {
        unload(shared, slot, &mut runner, None);
    }
}

fn next_step(slot: &ModelSlot, lane: usize, has_runner: bool, idle_at: Option<Instant>) -> Step {
    let mut life = slot.life.lock();
    loop {
        if life.shutdown {
            return Step::Exit;
        }
        let now = Instant::now();
        if has_runner
            && (life.unload_now || (life.waiting() == 0 && life.expires.is_some_and(|t| t <= now)))
        {
            return Step::Unload;
        }
        if life.state == ModelState::Failed && !life.jobs.is_empty() {
            let reason = failed_message(slot.name(), &life);
            return Step::Fail(life.jobs.drain(), reason);
        }
        if let Some(until) = life.backoff_until {
            if until > now {
                let _ = slot.wake.wait_until(&mut life, until);
                continue;
            }
            life.backoff_until = None;
        }
        if let Some(job) = life.jobs.take(now, |job| !job.stream.is_ended()) {
            // Counted until the job ends: idle work does not start while
            // it waits for its model to load.
            life.starting += 1;
            return Step::Run(Box::new(job));
        }
        if !has_runner
            && ((lane == 0 && life.load_wanted > life.load_attempts)
                || (life.fill_lanes && life.state == ModelState::Loaded && !life.unload_now))
        {
            return Step::Load;
        }
        if has_runner && !life.unload_now && idle_at.is_some_and(|at| at <= now) {
            return Step::Idle;
        }
        if has_runner {
            // Wake for the keep-alive, the idle work, and every second to
            // see that the runner is still there.
            let mut until = now + Duration::from_secs(1);
            if let Some(expires) = life.expires {
                until = until.min(expires);
            }
            if let Some(at) = idle_at {
                until = until.min(at);
            }
            if slot.wake.wait_until(&mut life, until).timed_out() {
                return Step::Check;
            }
        } else {
            slot.wake.wait(&mut life);
        }
    }
}

fn failed_message(name: &str, life: &Life) -> String {
    format!(
        "model `{name}` failed: {}; an explicit `load` retries it",
        life.last_error
            .as_deref()
            .unwrap_or("it crashed repeatedly")
    )
}

/// Runs `job`; returns whether the runner then has idle work.
fn run(
    shared: &Shared,
    slot: &Arc<ModelSlot>,
    runner: &mut Option<Box<dyn Runner>>,
    job: Job,
) -> bool {
    if let Some(r) = runner.as_mut()
        && let Err(err) = r.alive()
    {
        lost(shared, slot, runner, &err);
        let life = slot.life.lock();
        if life.state == ModelState::Failed {
            let message = failed_message(slot.name(), &life);
            drop(life);
            job.stream
                .end_with(|usage| EndInfo::error(EndErrorKind::Runtime, message, usage));
            return false;
        }
    }
    if runner.is_none()
        && let Err(message) = ensure_loaded(shared, slot, runner)
    {
        job.stream
            .end_with(|usage| EndInfo::error(EndErrorKind::Runtime, message, usage));
        return false;
    }
    let Some(r) = runner.as_mut() else {
        return false;
    };
    {
        // The request's keep_alive holds from its start too: its client may
        // read `ps` as soon as its answer ends, before the count below.
        let mut life = slot.life.lock();
        life.busy += 1;
        life.expires = job
            .keep_alive
            .unwrap_or(shared.lifecycle.keep_alive)
            .expiry(Instant::now());
    }
    let started = Instant::now();
    let reports = super::job::Reports {
        kv_cache_tokens: &slot.kv_cache_tokens,
        snapshots: &slot.snapshots,
        verdicts: &slot.verdicts,
        profile: &slot.profile,
        conversations: &slot.conversations,
    };
    let ran = run_job(r.as_mut(), &job, reports);
    let took = started.elapsed().as_millis().min(u128::from(u32::MAX)) as u64;
    let avg = slot.avg_job_ms.load(Ordering::Relaxed);
    slot.avg_job_ms
        .store((avg * 3 + took) / 4, Ordering::Relaxed);
    {
        let mut life = slot.life.lock();
        life.busy -= 1;
        let now = Instant::now();
        life.last_used = now;
        life.expires = job
            .keep_alive
            .unwrap_or(shared.lifecycle.keep_alive)
            .expiry(now);
    }
    slot.publish();
    if let Some(err) = ran.lost {
        lost(shared, slot, runner, &err);
        return false;
    }
    ran.idle_work
}

/// Makes sure this lane has a runner: takes a place at the gate for the
/// model if it has none, then loads.
fn ensure_loaded(
    shared: &Shared,
    slot: &Arc<ModelSlot>,
    runner: &mut Option<Box<dyn Runner>>,
) -> Result<(), String> {
    let deadline = Instant::now() + shared.lifecycle.load_timeout;
    let must_acquire = {
        let mut life = slot.life.lock();
        loop {
            if life.shutdown {
                return Err("the server is shutting down".into());
            }
            match life.place {
                Place::Held => break false,
                Place::None => {
                    life.place = Place::Acquiring;
                    if life.state != ModelState::Failed {
                        life.state = ModelState::Loading;
                    }
                    break true;
                }
                Place::Acquiring => {
                    let _ = slot.wake.wait_for(&mut life, Duration::from_millis(50));
                }
            }
        }
    };
    if must_acquire {
        slot.publish();
        let acquired = shared.gate.acquire(slot, deadline);
        let mut life = slot.life.lock();
        match acquired {
            Ok(()) => life.place = Place::Held,
            Err(message) => {
                life.place = Place::None;
                if life.state == ModelState::Loading {
                    life.state = ModelState::Available;
                }
                life.load_attempts += 1;
                life.load_wanted = life.load_attempts;
                let message = format!("model `{}` could not be loaded: {message}", slot.name());
                life.last_error = Some(message.clone());
                drop(life);
                slot.publish();
                return Err(message);
            }
        }
        drop(life);
        slot.publish();
    }
    let started = Instant::now();
    let spec = shared.domains.assign(&slot.spec);
    tracing::info!(
        model = slot.name(),
        npu_domain = spec.settings.base_domain_id,
        "loading"
    );
    let loaded =
        catch_unwind(AssertUnwindSafe(|| shared.backend.load(&spec))).unwrap_or_else(|_| {
            Err(BackendError::Load {
                model: slot.name().to_owned(),
                message: "internal error while loading".into(),
            })
        });
    let mut life = slot.life.lock();
    life.load_attempts += 1;
    life.load_wanted = life.load_attempts;
    match loaded {
        Ok(r) => {
            let now = Instant::now();
            life.lanes_loaded += 1;
            life.state = ModelState::Loaded;
            life.last_error = None;
            // Unknown until its first request reports it.
            slot.kv_cache_tokens.store(u64::MAX, Ordering::Relaxed);
            if let Some(pid) = r.process_id() {
                life.pids.push(pid);
            }
            if let Some(verdicts) = r.verdicts() {
                *slot.verdicts.lock() = Some(verdicts);
                forget_profile(slot);
            }
            life.last_used = now;
            let keep_alive = life
                .keep_alive_next
                .take()
                .unwrap_or(shared.lifecycle.keep_alive);
            life.expires = keep_alive.expiry(now);
            drop(life);
            crate::metrics::model_loaded(slot.name());
            tracing::info!(
                model = slot.name(),
                load_ms = started.elapsed().as_millis() as u64,
                pid = r.process_id(),
                "model loaded"
            );
            *runner = Some(r);
            slot.publish();
            Ok(())
        }
        Err(err) => {
            let message = err.to_string();
            tracing::error!(model = slot.name(), error = %message, "load failed");
            life.last_error = Some(message.clone());
            let release = give_back_place(&mut life);
            count_failure(shared, slot, &mut life);
            drop(life);
            if release {
                shared.gate.release(slot);
                shared.domains.give_back(slot.name());
            }
            slot.publish();
            Err(message)
        }
    }
}

/// After a lane dropped its runner (or failed to load one): when no lane
/// holds one, the model gives its place back. Returns whether it did.
fn give_back_place(life: &mut Life) -> bool {
    if life.lanes_loaded > 0 || life.place != Place::Held {
        return false;
    }
    life.place = Place::None;
    life.unload_now = false;
    life.fill_lanes = false;
    life.expires = None;
    if life.state != ModelState::Failed {
        life.state = ModelState::Available;
    }
    true
}

/// Drops this lane's runner; the last lane to do so gives the model's
/// place back. `reason` overrides the one the model's state gives.
fn unload(
    shared: &Shared,
    slot: &ModelSlot,
    runner: &mut Option<Box<dyn Runner>>,
    reason: Option<&'static str>,
) {
    let Some(r) = runner.take() else { return };
    let pid = r.process_id();
    // Dropping the runner unloads the model (for a runner process: it
    // exits, or is made to).
    drop(r);
    let mut life = slot.life.lock();
    life.lanes_loaded = life.lanes_loaded.saturating_sub(1);
    if let Some(pid) = pid {
        life.pids.retain(|&p| p != pid);
    }
    let reason = reason.unwrap_or(if life.shutdown {
        "shutdown"
    } else if life.unload_now {
        life.unload_reason
    } else {
        "idle"
    });
    let release = give_back_place(&mut life);
    drop(life);
    if release {
        tracing::info!(model = slot.name(), reason, "model unloaded");
        crate::metrics::model_unloaded(slot.name(), reason);
        shared.gate.release(slot);
        shared.domains.give_back(slot.name());
    }
    slot.publish();
}

/// The lane's runner is gone (crash, kill, stall): unload what is left,
/// count the failure, and back off before the next load or mark the
/// model failed.
fn lost(
    shared: &Shared,
    slot: &ModelSlot,
    runner: &mut Option<Box<dyn Runner>>,
    err: &BackendError,
) {
    tracing::error!(model = slot.name(), cause = %err, "runner lost");
    crate::metrics::runner_crashed(slot.name());
    unload(shared, slot, runner, Some("crashed"));
    let mut life = slot.life.lock();
    life.last_error = Some(err.to_string());
    count_failure(shared, slot, &mut life);
    drop(life);
    slot.publish();
}

/// Records a crash or failed load; too many within the window mark the
/// model failed, fewer set a back-off before the next attempt.
fn count_failure(shared: &Shared, slot: &ModelSlot, life: &mut Life) {
    let now = Instant::now();
    let window = shared.lifecycle.crash_window;
    life.crashes.push_back(now);
    while life
        .crashes
        .front()
        .is_some_and(|&t| now.duration_since(t) > window)
    {
        life.crashes.pop_front();
    }
    let count = life.crashes.len();
    if count >= shared.lifecycle.max_crashes as usize {
        let last = life.last_error.clone().unwrap_or_default();
        life.last_error = Some(format!(
            "{count} failures within {} s (engine.max_crashes), the last: {last}",
            window.as_secs()
        ));
        life.state = ModelState::Failed;
        life.backoff_until = None;
        tracing::error!(
            model = slot.name(),
            failures = count,
            "model marked failed; it is refused until an explicit load"
        );
    } else {
        // 0.25 s, 0.5 s, 1 s, … up to 8 s.
        let backoff = Duration::from_millis(250 << (count.saturating_sub(1)).min(5));
        life.backoff_until = Some(now + backoff);
    }
}

/// Starts the lane threads of `slot`.
///
/// # Errors
/// When a thread cannot be started.
pub(super) fn start_lanes(shared: &Arc<Shared>, slot: &Arc<ModelSlot>) -> Result<(), BackendError> {
    let lanes = shared.backend.lanes().max(1);
    for lane_no in 0..lanes {
        let name = if lanes == 1 {
            format!("model-{}", slot.name())
        } else {
            format!("model-{}-{lane_no}", slot.name())
        };
        let (thread_shared, thread_slot) = (Arc::clone(shared), Arc::clone(slot));
        *shared.threads.running.lock() += 1;
        let spawned = std::thread::Builder::new().name(name).spawn(move || {
            struct Done<'a>(&'a Threads);
            impl Drop for Done<'_> {
                fn drop(&mut self) {
                    *self.0.running.lock() -= 1;
                    self.0.stopped.notify_all();
                }
            }
            let _done = Done(&thread_shared.threads);
            lane(&thread_shared, &thread_slot, lane_no);
        });
        if let Err(e) = spawned {
            *shared.threads.running.lock() -= 1;
            return Err(BackendError::Unavailable(format!(
                "cannot start a worker thread of model `{}`: {e}",
                slot.name()
            )));
        }
    }
    Ok(())
}

/// `slot`'s profile on `backend`.
fn resolve_profile(slot: &ModelSlot, backend: &dyn Backend) -> ModelProfile {
    let verdicts = slot.verdicts.lock();
    let features = verdicts.as_ref().map(|v| v.features.clone());
    // A runtime whose empty template does not turn its own off gets the
    // conversation as its own template takes it.
    let own_off = features.as_ref().is_some_and(|f| !f.server_template.on);
    ModelProfile {
        name: slot.name().to_owned(),
        template: if own_off {
            crate::model::ChatTemplate::Builtin
        } else {
            slot.spec.template.clone()
        },
        context_length: backend.context_length(&slot.spec),
        tokenizer: backend.tokenizer(&slot.spec),
        reranker: slot.spec.reranker,
        embedding: slot.spec.embedding.is_some(),
        unprobed: backend.probes() && verdicts.is_none(),
        features,
    }
}

/// `slot`'s profile, resolved when first asked and kept until its
/// verdicts change ([`forget_profile`]).
pub(super) fn profile_of(slot: &ModelSlot, backend: &dyn Backend) -> Arc<ModelProfile> {
    if let Some(kept) = slot.profile.lock().as_ref() {
        return Arc::clone(kept);
    }
    let resolved = Arc::new(resolve_profile(slot, backend));
    *slot.profile.lock() = Some(Arc::clone(&resolved));
    resolved
}

/// The model's verdicts changed: its profile is resolved again when next
/// asked.
pub(super) fn forget_profile(slot: &ModelSlot) {
    *slot.profile.lock() = None;
}
