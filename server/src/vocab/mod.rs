//! Shared vocabulary: the small types every layer speaks of a generation
//! (how it ended, what it used, how to cancel it). A leaf: it imports
//! nothing from the rest of the server, and anything may import it.

mod cancel;
mod logprob;
mod outcome;

pub use cancel::CancelToken;
pub use logprob::{TokenLogprob, token_text};

/// Nanoseconds of the system-wide monotonic clock (`CLOCK_MONOTONIC`),
/// comparable between processes on one machine.
pub fn monotonic_ns() -> u64 {
    let t = rustix::time::clock_gettime(rustix::time::ClockId::Monotonic);
    u64::try_from(t.tv_sec).unwrap_or(0) * 1_000_000_000 + u64::try_from(t.tv_nsec).unwrap_or(0)
}

pub use outcome::{EndError, EndErrorKind, EndInfo, FinishReason, Timings, Usage, round_ms};
