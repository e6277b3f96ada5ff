//! The sink a runner reports tokens to: whole UTF-8 characters, token
//! counts, stop strings and phase times, handed on to a [`TokenOutput`].

use std::fmt;
use std::time::Instant;

use super::Utf8Assembler;
use crate::vocab::CancelToken;

/// Where a sink's text goes: the engine hands in the request's stream.
pub trait TokenOutput: Sync {
    /// Appends `text` (whole characters) that `tokens` tokens produced,
    /// `produced_ns` when the first of them was read. Returns false when
    /// the output has ended and the runner should stop.
    fn push(&self, text: &str, tokens: u32, produced_ns: Option<u64>) -> bool;
    /// The production time to record for a token read now (benchmark
    /// mode), or `None`.
    fn stamp_now(&self) -> Option<u64>;
    /// Records the prompt's token count.
    fn set_prompt_tokens(&self, tokens: u32);
    /// The token that says the generation should stop.
    fn cancel_token(&self) -> &CancelToken;
}

/// Where a runner reports its tokens. Turns byte pieces into whole
/// characters, counts tokens and measures prefill and generation time.
pub struct TokenSink<'a> {
    output: &'a dyn TokenOutput,
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
    pub fn new(output: &'a dyn TokenOutput, keep_text: bool) -> Self {
        Self {
            output,
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
    pub fn with_stop(mut self, stop: Vec<String>) -> Self {
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
        self.output.cancel_token()
    }

    /// False once the stream has ended or the generation was cancelled.
    pub fn is_open(&self) -> bool {
        self.open && !self.output.cancel_token().is_cancelled()
    }

    /// Records the prompt's token count.
    pub fn set_prompt_tokens(&self, tokens: u32) {
        self.output.set_prompt_tokens(tokens);
    }

    /// Reports one token decoded to `bytes` (any byte split: incomplete
    /// characters are held back). Returns false when the runner should stop.
    pub fn token_bytes(&mut self, bytes: &[u8]) -> bool {
        self.tokens_bytes(bytes, 1)
    }

    /// Reports `tokens` tokens that together decoded to `bytes`.
    pub fn tokens_bytes(&mut self, bytes: &[u8], tokens: u32) -> bool {
        let produced_ns = self.output.stamp_now();
        self.tokens_bytes_at(bytes, tokens, produced_ns)
    }

    /// Whether the output records production times (benchmark mode).
    pub fn stamps(&self) -> bool {
        self.output.stamp_now().is_some()
    }

    /// Like [`Self::tokens_bytes`], with the production time measured
    /// elsewhere (in a runner process, on the same monotonic clock).
    pub fn tokens_bytes_at(&mut self, bytes: &[u8], tokens: u32, produced_ns: Option<u64>) -> bool {
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
        if self.open && !self.output.push(&text, tokens, produced_ns) {
            self.open = false;
        }
        self.is_open()
    }

    /// Tokens reported so far.
    pub fn tokens(&self) -> u32 {
        self.tokens
    }

    /// Flushes an incomplete trailing character (as U+FFFD) at the end.
    pub fn flush(&mut self) {
        if !self.stopped && !self.held.is_empty() {
            // Held back for a stop string that never came: it is text.
            let held = std::mem::take(&mut self.held);
            if self.open {
                self.open = self.output.push(&held, 0, None);
            }
        }
        let tail = self.assembler.finish();
        if !tail.is_empty() && self.open {
            self.open = self.output.push(&tail, 0, None);
        }
    }

    /// (prefill ms, generate ms) as measured around the runner.
    pub fn measured(&self) -> (f64, f64) {
        let now = Instant::now();
        let first = self.first_token.unwrap_or(now);
        let ms = |d: std::time::Duration| d.as_secs_f64() * 1000.0;
        (ms(first - self.started), ms(now - first))
    }
}

impl fmt::Debug for TokenSink<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("TokenSink")
            .field("tokens", &self.tokens)
            .field("open", &self.open)
            .finish_non_exhaustive()
    }
}
