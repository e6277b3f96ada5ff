//! The sink a runner reports tokens to: whole UTF-8 characters, token
//! counts, stop strings, thinking apart from the answer, and phase times,
//! handed on to a [`TokenOutput`].

use std::fmt;
use std::time::Instant;

use super::Utf8Assembler;
use super::aligned::Aligned;
use crate::model::reasoning::{ReasoningMode, Split, ThinkSplitter};
use crate::vocab::CancelToken;

/// Where a sink's text goes: the engine hands in the request's stream.
pub trait TokenOutput: Sync {
    /// Appends `text` (whole characters; thinking when `thinking`) that
    /// `tokens` tokens produced, `produced_ns` when the first of them was
    /// read. Returns false when the output has ended and the runner should
    /// stop.
    fn push(&self, text: &str, thinking: bool, tokens: u32, produced_ns: Option<u64>) -> bool;
    /// The production time to record for a token read now (benchmark
    /// mode), or `None`.
    fn stamp_now(&self) -> Option<u64>;
    /// Records the prompt's token count.
    fn set_prompt_tokens(&self, tokens: u32);
    /// The log probabilities of the tokens whose text the next `push`
    /// carries (or an earlier one's, when a character was held back).
    fn logprobs(&self, _entries: Vec<crate::vocab::TokenLogprob>) {}
    /// How far a prompt prefilled in chunks has come: `done` of `total`
    /// tokens.
    fn prefill_progress(&self, _done: u32, _total: u32) {}
    /// The token that says the generation should stop.
    fn cancel_token(&self) -> &CancelToken;
}

/// Ends a text at the first of some stop strings, which is not shown;
/// holds back only a tail that may still become one.
#[derive(Debug, Default)]
struct StopFilter {
    stops: Vec<String>,
    held: String,
    /// The stop string that ended the text.
    stopped_by: Option<usize>,
    stopped: bool,
}

impl StopFilter {
    fn new(stops: Vec<String>) -> Self {
        Self {
            stops: stops.into_iter().filter(|s| !s.is_empty()).collect(),
            ..Self::default()
        }
    }

    /// The part of `text` that may be shown now.
    fn push(&mut self, text: &str) -> String {
        if self.stopped {
            return String::new();
        }
        if self.stops.is_empty() {
            return text.to_owned();
        }
        self.held.push_str(text);
        if let Some((at, which)) = self
            .stops
            .iter()
            .enumerate()
            .filter_map(|(i, s)| self.held.find(s.as_str()).map(|at| (at, i)))
            .min()
        {
            self.stopped = true;
            self.stopped_by = Some(which);
            self.held.truncate(at);
            return std::mem::take(&mut self.held);
        }
        // Keep back the longest tail that may begin a stop string.
        let held = &self.held;
        let keep = self
            .stops
            .iter()
            .flat_map(|s| s.char_indices().skip(1).map(move |(n, _)| &s[..n]))
            .filter(|prefix| held.ends_with(prefix))
            .map(str::len)
            .max()
            .unwrap_or(0);
        let cut = self.held.len() - keep;
        self.held.drain(..cut).collect()
    }

    /// Whether text passes through it unchanged (no stop strings).
    fn is_idle(&self) -> bool {
        self.stops.is_empty() && !self.stopped
    }

    /// At the end, without a stop: what was held back is text.
    fn finish(&mut self) -> String {
        if self.stopped {
            return String::new();
        }
        std::mem::take(&mut self.held)
    }
}

/// Where a runner reports its tokens. Turns byte pieces into whole
/// characters, ends the text at a template's stop strings, separates a
/// reasoning model's thinking from its answer, ends the answer at the
/// request's stop strings, counts tokens and measures prefill and
/// generation time.
pub struct TokenSink<'a> {
    output: &'a dyn TokenOutput,
    assembler: Utf8Assembler,
    tokens: u32,
    started: Instant,
    first_token: Option<Instant>,
    open: bool,
    /// The text pushed so far (before the reasoning split), kept for
    /// requests with a conversation.
    produced: Option<String>,
    /// Strings of a server-side template that end the generation.
    template_stop: StopFilter,
    /// Separates thinking from the answer (reasoning models).
    splitter: Option<ThinkSplitter>,
    /// The request's stop strings, on the answer.
    answer_stop: StopFilter,
    /// Tokens counted inside the thinking block so far.
    thought: u32,
    /// Follows the thinking block, for counting only, where the sink does
    /// not split (a runner process's: the engine's sink splits).
    watcher: Option<ThinkSplitter>,
    /// Log probabilities of tokens whose text has not been through the
    /// sink yet.
    logprobs: Vec<crate::vocab::TokenLogprob>,
    /// The answer's, lined up with its text.
    aligned: Aligned,
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
            template_stop: StopFilter::default(),
            splitter: None,
            answer_stop: StopFilter::default(),
            thought: 0,
            watcher: None,
            logprobs: Vec::new(),
            aligned: Aligned::default(),
        }
    }

    /// The log probability of the token whose bytes come next: it goes
    /// out with the answer text they become (thinking has none; a token a
    /// stop string takes has none).
    pub fn logprob(&mut self, entry: crate::vocab::TokenLogprob) {
        self.logprobs.push(entry);
    }

    /// Follows a thinking block shaped as `mode` says, to count its tokens
    /// ([`Self::thought`]), when this sink does not separate thinking
    /// itself.
    pub fn watch_thinking(&mut self, mode: ReasoningMode) {
        if self.splitter.is_none() && mode != ReasoningMode::Off {
            self.watcher = Some(ThinkSplitter::new(mode));
        }
    }

    /// Whether the text so far ends inside a thinking block.
    pub fn thinking(&self) -> bool {
        self.splitter
            .as_ref()
            .or(self.watcher.as_ref())
            .is_some_and(ThinkSplitter::thinking)
    }

    /// Tokens reported inside the thinking block so far.
    pub fn thought(&self) -> u32 {
        self.thought
    }

    /// Ends the generation at any of `stop` (a server-side template's,
    /// on the raw text; not shown).
    pub fn with_stop(mut self, stop: Vec<String>) -> Self {
        self.template_stop = StopFilter::new(stop);
        self
    }

    /// Separates thinking as `mode` says, and ends the answer at any of
    /// `stop` (the request's stop strings; not shown).
    pub fn with_answer(mut self, mode: ReasoningMode, stop: Vec<String>) -> Self {
        self.splitter = (mode != ReasoningMode::Off).then(|| ThinkSplitter::new(mode));
        self.answer_stop = StopFilter::new(stop);
        self
    }

    /// Whether a stop string ended the generation.
    pub fn hit_stop(&self) -> bool {
        self.template_stop.stopped || self.answer_stop.stopped
    }

    /// The request's stop string that ended the answer, when one did.
    pub fn stop_sequence(&self) -> Option<&str> {
        let filter = &self.answer_stop;
        filter.stopped_by.map(|i| filter.stops[i].as_str())
    }

    /// The text generated so far (only for requests with a conversation),
    /// thinking included: see [`crate::model::reasoning::answer_of`].
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

    /// Reports how far a prompt prefilled in chunks has come.
    pub fn prefill_progress(&self, done: u32, total: u32) {
        self.output.prefill_progress(done, total);
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
        self.emit(&text, tokens, produced_ns);
        self.is_open()
    }

    /// Passes text through the stop strings and the reasoning split to the
    /// output; `tokens` are counted with it (as thinking when the splitter
    /// was inside the block).
    fn emit(&mut self, text: &str, tokens: u32, produced_ns: Option<u64>) {
        if let Some(watcher) = &mut self.watcher {
            if watcher.thinking() {
                self.thought = self.thought.saturating_add(tokens);
            }
            watcher.push(text, &mut Split::default());
        }
        // The token path of most requests: no stop string held back, no
        // thinking left to separate. The text goes out as it is.
        let plain = self.template_stop.is_idle()
            && self.answer_stop.is_idle()
            && self
                .splitter
                .as_ref()
                .is_none_or(ThinkSplitter::passes_through);
        if plain {
            if let Some(produced) = &mut self.produced {
                produced.push_str(text);
            }
            self.aligned.push(self.logprobs.drain(..));
            self.write(text, false, tokens, produced_ns);
            return;
        }
        let text = self.template_stop.push(text);
        if let Some(produced) = &mut self.produced {
            produced.push_str(&text);
        }
        let thinking_tokens = self.splitter.as_ref().is_some_and(ThinkSplitter::thinking);
        if thinking_tokens {
            self.thought = self.thought.saturating_add(tokens);
            // Thinking has no log probabilities.
            self.logprobs.clear();
        } else {
            self.aligned.push(self.logprobs.drain(..));
        }
        let split = match &mut self.splitter {
            Some(splitter) => {
                let mut split = Split::default();
                splitter.push(&text, &mut split);
                split
            }
            None => Split {
                thinking: String::new(),
                answer: text,
            },
        };
        self.deliver(split, tokens, thinking_tokens, produced_ns);
        if self.template_stop.stopped {
            self.close_answer(produced_ns);
        }
    }

    /// Writes a split to the output: its thinking, then its answer through
    /// the request's stop strings.
    fn deliver(
        &mut self,
        split: Split,
        tokens: u32,
        thinking_tokens: bool,
        produced_ns: Option<u64>,
    ) {
        let answer = self.answer_stop.push(&split.answer);
        let (mut think_tokens, mut answer_tokens) = if thinking_tokens {
            (tokens, 0)
        } else {
            (0, tokens)
        };
        if !split.thinking.is_empty() || (think_tokens > 0 && answer.is_empty()) {
            self.write(&split.thinking, true, think_tokens, produced_ns);
            think_tokens = 0;
        }
        answer_tokens += think_tokens;
        if !answer.is_empty() || answer_tokens > 0 {
            self.write(&answer, false, answer_tokens, produced_ns);
        }
        if self.answer_stop.stopped {
            self.finish_answer(produced_ns);
            self.open = false;
        }
    }

    fn write(&mut self, text: &str, thinking: bool, tokens: u32, produced_ns: Option<u64>) {
        if thinking {
            self.push(text, true, tokens, produced_ns);
            return;
        }
        if !self.aligned.is_active() {
            // No log probabilities to line up: nothing is held or copied.
            self.push(text, false, tokens, produced_ns);
            return;
        }
        // The answer goes out as the tokens that make it come.
        let (text, entries) = self.aligned.text(text);
        if !entries.is_empty() && self.open {
            self.output.logprobs(entries);
        }
        self.push(&text, false, tokens, produced_ns);
    }

    /// The answer is over: the text held for its tokens goes out, with
    /// them.
    fn finish_answer(&mut self, produced_ns: Option<u64>) {
        let (text, entries) = self.aligned.finish();
        if !entries.is_empty() && self.open {
            self.output.logprobs(entries);
        }
        if !text.is_empty() {
            self.push(&text, false, 0, produced_ns);
        }
    }

    fn push(&mut self, text: &str, thinking: bool, tokens: u32, produced_ns: Option<u64>) {
        if self.open && !self.output.push(text, thinking, tokens, produced_ns) {
            self.open = false;
        }
    }

    /// The text is over (its end, or a template's stop string): what the
    /// splitter and the answer's stop strings still hold is text.
    fn close_answer(&mut self, produced_ns: Option<u64>) {
        let mut rest = Split::default();
        if let Some(splitter) = &mut self.splitter {
            splitter.finish(&mut rest);
        }
        self.deliver(rest, 0, false, produced_ns);
        let held = self.answer_stop.finish();
        if !held.is_empty() {
            self.write(&held, false, 0, produced_ns);
        }
        self.finish_answer(produced_ns);
        if self.template_stop.stopped {
            self.open = false;
        }
    }

    /// Tokens reported so far.
    pub fn tokens(&self) -> u32 {
        self.tokens
    }

    /// At the end: flushes an incomplete trailing character (as U+FFFD)
    /// and what the stop strings and the reasoning split held back.
    pub fn flush(&mut self) {
        if self.hit_stop() {
            return;
        }
        let tail = self.assembler.finish();
        if !tail.is_empty() {
            self.emit(&tail, 0, None);
        }
        // Held back for a stop string that never came: it is text.
        let held = self.template_stop.finish();
        if !held.is_empty() {
            self.emit(&held, 0, None);
        }
        self.close_answer(None);
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
