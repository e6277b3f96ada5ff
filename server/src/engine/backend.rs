//! The interface between the engine and a backend (mock, rkllm).
//!
//! A [`Backend`] is a shared factory; [`Backend::load`] runs on the
//! model's own worker thread and returns a [`Runner`] that never leaves
//! that thread. A runner generates one request at a time and reports
//! tokens through a [`TokenSink`], which assembles whole UTF-8 characters
//! and pushes them to the request's stream.

use std::fmt;
use std::path::PathBuf;
use std::time::Instant;

use super::{CancelToken, FinishReason, Usage, ValidRunRequest};
use crate::backend::Utf8Assembler;
use crate::stream::Stream;

/// Per-model init settings over the backend's defaults (config
/// `[[models]]` keys); `None` keeps the default.
#[derive(Debug, Clone, Default, PartialEq, serde::Deserialize, serde::Serialize)]
#[serde(deny_unknown_fields)]
pub struct ModelSettings {
    /// Context window.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_context_len: Option<u32>,
    /// Default top-k.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub top_k: Option<u32>,
    /// Default nucleus mass.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub top_p: Option<f64>,
    /// Default temperature.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub temperature: Option<f64>,
    /// Default repetition penalty.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub repeat_penalty: Option<f64>,
    /// Default frequency penalty.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub frequency_penalty: Option<f64>,
    /// Default presence penalty.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub presence_penalty: Option<f64>,
}

/// A model as the config declares it.
#[derive(Debug, Clone, PartialEq)]
pub struct ModelSpec {
    /// Name clients use in `model`.
    pub name: String,
    /// Model file, for backends that load one.
    pub path: Option<PathBuf>,
    /// How chats become input.
    pub template: super::ChatTemplate,
    /// Init settings over the backend's defaults.
    pub settings: ModelSettings,
}

/// Why a backend failed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum BackendError {
    /// The model could not be loaded.
    #[error("model `{model}` could not be loaded: {message}")]
    Load {
        /// Model name.
        model: String,
        /// What went wrong, for the operator.
        message: String,
    },
    /// The backend itself cannot run (for example, no usable runtime library).
    #[error("{0}")]
    Unavailable(String),
    /// A generation failed in the runtime.
    #[error("generation failed in the runtime: {message}")]
    Runtime {
        /// The runtime's own return code, when it gave one.
        code: Option<i32>,
        /// What went wrong, safe to show to a client.
        message: String,
    },
}

/// How a generation ended, as the runner saw it.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Generation {
    /// `Stop` or `Length` (the engine turns it into `Abort` when cancelled).
    pub finish_reason: FinishReason,
    /// Counts from the runtime, when it reports them; otherwise the sink's.
    pub usage: Option<Usage>,
    /// Prefill and generation times from the runtime, when it reports them.
    pub runtime_timings: Option<(f64, f64)>,
    /// Peak memory the runtime reported, in MB.
    pub memory_mb: Option<f64>,
}

/// Every per-request parameter a backend can apply, for `models`.
pub const ALL_OVERRIDES: &[&str] = &[
    "max_tokens",
    "temperature",
    "top_p",
    "top_k",
    "repeat_penalty",
    "frequency_penalty",
    "presence_penalty",
    "role",
    "enable_thinking",
];

/// A factory of runners, shared by all models of one backend kind.
pub trait Backend: Send + Sync + fmt::Debug {
    /// The backend's name in `models` (`"mock"`, `"rkllm"`).
    fn kind(&self) -> &'static str;

    /// The per-request parameters this backend applies, for `models`.
    fn overrides(&self) -> &'static [&'static str];

    /// Generations that may run at once per model, each lane on its own
    /// worker thread with its own runner. The NPU runs one at a time; only
    /// the mock offers more, for benchmarks.
    fn lanes(&self) -> usize {
        1
    }

    /// Loads a model. Called on the model's worker thread, which then owns
    /// the runner for its whole life.
    ///
    /// # Errors
    /// [`BackendError::Load`] when the model cannot be loaded.
    fn load(&self, model: &ModelSpec) -> Result<Box<dyn Runner>, BackendError>;
}

/// One loaded model, owned by its worker thread.
pub trait Runner {
    /// Generates text for `request`, reporting tokens to `sink`, until the
    /// model stops, the token cap is reached or `sink` says to stop.
    ///
    /// # Errors
    /// [`BackendError::Runtime`] when the runtime fails.
    fn generate(
        &mut self,
        request: &ValidRunRequest,
        sink: &mut TokenSink<'_>,
    ) -> Result<Generation, BackendError>;
}

/// Where a runner reports its tokens. Turns byte pieces into whole
/// characters, counts tokens and measures prefill and generation time.
#[derive(Debug)]
pub struct TokenSink<'a> {
    stream: &'a Stream,
    assembler: Utf8Assembler,
    tokens: u32,
    started: Instant,
    first_token: Option<Instant>,
    open: bool,
    /// The text pushed so far, kept for requests with a conversation.
    produced: Option<String>,
    /// Strings that end the generation (server-side templates).
    stop: Vec<String>,
    /// Text held back because it may begin a stop string.
    held: String,
    /// Set when a stop string ended the generation.
    stopped: bool,
}

impl<'a> TokenSink<'a> {
    pub(crate) fn new(stream: &'a Stream, keep_text: bool) -> Self {
        Self {
            stream,
            assembler: Utf8Assembler::new(),
            tokens: 0,
            started: Instant::now(),
            first_token: None,
            open: true,
            produced: keep_text.then(String::new),
            stop: Vec::new(),
            held: String::new(),
            stopped: false,
        }
    }

    /// Ends the generation at any of `stop` (which is not shown).
    pub(crate) fn with_stop(mut self, stop: Vec<String>) -> Self {
        self.stop = stop;
        self
    }

    /// Whether a stop string ended the generation.
    pub fn hit_stop(&self) -> bool {
        self.stopped
    }

    /// Applies the stop strings: returns the text that may be shown now.
    fn filter_stop(&mut self, text: String) -> String {
        if self.stop.is_empty() || self.stopped {
            return if self.stopped { String::new() } else { text };
        }
        self.held.push_str(&text);
        if let Some(at) = self
            .stop
            .iter()
            .filter_map(|s| self.held.find(s.as_str()))
            .min()
        {
            self.stopped = true;
            self.held.truncate(at);
            return std::mem::take(&mut self.held);
        }
        // Keep back the longest tail that may begin a stop string.
        let keep = self
            .stop
            .iter()
            .flat_map(|s| (1..s.len()).map(move |n| &s[..n]))
            .filter(|prefix| self.held.ends_with(prefix))
            .map(str::len)
            .max()
            .unwrap_or(0);
        let cut = self.held.len() - keep;
        self.held.drain(..cut).collect()
    }

    /// The text generated so far (only for requests with a conversation).
    pub fn produced(&self) -> &str {
        self.produced.as_deref().unwrap_or_default()
    }

    /// The token that says the generation should stop. A runner parks on
    /// it (or registers an abort hook) instead of sleeping blindly.
    pub fn cancel_token(&self) -> &CancelToken {
        self.stream.cancel_token()
    }

    /// False once the stream has ended or the generation was cancelled.
    pub fn is_open(&self) -> bool {
        self.open && !self.stream.cancel_token().is_cancelled()
    }

    /// Records the prompt's token count.
    pub fn set_prompt_tokens(&self, tokens: u32) {
        self.stream.set_prompt_tokens(tokens);
    }

    /// Reports one token decoded to `bytes` (any byte split: incomplete
    /// characters are held back). Returns false when the runner should stop.
    pub fn token_bytes(&mut self, bytes: &[u8]) -> bool {
        self.tokens_bytes(bytes, 1)
    }

    /// Reports `tokens` tokens that together decoded to `bytes`.
    pub fn tokens_bytes(&mut self, bytes: &[u8], tokens: u32) -> bool {
        let produced_ns = self.stream.stamp_now();
        if self.first_token.is_none() {
            self.first_token = Some(Instant::now());
        }
        self.tokens = self.tokens.saturating_add(tokens);
        let text = self.assembler.push(bytes);
        let text = self.filter_stop(text);
        if self.stopped {
            self.open = false;
        }
        if let Some(produced) = &mut self.produced {
            produced.push_str(&text);
        }
        if self.open && !self.stream.push_stamped(&text, tokens, produced_ns) {
            self.open = false;
        }
        self.is_open()
    }

    /// Tokens reported so far.
    pub fn tokens(&self) -> u32 {
        self.tokens
    }

    /// Flushes an incomplete trailing character (as U+FFFD) at the end.
    pub(crate) fn flush(&mut self) {
        if !self.stopped && !self.held.is_empty() {
            // Held back for a stop string that never came: it is text.
            let held = std::mem::take(&mut self.held);
            if self.open {
                self.open = self.stream.push(&held, 0);
            }
        }
        let tail = self.assembler.finish();
        if !tail.is_empty() && self.open {
            self.open = self.stream.push(&tail, 0);
        }
    }

    /// (prefill ms, generate ms) as measured around the runner.
    pub(crate) fn measured(&self) -> (f64, f64) {
        let now = Instant::now();
        let first = self.first_token.unwrap_or(now);
        let ms = |d: std::time::Duration| d.as_secs_f64() * 1000.0;
        (ms(first - self.started), ms(now - first))
    }
}
