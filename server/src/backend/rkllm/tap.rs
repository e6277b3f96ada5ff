//! What a run's callbacks hand over, as the callback reads it: the counts
//! a run ends with ([`Perf`]), and for a probe's run a [`Tap`] that records
//! every callback and pauses the run where the probe says.

use std::time::Instant;

use crate::plan::steer::Logits;

/// What the callback learns about the run in progress.
#[derive(Debug, Default, Clone, Copy, PartialEq)]
pub(super) struct Perf {
    pub prefill_time_ms: f32,
    pub prefill_tokens: i32,
    pub generate_time_ms: f32,
    pub generate_tokens: i32,
    pub memory_usage_mb: f32,
}

/// What a probe's run records of its callbacks.
#[derive(Debug, Default)]
pub(super) struct Tap {
    /// Return 1 (pause) from this callback on (1-based, counting the
    /// callbacks that carry a token or rows); `None`: never.
    pub pause_at: Option<u32>,
    /// Callbacks that carried a token or rows.
    pub callbacks: u32,
    /// The first such callback's logits rows: how many, how wide.
    pub first_rows: Option<(usize, usize)>,
    /// Callbacks whose last row's likeliest token was the runtime's pick,
    /// and those where both could be read.
    pub argmax_agreed: u32,
    pub argmax_compared: u32,
    /// The ids the callbacks carried, in order.
    pub tokens: Vec<i32>,
    /// Their text, joined.
    pub text: Vec<u8>,
    /// Whether the run was paused.
    pub paused: bool,
    /// When the first callback came.
    pub first_at: Option<Instant>,
    /// The counts the run ended with.
    pub perf: Option<Perf>,
    /// A hidden-layer run's rows: one per prefilled token.
    pub hidden_rows: Option<usize>,
}

impl Tap {
    /// A tap that pauses at callback `at` (`None`: never).
    pub fn pausing_at(at: Option<u32>) -> Self {
        Self {
            pause_at: at,
            ..Self::default()
        }
    }

    /// Records one callback; returns 1 where the run is to pause, else 0
    /// (the callback then goes on as a text run's would, to a sink whose
    /// output is dropped).
    pub fn on_callback(
        &mut self,
        state: u32,
        text: Option<&[u8]>,
        token: i32,
        perf: Option<Perf>,
        logits: Option<&Logits<'_>>,
        hidden: Option<(&[f32], usize)>,
    ) -> i32 {
        use rkllm_sys::v1_3_0::{RKLLM_RUN_FINISH, RKLLM_RUN_NORMAL, RKLLM_RUN_WAITING};
        match state {
            RKLLM_RUN_NORMAL | RKLLM_RUN_WAITING => {
                self.callbacks += 1;
                self.first_at.get_or_insert_with(Instant::now);
                if let Some((rows, width)) = hidden.filter(|(_, w)| *w > 0) {
                    self.hidden_rows.get_or_insert(rows.len() / width);
                }
                if let Some(logits) = logits.filter(|l| l.count > 0 && l.width > 0) {
                    self.first_rows.get_or_insert((logits.count, logits.width));
                    if token >= 0 {
                        self.argmax_compared += 1;
                        let best = crate::plan::rows::argmax(logits.last_row());
                        if usize::try_from(token).is_ok_and(|t| t == best) {
                            self.argmax_agreed += 1;
                        }
                    }
                }
                self.tokens.push(token);
                if state == RKLLM_RUN_NORMAL {
                    self.text.extend_from_slice(text.unwrap_or_default());
                }
                if self.pause_at.is_some_and(|at| self.callbacks >= at) {
                    self.paused = true;
                    return 1;
                }
                0
            }
            RKLLM_RUN_FINISH => {
                self.perf = perf;
                0
            }
            _ => 0,
        }
    }
}
