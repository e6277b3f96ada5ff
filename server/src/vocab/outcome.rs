//! What a finished generation reports: why it stopped, how many tokens it
//! used and how long each phase took. Shared by the engine, the stream
//! manager (end chunks) and every transport. Protocol codes and HTTP
//! statuses are chosen by each transport from [`EndErrorKind`].

use serde::{Deserialize, Serialize};

/// Why a generation ended. Serialised in lower case, as on the wire.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum FinishReason {
    /// The model stopped by itself (end of sequence).
    Stop,
    /// The token cap (`max_tokens`) was reached.
    Length,
    /// A client, an expiry or the shutdown aborted it.
    Abort,
    /// The runtime failed; the end chunk carries the error.
    Error,
}

impl FinishReason {
    /// The wire name.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Stop => "stop",
            Self::Length => "length",
            Self::Abort => "abort",
            Self::Error => "error",
        }
    }
}

/// Token counts of one generation.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Usage {
    /// Tokens of the prompt (as reported by the backend).
    pub prompt_tokens: u32,
    /// Tokens generated.
    pub completion_tokens: u32,
    /// Of those, the tokens of a reasoning model's thinking.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub reasoning_tokens: u32,
}

fn is_zero(n: &u32) -> bool {
    *n == 0
}

/// Wall-clock phases of one generation, in milliseconds.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize)]
pub struct Timings {
    /// Time spent waiting in the model's queue.
    pub queue_ms: f64,
    /// Time from the start of the run to the first generated token.
    pub prefill_ms: f64,
    /// Time from the first generated token to the end.
    pub generate_ms: f64,
    /// `completion_tokens` per second of `generate_ms` (0 when unknown).
    pub tokens_per_second: f64,
}

/// `ms` rounded to the microsecond, for logs and the wire (no
/// `0.027401000000000002`).
pub fn round_ms(ms: f64) -> f64 {
    (ms * 1000.0).round() / 1000.0
}

impl Timings {
    /// Fills in `tokens_per_second` from the generation time and count,
    /// and rounds every figure to three decimals.
    pub fn with_rate(mut self, completion_tokens: u32) -> Self {
        self.tokens_per_second = if self.generate_ms > 0.0 {
            f64::from(completion_tokens) * 1000.0 / self.generate_ms
        } else {
            0.0
        };
        self.queue_ms = round_ms(self.queue_ms);
        self.prefill_ms = round_ms(self.prefill_ms);
        self.generate_ms = round_ms(self.generate_ms);
        self.tokens_per_second = round_ms(self.tokens_per_second);
        self
    }
}

/// What made a stream end in error.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EndErrorKind {
    /// The runtime reported a failure.
    Runtime,
    /// The backend failed internally (a panic caught on the model's thread).
    Internal,
    /// The stream outgrew its buffer limit because nobody read it.
    BufferLimit,
}

/// The error carried by an end chunk whose `finish_reason` is `error`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EndError {
    /// What failed.
    pub kind: EndErrorKind,
    /// A message safe to show to the client.
    pub message: String,
}

/// Everything the end chunk of a stream carries besides `seq` and `delta`.
#[derive(Debug, Clone, PartialEq)]
pub struct EndInfo {
    /// Why the stream ended.
    pub finish_reason: FinishReason,
    /// Token counts.
    pub usage: Usage,
    /// Phase timings, when the generation ran.
    pub timings: Option<Timings>,
    /// The failure, when `finish_reason` is `error`.
    pub error: Option<EndError>,
    /// The input's embedding, when the run computed one (embedding models
    /// produce no text).
    pub embedding: Option<std::sync::Arc<[f32]>>,
    /// The request's stop string that ended the answer, when one did.
    pub stop_sequence: Option<String>,
}

impl EndInfo {
    /// An end without timings (abort, expiry, shutdown).
    pub fn new(finish_reason: FinishReason, usage: Usage) -> Self {
        Self {
            finish_reason,
            usage,
            timings: None,
            error: None,
            embedding: None,
            stop_sequence: None,
        }
    }

    /// The embedding an embedding run ended with, or why there is none
    /// (its error, or an end without a vector).
    ///
    /// # Errors
    /// The message to give the client.
    pub fn embedding_result(&self) -> Result<std::sync::Arc<[f32]>, String> {
        if let Some(err) = &self.error {
            return Err(err.message.clone());
        }
        self.embedding.clone().ok_or_else(|| {
            format!(
                "the run ended ({}) without an embedding",
                self.finish_reason.as_str()
            )
        })
    }

    /// An error end of the given kind and message.
    pub fn error(kind: EndErrorKind, message: impl Into<String>, usage: Usage) -> Self {
        Self {
            finish_reason: FinishReason::Error,
            usage,
            timings: None,
            embedding: None,
            stop_sequence: None,
            error: Some(EndError {
                kind,
                message: message.into(),
            }),
        }
    }
}
