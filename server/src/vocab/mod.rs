//! Shared vocabulary: the small types every layer speaks of a generation
//! (how it ended, what it used, how to cancel it). A leaf: it imports
//! nothing from the rest of the server, and anything may import it.

mod cancel;
mod outcome;

pub use cancel::CancelToken;
pub use outcome::{EndError, EndErrorKind, EndInfo, FinishReason, Timings, Usage, round_ms};
