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
use super::tap::{Perf, Tap};
use crate::backend::TokenSink;
use crate::model::tokenizer::Vocabulary;
use crate::plan::steer::{Logits, RowAnswer, Steering};

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
    /// What each callback does.
    mode: Mode,
    /// The last hidden layer it returned (rows, width).
    pub hidden: Option<(Vec<f32>, usize)>,
    /// Whether the run was paused at the thinking budget.
    pub budget_paused: bool,
    /// The token whose callback paused it there (the runtime's pick, not
    /// decoded: `paused_token_not_in_kv`), when it gave one.
    pub paused_token: Option<i32>,
    /// Whether the runtime went on after that pause (it was aborted).
    pub pause_ignored: bool,
    /// Whether a run that only prefills paused after its prefill.
    pub prefill_paused: bool,
}

/// What each callback of a run does.
pub(super) enum CallbackMode<'m> {
    /// Text to the sink: the thinking budget, in tokens (once the thinking
    /// block has taken them, the run is paused for the runner to close the
    /// block), and for a logits run the log probabilities to report (the
    /// vocabulary, and how many of the likeliest tokens with each).
    Text {
        budget: Option<crate::plan::budget::PauseAt>,
        logprobs: Option<(Arc<Vocabulary>, usize)>,
    },
    /// A hidden-layer run: the rows are kept, no text is expected.
    Hidden,
    /// A run that only prefills (a chunk of a long prompt): its first
    /// callback, the prefill's rows, pauses it, and nothing is reported.
    PrefillOnly,
    /// A logits run of a constrained answer: what answers each row.
    Steered(&'m mut Steering),
    /// A probe's run: each callback is recorded, and the tap says when to
    /// pause.
    Probe(&'m mut Tap),
}

/// [`CallbackMode`] with its borrow held as a pointer while the run is
/// installed.
enum Mode {
    Text {
        budget: Option<crate::plan::budget::PauseAt>,
        logprobs: Option<(Arc<Vocabulary>, usize)>,
    },
    Hidden,
    PrefillOnly,
    Steered(NonNull<Steering>),
    Probe(NonNull<Tap>),
}

// SAFETY: `sink` points at a `TokenSink`, and a steered or probe run's
// mode at a `Steering` or `Tap`, on the worker thread's stack that outlive
// the run: they are installed before `rkllm_run` and removed (under the
// slot's lock) after it returns, and they are only dereferenced under that
// lock, so they are never used from two threads at once nor after they are
// gone. The worker thread does not touch them while `rkllm_run` runs. All
// are `Send`.
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

impl ActiveRun {
    /// A `NORMAL` or `WAITING` callback: a token (or a step's rows) of the
    /// run in progress. Returns the callback's return value.
    fn on_token(
        &mut self,
        state: u32,
        text: Option<&[u8]>,
        token: i32,
        hidden: Option<(&[f32], usize)>,
        logits: Option<Logits<'_>>,
    ) -> i32 {
        use rkllm_sys::v1_3_0::RKLLM_RUN_NORMAL;
        let (budget, logprobs) = match &mut self.mode {
            Mode::PrefillOnly => {
                // The prefill is done and in the KV cache: pause before the
                // runtime's pick is taken (RKLLM_ABI.md §3.5c).
                self.prefill_paused = true;
                return 1;
            }
            Mode::Steered(steering) => {
                // SAFETY: see `ActiveRun`: both are alive while installed,
                // and the slot's lock makes this the only access.
                let (steering, sink) = unsafe { (steering.as_mut(), self.sink.as_mut()) };
                self.tokens += 1;
                return match steering.on_row(logits, token, &mut |bytes| sink.token_bytes(bytes)) {
                    RowAnswer::Continue => 0,
                    RowAnswer::Pause => 1,
                    RowAnswer::Abort => {
                        self.abort.abort(self.run_id);
                        1
                    }
                };
            }
            Mode::Hidden => {
                if let Some((rows, width)) = hidden {
                    self.hidden = Some((rows.to_vec(), width));
                }
                return 0;
            }
            Mode::Text { budget, logprobs } => (*budget, logprobs.clone()),
            Mode::Probe(_) => (None, None),
        };
        if self.capped || self.pause_ignored {
            return 0;
        }
        if self.budget_paused {
            // The runtime went on after the pause: stop it.
            self.pause_ignored = true;
            self.abort.abort(self.run_id);
            return 1;
        }
        self.tokens += 1;
        // WAITING text is never used: the runtime carries the bytes of an
        // incomplete character into the next NORMAL piece.
        let bytes = if state == RKLLM_RUN_NORMAL {
            text.unwrap_or_default()
        } else {
            &[]
        };
        // SAFETY: see `ActiveRun`: the sink is alive while installed, and
        // the slot's lock makes this the only access.
        let sink = unsafe { self.sink.as_mut() };
        if let (Some((vocabulary, top)), Some(logits)) = (&logprobs, &logits) {
            let row = logits.last_row();
            let pick = usize::try_from(token).unwrap_or_else(|_| crate::plan::rows::argmax(row));
            if let Some(entry) = crate::plan::rows::entry(row, pick, *top, vocabulary) {
                sink.logprob(entry);
            }
        }
        if !sink.tokens_bytes(bytes, 1) {
            // The request is gone: ask once more, in case the first abort
            // reached the runtime before this run began.
            if !self.reaborted {
                self.reaborted = true;
                self.abort.abort(self.run_id);
            }
        } else if self.cap.is_some_and(|cap| self.tokens >= cap) {
            self.capped = true;
            self.abort.abort(self.run_id);
        } else if budget
            .is_some_and(|at| at.reached(sink.thinking(), sink.thought(), sink.tokens()))
        {
            // The thinking took its budget: pause, for the runner to feed
            // the block's end (RKLLM_ABI.md §3.5c).
            self.budget_paused = true;
            self.paused_token = Some(token);
            return 1;
        }
        0
    }
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
    /// Installs a run. The sink (and what `mode` borrows) must stay alive
    /// until [`Self::remove`].
    pub(super) fn install(
        &self,
        sink: &mut TokenSink<'_>,
        run_id: u64,
        abort: Arc<AbortHandle>,
        cap: Option<u32>,
        mode: CallbackMode<'_>,
    ) {
        let sink = NonNull::from(sink).cast::<TokenSink<'static>>();
        let mode = match mode {
            CallbackMode::Text { budget, logprobs } => Mode::Text { budget, logprobs },
            CallbackMode::Hidden => Mode::Hidden,
            CallbackMode::PrefillOnly => Mode::PrefillOnly,
            CallbackMode::Steered(steering) => Mode::Steered(NonNull::from(steering)),
            CallbackMode::Probe(tap) => Mode::Probe(NonNull::from(tap)),
        };
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
            mode,
            hidden: None,
            budget_paused: false,
            paused_token: None,
            pause_ignored: false,
            prefill_paused: false,
        });
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
        if let Mode::Probe(mut tap) = run.mode {
            // SAFETY: see `ActiveRun`: the tap is alive while installed, and
            // the slot's lock makes this the only access.
            let tap = unsafe { tap.as_mut() };
            let answer = tap.on_callback(state, text, token, perf, logits.as_ref(), hidden);
            if answer == 1 {
                return 1;
            }
        }
        match state {
            RKLLM_RUN_NORMAL | RKLLM_RUN_WAITING => {
                return run.on_token(state, text, token, hidden, logits);
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
