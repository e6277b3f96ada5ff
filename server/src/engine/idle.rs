//! Work a runner does while the NPU is idle: bringing a returning
//! conversation's snapshot up to date (the rkllm runner's; see
//! `backend/rkllm/refresh.rs`). A runner says it has some in the
//! generation it returns; its lane asks for it [`GRACE`] after that job,
//! when no model has a job running or waiting. Any job queued meanwhile,
//! for any model, stops it, as do an unload and shutdown: such a request
//! waits only for what the work has begun (loading a snapshot, and a
//! prefill the runtime ends before it notices the abort, which the runner
//! keeps to a prefill chunk's worth).

use std::panic::{AssertUnwindSafe, catch_unwind};

use parking_lot::Mutex;

use crate::backend::{BackendError, Runner, TokenOutput, TokenSink, ValidRunRequest};
use crate::model::{Prompt, Sampling};
use crate::vocab::{CancelToken, FinishReason};

/// The token that stops a lane's idle work, while it runs. One per model:
/// only a backend with one lane per model (rkllm) has idle work.
#[derive(Debug, Default)]
pub(super) struct IdleStop(Mutex<Option<CancelToken>>);

impl IdleStop {
    /// Stops the idle work running now, if any.
    pub fn interrupt(&self) {
        if let Some(token) = self.0.lock().as_ref() {
            token.cancel();
        }
    }

    /// Whether idle work runs now (or is about to look whether it may).
    pub fn running(&self) -> bool {
        self.0.lock().is_some()
    }
}

/// Where the idle work's output goes: nowhere (it generates nothing a
/// client reads).
struct Discard(CancelToken);

impl TokenOutput for Discard {
    fn push(&self, _text: &str, _thinking: bool, _tokens: u32, _produced_ns: Option<u64>) -> bool {
        !self.0.is_cancelled()
    }
    fn stamp_now(&self) -> Option<u64> {
        None
    }
    fn set_prompt_tokens(&self, _tokens: u32) {}
    fn cancel_token(&self) -> &CancelToken {
        &self.0
    }
}

/// How long the NPU is left idle after a job before idle work begins: a
/// client that sends its next request at once (an agent's loop, a
/// benchmark) never finds the work under way, while a person reading the
/// answer leaves seconds.
pub(super) const GRACE: std::time::Duration = std::time::Duration::from_millis(250);

/// How long a lane waits to look again when another model's job keeps
/// the NPU busy.
pub(super) const RETRY: std::time::Duration = std::time::Duration::from_millis(250);

/// What became of a lane's idle work.
pub(super) enum Idle {
    /// Done or stopped; whether the runner has more.
    Ran(bool),
    /// Another model's job runs or waits: look again later.
    Deferred,
    /// The runner was lost.
    Lost(BackendError),
}

/// The model whose lane does idle work: its name, the token holder that
/// stops the work, and its snapshot totals.
pub(super) struct Lane<'a> {
    pub model: &'a str,
    pub stop: &'a IdleStop,
    pub snapshots: &'a Mutex<Option<crate::backend::SnapshotReport>>,
}

/// Runs `runner`'s idle work for `lane` unless `npu_idle` (no job taken,
/// running or waiting on any model, no other idle work, this model not
/// leaving) says no.
pub(super) fn idle_work(
    lane: &Lane<'_>,
    npu_idle: impl FnOnce() -> bool,
    runner: &mut dyn Runner,
) -> Idle {
    let stop = CancelToken::new();
    // Set before looking at the queues: a job queued after the look
    // finds the token and stops the work.
    *lane.stop.0.lock() = Some(stop.clone());
    if !npu_idle() {
        *lane.stop.0.lock() = None;
        return Idle::Deferred;
    }
    let request = ValidRunRequest {
        prompt: Prompt::plain(""),
        model: lane.model.to_owned(),
        max_tokens: 1,
        max_tokens_requested: false,
        sampling: Sampling::default(),
        images: Vec::new(),
        embed: None,
        lora: None,
        clear_cache: false,
        refresh_snapshot: true,
        probe: None,
        stop: Vec::new(),
        constraint: None,
    };
    let output = Discard(stop.clone());
    let mut sink = TokenSink::new(&output, false);
    let started = std::time::Instant::now();
    let result = catch_unwind(AssertUnwindSafe(|| runner.generate(&request, &mut sink)));
    *lane.stop.0.lock() = None;
    match result {
        Ok(Ok(generation)) => {
            // Counted when it put the NPU to work: an update made, or
            // stopped (a runner with nothing to do reports no usage).
            let yielded = generation.finish_reason == FinishReason::Abort;
            if yielded || generation.usage.is_some() {
                crate::metrics::idle_work(lane.model, yielded, started.elapsed());
            }
            if let Some(report) = generation.snapshots {
                super::job::add_snapshots(lane.model, report, lane.snapshots);
            }
            Idle::Ran(generation.idle_work)
        }
        Ok(Err(err)) => {
            tracing::warn!(model = lane.model, error = %err, "idle work failed");
            match err {
                BackendError::Lost { .. } => Idle::Lost(err),
                _ => Idle::Ran(false),
            }
        }
        Err(_) => {
            tracing::error!(model = lane.model, "the backend panicked during idle work");
            Idle::Ran(false)
        }
    }
}
