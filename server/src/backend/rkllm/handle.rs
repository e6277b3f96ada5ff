//! The owner of one runtime handle, the abort handle other threads use,
//! and the slot through which the result callback reaches the running
//! request.
//!
//! Threading: the handle is created, run and destroyed on its model's
//! worker thread. Other threads only call `rkllm_abort`, through
//! [`AbortHandle`], whose lock orders every abort before the destroy.
//! Callbacks may arrive on any thread; they find the request's sink in the
//! [`CallbackSlot`], which holds it only while `rkllm_run` is running, so a
//! late callback finds nothing rather than a dangling pointer.

use std::ffi::CString;
use std::os::raw::c_void;
use std::ptr::NonNull;
use std::sync::Arc;

use parking_lot::Mutex;

use super::runtime::Runtime;
use super::runtime::shared_call;
use super::steer::{Logits, RowAnswer, Steering};
use crate::backend::TokenSink;
use crate::model::tokenizer::Vocabulary;

/// A runtime handle (`LLMHandle`).
#[derive(Debug, Clone, Copy)]
pub(super) struct RawHandle(pub NonNull<c_void>);

// SAFETY: an `LLMHandle` is an opaque pointer owned by the runtime. It is
// moved to other threads only inside `AbortHandle`, which uses it solely
// for `rkllm_abort`, documented as callable from any thread while a run
// is in progress, and never after `rkllm_destroy` (both take the same lock).
unsafe impl Send for RawHandle {}

/// Aborts the running request of a handle from any thread.
#[derive(Debug)]
pub(super) struct AbortHandle {
    runtime: Arc<Runtime>,
    // Synchronous lock: held for one `rkllm_abort` or to mark a run's
    // start and end; it orders aborts before `rkllm_destroy`.
    state: Mutex<AbortState>,
}

#[derive(Debug)]
struct AbortState {
    handle: Option<RawHandle>,
    /// Id of the run in progress (0: none).
    running: u64,
}

impl AbortHandle {
    fn new(runtime: Arc<Runtime>, handle: RawHandle) -> Self {
        Self {
            runtime,
            state: Mutex::new(AbortState {
                handle: Some(handle),
                running: 0,
            }),
        }
    }

    pub(super) fn set_running(&self, run: u64) {
        self.state.lock().running = run;
    }

    /// Asks the runtime to stop run `run`, if it is the one in progress.
    pub(super) fn abort(&self, run: u64) {
        let state = self.state.lock();
        let Some(handle) = state.handle else { return };
        if run == 0 || state.running != run {
            return;
        }
        // SAFETY: the handle is live (destroy clears it under this lock)
        // and `rkllm_abort` may be called from any thread.
        let rc = unsafe { shared_call!(self.runtime.api, rkllm_abort(handle.0.as_ptr())) };
        tracing::debug!(rc, "rkllm_abort");
    }

    fn take(&self) -> Option<RawHandle> {
        self.state.lock().handle.take()
    }
}

/// What the callback learns about the run in progress.
#[derive(Debug, Default, Clone, Copy, PartialEq)]
pub(super) struct Perf {
    pub prefill_time_ms: f32,
    pub prefill_tokens: i32,
    pub generate_time_ms: f32,
    pub generate_tokens: i32,
    pub memory_usage_mb: f32,
}

/// The request a callback reports to, while its run is in progress.
pub(super) struct ActiveRun {
    /// The request's sink, borrowed for the duration of `rkllm_run`.
    sink: NonNull<TokenSink<'static>>,
    pub run_id: u64,
    pub abort: Arc<AbortHandle>,
    /// Token cap enforced with `rkllm_abort` (runtimes without a per-run cap).
    pub cap: Option<u32>,
    pub tokens: u32,
    pub capped: bool,
    /// Whether the abort was requested again from the callback.
    reaborted: bool,
    pub finished: Option<Perf>,
    pub failed: bool,
    pub panicked: bool,
    /// A hidden-layer run: the rows are kept, no text is expected.
    pub hidden_mode: bool,
    /// The last hidden layer it returned (rows, width).
    pub hidden: Option<(Vec<f32>, usize)>,
    /// A logits run of a constrained answer: what answers each row,
    /// borrowed for the duration of `rkllm_run` like the sink.
    steering: Option<NonNull<Steering>>,
    /// The thinking budget, in tokens: once the thinking block has taken
    /// them, the run is paused for the runner to close the block.
    pub budget: Option<u32>,
    /// Whether the run was paused for that.
    pub budget_paused: bool,
    /// Whether the runtime went on after that pause (it was aborted).
    pub pause_ignored: bool,
    /// A logits run for log probabilities: the vocabulary, and how many
    /// of the likeliest tokens to report with each.
    pub logprobs: Option<(Arc<Vocabulary>, usize)>,
    /// A run that only prefills (a chunk of a long prompt): its first
    /// callback, the prefill's rows, pauses it, and nothing is reported.
    pub prefill_only: bool,
    /// Whether it paused there.
    pub prefill_paused: bool,
}

// SAFETY: `sink` points at a `TokenSink` and `steering` at a `Steering` on
// the worker thread's stack that outlive the run: they are installed before
// `rkllm_run` and removed (under the slot's lock) after it returns, and
// they are only dereferenced under that lock, so they are never used from
// two threads at once nor after they are gone. The worker thread does not
// touch them while `rkllm_run` runs. Both are `Send`.
unsafe impl Send for ActiveRun {}

/// What one callback reported, borrowed from the runtime's result for the
/// duration of the callback.
#[derive(Debug, Default)]
pub(super) struct Report<'a> {
    pub state: u32,
    pub text: Option<&'a [u8]>,
    /// The token's id (logits mode: the runtime's pick from the last row).
    pub token: i32,
    pub perf: Option<Perf>,
    pub hidden: Option<(&'a [f32], usize)>,
    pub logits: Option<Logits<'a>>,
}

/// Where the callback's `userdata` points: one per handle, alive until
/// after `rkllm_destroy`.
#[derive(Default)]
pub(super) struct CallbackSlot {
    // Synchronous lock: taken once per callback (one token) and by the
    // worker to install and remove a run; never across an await.
    run: Mutex<Option<ActiveRun>>,
}

impl CallbackSlot {
    /// Installs a run. The sink (and the steering of a logits run) must
    /// stay alive until [`Self::remove`].
    pub(super) fn install(
        &self,
        sink: &mut TokenSink<'_>,
        run_id: u64,
        abort: Arc<AbortHandle>,
        cap: Option<u32>,
        hidden_mode: bool,
        steering: Option<&mut Steering>,
    ) {
        let sink = NonNull::from(sink).cast::<TokenSink<'static>>();
        let steering = steering.map(NonNull::from);
        *self.run.lock() = Some(ActiveRun {
            sink,
            run_id,
            abort,
            cap,
            tokens: 0,
            capped: false,
            reaborted: false,
            finished: None,
            failed: false,
            panicked: false,
            hidden_mode,
            hidden: None,
            steering,
            budget: None,
            budget_paused: false,
            pause_ignored: false,
            logprobs: None,
            prefill_only: false,
            prefill_paused: false,
        });
    }

    /// Makes the installed run one that only prefills.
    pub(super) fn set_prefill_only(&self) {
        if let Some(run) = self.run.lock().as_mut() {
            run.prefill_only = true;
        }
    }

    /// Sets the installed run's log probabilities (a logits run).
    pub(super) fn set_logprobs(&self, logprobs: Option<(Arc<Vocabulary>, usize)>) {
        if let Some(run) = self.run.lock().as_mut() {
            run.logprobs = logprobs;
        }
    }

    /// Sets the installed run's thinking budget.
    pub(super) fn set_budget(&self, budget: Option<u32>) {
        if let Some(run) = self.run.lock().as_mut() {
            run.budget = budget;
        }
    }

    /// Removes the run; later callbacks are ignored.
    pub(super) fn remove(&self) -> Option<ActiveRun> {
        self.run.lock().take()
    }

    /// Handles one callback. Returns the callback's return value: 0
    /// (continue), except in a logits run, where 1 pauses it for the
    /// runner to feed its own tokens, and when the thinking budget is
    /// spent. Stopping is done with `rkllm_abort`.
    pub(super) fn on_result(&self, report: Report<'_>) -> i32 {
        use rkllm_sys::v1_3_0::{
            RKLLM_RUN_ERROR, RKLLM_RUN_FINISH, RKLLM_RUN_NORMAL, RKLLM_RUN_WAITING,
        };
        let Report {
            state,
            text,
            token,
            perf,
            hidden,
            logits,
        } = report;
        let mut guard = self.run.lock();
        let Some(run) = guard.as_mut() else {
            tracing::debug!(state, "callback after the run ended; ignored");
            return 0;
        };
        match state {
            RKLLM_RUN_NORMAL | RKLLM_RUN_WAITING if run.prefill_only => {
                // The prefill is done and in the KV cache: pause before the
                // runtime's pick is taken (RKLLM_ABI.md §3.5c).
                run.prefill_paused = true;
                return 1;
            }
            RKLLM_RUN_NORMAL | RKLLM_RUN_WAITING if run.steering.is_some() => {
                let Some(mut steering) = run.steering else {
                    return 0;
                };
                // SAFETY: see `ActiveRun`: both are alive while installed,
                // and the slot's lock makes this the only access.
                let (steering, sink) = unsafe { (steering.as_mut(), run.sink.as_mut()) };
                run.tokens += 1;
                return match steering.on_row(logits, token, sink) {
                    RowAnswer::Continue => 0,
                    RowAnswer::Pause => 1,
                    RowAnswer::Abort => {
                        run.abort.abort(run.run_id);
                        1
                    }
                };
            }
            RKLLM_RUN_NORMAL | RKLLM_RUN_WAITING if run.hidden_mode => {
                if let Some((rows, width)) = hidden {
                    run.hidden = Some((rows.to_vec(), width));
                }
            }
            RKLLM_RUN_NORMAL | RKLLM_RUN_WAITING => {
                if run.capped || run.pause_ignored {
                    return 0;
                }
                if run.budget_paused {
                    // The runtime went on after the pause: stop it.
                    run.pause_ignored = true;
                    run.abort.abort(run.run_id);
                    return 1;
                }
                run.tokens += 1;
                // WAITING text is never used: the runtime carries the bytes
                // of an incomplete character into the next NORMAL piece.
                let bytes = if state == RKLLM_RUN_NORMAL {
                    text.unwrap_or_default()
                } else {
                    &[]
                };
                // SAFETY: see `ActiveRun`: the sink is alive while installed,
                // and the slot's lock makes this the only access.
                let sink = unsafe { run.sink.as_mut() };
                if let (Some((vocabulary, top)), Some(logits)) = (&run.logprobs, &logits) {
                    let row = logits.last_row();
                    let pick =
                        usize::try_from(token).unwrap_or_else(|_| super::logprobs::argmax(row));
                    if let Some(entry) = super::logprobs::entry(row, pick, *top, vocabulary) {
                        sink.logprob(entry);
                    }
                }
                if !sink.tokens_bytes(bytes, 1) {
                    // The request is gone: ask once more, in case the first
                    // abort reached the runtime before this run began.
                    if !run.reaborted {
                        run.reaborted = true;
                        run.abort.abort(run.run_id);
                    }
                } else if run.cap.is_some_and(|cap| run.tokens >= cap) {
                    run.capped = true;
                    run.abort.abort(run.run_id);
                } else if run
                    .budget
                    .is_some_and(|budget| sink.thinking() && sink.thought() >= budget)
                {
                    // The thinking took its budget: pause, for the runner
                    // to feed the block's end (RKLLM_ABI.md §3.5c).
                    run.budget_paused = true;
                    return 1;
                }
            }
            RKLLM_RUN_FINISH => run.finished = Some(perf.unwrap_or_default()),
            RKLLM_RUN_ERROR => run.failed = true,
            other => tracing::warn!(
                state = other,
                "unknown callback state from the runtime; ignored"
            ),
        }
        0
    }

    /// Records that the callback panicked (the panic was caught).
    pub(super) fn mark_panicked(&self) {
        if let Some(run) = self.run.lock().as_mut() {
            run.panicked = true;
            run.abort.abort(run.run_id);
        }
    }
}

/// The RAII owner of one runtime handle. Dropping it destroys the handle
/// (after any abort in flight) and then frees the callback slot.
pub(super) struct ModelHandle {
    pub runtime: Arc<Runtime>,
    pub abort: Arc<AbortHandle>,
    pub handle: RawHandle,
    /// Boxed so its address, given to the runtime as `userdata`, is stable.
    pub slot: Box<CallbackSlot>,
    /// Kept alive for the handle's life: whether the runtime keeps the
    /// pointer is undocumented.
    _model_path: CString,
}

impl ModelHandle {
    pub(super) fn new(
        runtime: Arc<Runtime>,
        handle: RawHandle,
        slot: Box<CallbackSlot>,
        model_path: CString,
    ) -> Self {
        Self {
            abort: Arc::new(AbortHandle::new(Arc::clone(&runtime), handle)),
            runtime,
            handle,
            slot,
            _model_path: model_path,
        }
    }

    /// The `userdata` pointer for this handle's callbacks.
    pub(super) fn userdata(&self) -> *mut c_void {
        std::ptr::from_ref::<CallbackSlot>(&self.slot)
            .cast_mut()
            .cast()
    }
}

impl Drop for ModelHandle {
    fn drop(&mut self) {
        let Some(handle) = self.abort.take() else {
            return;
        };
        // SAFETY: the handle came from a successful `rkllm_init`, no run is
        // in progress (runs happen on this thread, which is here), and no
        // abort can follow: the abort handle no longer holds it.
        let rc = unsafe { shared_call!(self.runtime.api, rkllm_destroy(handle.0.as_ptr())) };
        tracing::info!(rc, "RKLLM handle destroyed");
    }
}
