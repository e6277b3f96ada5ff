//! The stream manager: every stream's chunk buffer, its consumers' cursors,
//! limits and idle expiry.
//!
//! Producers (backend threads) push deltas; consumers (HTTP polls,
//! WebSocket pushers, waiting requests) read chunks in seq order and are
//! woken by a `Notify`, never by a polling loop.

mod buffer;
mod id;
mod manager;
mod private;

use std::sync::Arc;

use serde::Serialize;

use crate::vocab::EndInfo;

pub use buffer::{CHUNK_OVERHEAD, Consumer, Next, PollBatch, PollError, Stream};
pub use id::{STREAM_ID_LEN, is_stream_id, new_stream_id};
pub use manager::{StreamError, StreamManager};
pub use private::PrivateStream;

/// One element of a stream. Cloning is cheap (reference counts only).
#[derive(Debug, Clone)]
pub struct Chunk {
    /// Position in the stream, from 0, contiguous.
    pub seq: u64,
    /// Whole UTF-8 characters (empty on the end chunk).
    pub delta: Arc<str>,
    /// Whether `delta` is a reasoning model's thinking, not its answer.
    pub thinking: bool,
    /// Present on the end chunk only.
    pub end: Option<Arc<EndInfo>>,
    /// Tokens generated up to and including this chunk.
    pub tokens: u32,
    /// Benchmark mode only: when the backend produced the token that
    /// completed this chunk ([`monotonic_ns`]).
    pub produced_ns: Option<u64>,
    /// The log probabilities of the tokens of `delta`, for a request that
    /// asked for them.
    pub logprobs: Option<Arc<[crate::vocab::TokenLogprob]>>,
}

pub use crate::vocab::monotonic_ns;

/// Lifecycle of a stream, as reported by `stream_status`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum StreamState {
    /// Waiting in its model's queue.
    Queued,
    /// The backend is running the prompt (prefill).
    Initializing,
    /// Tokens are being generated.
    Active,
    /// Ended normally (`stop` or `length`).
    Finished,
    /// Ended by a runtime failure.
    Error,
    /// Ended by `abort`, a departed consumer or shutdown.
    Aborted,
    /// Nobody consumed it for longer than the idle timeout.
    Expired,
}

/// Limits of the stream manager (config section `[streams]`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct StreamLimits {
    /// Idle time after which an unconsumed stream expires.
    pub idle_timeout: std::time::Duration,
    /// Bytes one stream may buffer.
    pub max_stream_bytes: usize,
    /// Bytes all streams together may buffer.
    pub max_total_bytes: usize,
    /// Streams that may be queued or generating at once.
    pub max_streams: usize,
    /// How long a push-started stream outlives its last reader (a closed
    /// WebSocket) so that `subscribe` can resume it; zero aborts it at once.
    pub resume_grace: std::time::Duration,
}
