//! The mock backend: deterministic text, no NPU. It is a test double and
//! the default backend, so the whole server can run and be tested on any
//! machine.
//!
//! - The same request (prompt, model, role, thinking switch, sampling
//!   overrides) always gives the same text; `max_tokens` only cuts it, so
//!   a capped text is a prefix of the uncapped one.
//! - Words include multi-byte characters (accents, CJK, emoji), and tokens
//!   are byte pieces that often split a character in two, as byte-level
//!   tokenizers do; the engine's UTF-8 assembly joins them.
//! - Tokens are paced at `tokens_per_second` (0 = as fast as possible)
//!   after a prefill delay; both waits end at once on cancellation.
//! - Directives in the prompt steer it for tests (see `docs/mock-backend.md`):
//!   `@mock(length=N)` sets the natural length in tokens,
//!   `@mock(error_after=N)` fails like a runtime error after N tokens,
//!   `@mock(prefill_ms=N)` overrides the prefill delay,
//!   `@mock(echo=1)` repeats the text after the directive,
//!   `@mock(think=1)` opens the reply with a `<think>` block and
//!   `@mock(think=2)` thinks without the opening tag (a template opened
//!   it), both honouring the thinking switch, and `@mock(think_words=N)`
//!   makes that block N words long; a request's thinking budget closes
//!   the block when its tokens are spent, as the runner does; in a runner
//!   process only, `@mock(crash_after=N)` aborts the process and
//!   `@mock(stall_after=N)` stops producing (ignoring aborts) after N tokens.
//! - Under a constraint it proposes the reply it would give without one and
//!   keeps what the grammar allows, as the runner does on the NPU
//!   (see [`constrained`]).

use std::time::{Duration, Instant};

mod constrained;
mod logprobs;
mod prefill;

use crate::backend::{
    ALL_OVERRIDES, Backend, BackendError, Generation, Runner, TokenSink, ValidRunRequest,
};
use crate::plan::ConversationState;

use crate::model::tokenizer::TokenizerSource;
use crate::model::{ModelSpec, ReasoningMode};
use crate::vocab::{FinishReason, Usage};

/// Settings of the mock backend (config section `[mock]`).
#[derive(Debug, Clone, Copy, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct MockConfig {
    /// Tokens per second; 0 means unthrottled.
    pub tokens_per_second: f64,
    /// Delay before the first token, in milliseconds.
    pub prefill_ms: u64,
    /// Generations that may run at once per model.
    pub lanes: usize,
    /// Whether each model runs in its own runner process, where the
    /// `crash_after` and `stall_after` directives are allowed.
    pub isolated: bool,
}

/// The mock backend factory.
#[derive(Debug, Clone)]
pub struct MockBackend {
    config: MockConfig,
}

impl MockBackend {
    /// A mock backend with the given pacing.
    pub fn new(config: MockConfig) -> Self {
        Self { config }
    }
}

impl Backend for MockBackend {
    fn kind(&self) -> &'static str {
        "mock"
    }

    fn overrides(&self) -> &'static [&'static str] {
        ALL_OVERRIDES
    }

    fn seeded(&self) -> bool {
        true
    }

    fn context_length(&self, model: &ModelSpec) -> Option<u32> {
        Some(model.settings.max_context_len.unwrap_or(MOCK_CONTEXT_LEN))
    }

    fn tokenizer(&self, model: &ModelSpec) -> Option<crate::model::tokenizer::TokenizerSource> {
        // The mock speaks its own small vocabulary unless given another.
        Some(
            model
                .tokenizer
                .clone()
                .unwrap_or(crate::model::tokenizer::TokenizerSource::Mock),
        )
    }

    fn lanes(&self) -> usize {
        self.config.lanes
    }

    fn check(&self, request: &ValidRunRequest) -> Result<(), String> {
        let directives = parse_directives(&input_of(request))?;
        if (directives.crash_after.is_some() || directives.stall_after.is_some())
            && !self.config.isolated
        {
            return Err(
                "mock directives `crash_after` and `stall_after` work only when models run in \
                 runner processes ([mock] runner = \"process\")"
                    .into(),
            );
        }
        Ok(())
    }

    fn load(&self, model: &ModelSpec) -> Result<Box<dyn Runner>, BackendError> {
        Ok(Box::new(MockRunner {
            config: self.config,
            conversation: ConversationState::default(),
            reasoning: model.reasoning,
            vocabulary: None,
            tokenizer: self.tokenizer(model).unwrap_or(TokenizerSource::Mock),
            encoder: None,
            reranker: model.reranker,
            profile: crate::plan::profile::Profile {
                reasoning: model.reasoning,
                server_template: model.template.is_server_side(),
                renders_template: model.template.is_server_side(),
                // The mock's own tokenizer when the model names none.
                tokenizer: true,
                chunk_tokens: model.settings.prefill_chunk(),
                features: crate::plan::profile::Features::all_on(
                    "the mock carries out the plan as the ABI notes describe",
                ),
            },
            snapshots: prefill::Snapshots::default(),
            keeps_snapshots: model.settings.snapshots.unwrap_or(true),
        }))
    }
}

struct MockRunner {
    config: MockConfig,
    /// Like a runtime with `keep_history`: the chat it holds.
    conversation: ConversationState,
    /// How the model's replies carry thinking (the history holds the answer).
    reasoning: crate::model::reasoning::ReasoningMode,
    /// The vocabulary of its last constrained answer, kept while it is
    /// loaded (in a runner process, nothing else holds it).
    vocabulary: Option<std::sync::Arc<crate::model::tokenizer::Vocabulary>>,
    /// Its tokenizer, which counts its prompts (the mock's own unless the
    /// model names one).
    tokenizer: TokenizerSource,
    /// Its encoder, once loaded (held while the model is).
    encoder: Option<std::sync::Arc<crate::model::tokenizer::Encoder>>,
    /// A reranker: a judgement's answer is "yes" or "no".
    reranker: bool,
    /// What the plan knows of the model.
    profile: crate::plan::profile::Profile,
    /// The prompts whose prefill it keeps (its conversation snapshots).
    snapshots: prefill::Snapshots,
    /// Whether the model keeps snapshots (its `snapshots` setting).
    keeps_snapshots: bool,
}

/// The mock model's context, in tokens, unless a `[[models]]` entry sets
/// `max_context_len`: large, as an agent's prompts are. Its tokenizer
/// counts a token a byte (it has no merges), so this holds a prompt of
/// `limits.max_prompt_bytes`' default.
pub const MOCK_CONTEXT_LEN: u32 = 262_144;

/// Longest natural length a directive may ask for.
const MAX_LENGTH: u64 = 1_000_000;

const WORDS: &[&str] = &[
    "the",
    "NPU",
    "streams",
    "tokens",
    "quickly",
    "to",
    "every",
    "client",
    "héllo",
    "naïve",
    "café",
    "Zürich",
    "smörgåsbord",
    "ñandú",
    "東京",
    "数据",
    "こんにちは",
    "模型",
    "🦀",
    "🚀",
    "👋🏽",
    "🎉",
    "Ωμέγα",
    "Привет",
    "board",
    "orange",
    "rock",
    "small",
    "fast",
    "binary",
    "and",
    "with",
    "a",
];

#[derive(Debug, Default, PartialEq, Eq)]
struct Directives {
    length: Option<u64>,
    error_after: Option<u64>,
    prefill_ms: Option<u64>,
    tool_call: bool,
    crash_after: Option<u64>,
    stall_after: Option<u64>,
    /// `echo=1`: where the text to repeat starts (just after the directive).
    echo_from: Option<usize>,
    /// `think=1`: the reply opens a `<think>` block; `think=2`: the
    /// template opened it, the reply only closes it (`</think>`).
    think: Option<u64>,
    /// `think_words=N`: the thinking block's words (6 to 11 otherwise).
    think_words: Option<u64>,
}

/// The most words `think_words` may ask for.
const MAX_THINK_WORDS: u64 = 100_000;

fn parse_directives(prompt: &str) -> Result<Directives, String> {
    let mut found = Directives::default();
    let mut rest = prompt;
    while let Some(start) = rest.find("@mock(") {
        let after = &rest[start + "@mock(".len()..];
        let Some(end) = after.find(')') else {
            return Err("unterminated `@mock(` directive".into());
        };
        let closed = prompt.len() - after.len() + end + 1;
        for pair in after[..end]
            .split(',')
            .map(str::trim)
            .filter(|p| !p.is_empty())
        {
            let (key, value) = pair
                .split_once('=')
                .ok_or_else(|| format!("mock directive `{pair}` must be key=value"))?;
            let value: u64 = value.trim().parse().map_err(|_| {
                format!("mock directive `{key}` needs a whole number, got `{value}`")
            })?;
            match key.trim() {
                "length" if value <= MAX_LENGTH => found.length = Some(value),
                "length" => {
                    return Err(format!(
                        "mock directive `length` must be at most {MAX_LENGTH}"
                    ));
                }
                "error_after" => found.error_after = Some(value),
                "prefill_ms" => found.prefill_ms = Some(value.min(600_000)),
                "tool_call" => found.tool_call = value != 0,
                "crash_after" => found.crash_after = Some(value),
                "stall_after" => found.stall_after = Some(value),
                "echo" => found.echo_from = (value != 0).then_some(closed),
                "think" if value <= 2 => found.think = (value != 0).then_some(value),
                "think" => return Err("mock directive `think` must be 0, 1 or 2".into()),
                "think_words" if value <= MAX_THINK_WORDS => found.think_words = Some(value),
                "think_words" => {
                    return Err(format!(
                        "mock directive `think_words` must be at most {MAX_THINK_WORDS}"
                    ));
                }
                other => return Err(format!("unknown mock directive `{other}`")),
            }
        }
        rest = &after[end..];
    }
    Ok(found)
}

/// FNV-1a, 64 bit: a stable hash so the text does not change between
/// builds or platforms.
struct Fnv(u64);

impl Fnv {
    fn new() -> Self {
        Self(0xcbf2_9ce4_8422_2325)
    }
    fn bytes(&mut self, bytes: &[u8]) {
        for &b in bytes {
            self.0 ^= u64::from(b);
            self.0 = self.0.wrapping_mul(0x0000_0100_0000_01b3);
        }
        // Field separator, so ("ab","c") and ("a","bc") differ.
        self.0 ^= 0xff;
        self.0 = self.0.wrapping_mul(0x0000_0100_0000_01b3);
    }
    fn opt_f64(&mut self, v: Option<f64>) {
        match v {
            Some(v) => self.bytes(&v.to_bits().to_le_bytes()),
            None => self.bytes(b"-"),
        }
    }
}

fn seed_of(request: &ValidRunRequest) -> u64 {
    let mut h = Fnv::new();
    h.bytes(request.model.as_bytes());
    h.bytes(input_of(request).as_bytes());
    h.bytes(request.prompt.role.as_str().as_bytes());
    h.bytes(&[u8::from(request.prompt.thinking)]);
    let s = &request.sampling;
    for v in [
        s.temperature,
        s.top_p,
        s.repeat_penalty,
        s.frequency_penalty,
        s.presence_penalty,
    ] {
        h.opt_f64(v);
    }
    // Mirostat only when set, so that the text of every other request
    // stays what it was before the mock took it.
    for v in [s.mirostat.map(f64::from), s.mirostat_tau, s.mirostat_eta]
        .into_iter()
        .flatten()
    {
        h.bytes(&v.to_bits().to_le_bytes());
    }
    h.opt_f64(s.top_k.map(f64::from));
    // A seed picks among the words as a sampler's would; greedy sampling
    // (temperature 0) takes the likeliest whatever the seed. Only when
    // set, so that unseeded requests say what they said before.
    if let Some(seed) = s.seed.filter(|_| s.greedy() != Some(true)) {
        h.bytes(b"seed");
        h.bytes(&seed.to_le_bytes());
    }
    h.0
}

/// xorshift64*: small, fast, deterministic.
struct Rng(u64);

impl Rng {
    fn new(seed: u64) -> Self {
        Self(seed | 1)
    }
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }
    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
}

/// The token pieces of the next word (with its leading space), cut at
/// byte offsets that may fall inside a character.
fn next_word(rng: &mut Rng, first: bool, out: &mut Vec<Vec<u8>>) {
    out.clear();
    let word = WORDS[rng.below(WORDS.len() as u64) as usize];
    let mut bytes = Vec::with_capacity(word.len() + 1);
    if !first {
        bytes.push(b' ');
    }
    bytes.extend_from_slice(word.as_bytes());
    split_pieces(rng, &bytes, out);
}

/// Cuts `bytes` into token pieces of 2–4 bytes.
fn split_pieces(rng: &mut Rng, bytes: &[u8], out: &mut Vec<Vec<u8>>) {
    let mut at = 0;
    while at < bytes.len() {
        let take = (2 + rng.below(3) as usize).min(bytes.len() - at);
        out.push(bytes[at..at + take].to_vec());
        at += take;
    }
}

/// What the mock model reads of a request: its prompt, and after it the
/// start of the reply to continue (an assistant message last), as a
/// runtime whose template opens the reply before it would have it.
fn input_of(request: &ValidRunRequest) -> std::borrow::Cow<'_, str> {
    match &request.prompt.prefill {
        Some(prefill) => format!("{}{prefill}", request.prompt.text).into(),
        None => request.prompt.text.as_str().into(),
    }
}

/// The token pieces of the next word of an echoed `text` (the word with
/// the spaces after it); returns the rest of the text.
fn next_echoed_word<'a>(rng: &mut Rng, text: &'a [u8], out: &mut Vec<Vec<u8>>) -> &'a [u8] {
    out.clear();
    let word = text
        .iter()
        .position(u8::is_ascii_whitespace)
        .unwrap_or(text.len());
    let end = word
        + text[word..]
            .iter()
            .take_while(|b| b.is_ascii_whitespace())
            .count();
    split_pieces(rng, &text[..end], out);
    &text[end..]
}

/// Keeps the first `tokens` pieces of a word, the last one extended to
/// the end of the character it would otherwise split.
fn cut_word(pieces: &mut Vec<Vec<u8>>, tokens: usize) {
    if tokens == 0 {
        pieces.clear();
        return;
    }
    let rest: Vec<u8> = pieces.drain(tokens..).flatten().collect();
    let last = pieces.last_mut().expect("tokens > 0");
    // Continuation bytes (0b10xx_xxxx) at the start of the rest belong to
    // the last kept piece's character.
    let carry = rest.iter().take_while(|&&b| b & 0xC0 == 0x80).count();
    last.extend_from_slice(&rest[..carry]);
}

/// The natural length of a reply, in tokens: an echo ends with its text
/// (no bound); otherwise `@mock(length=N)` or 16–63 from the request.
fn natural_length(directives: &Directives, seed: u64) -> u64 {
    match directives.echo_from {
        Some(_) => u64::MAX,
        None => directives.length.unwrap_or(16 + seed % 48),
    }
}

/// The mock's reply to a request as it writes it without a constraint,
/// word by word in token pieces: a thinking block when asked, then the
/// echoed text or its own words. The same request makes the same reply.
struct Reply<'a> {
    rng: Rng,
    /// The thinking block's words not yet given.
    thinking: std::vec::IntoIter<Vec<Vec<u8>>>,
    /// The echoed text not yet given (`None`: its own words).
    echo: Option<&'a [u8]>,
    first: bool,
}

impl<'a> Reply<'a> {
    fn new(request: &ValidRunRequest, directives: &Directives, input: &'a str, seed: u64) -> Self {
        let mut rng = Rng::new(seed);
        let thinking = directives
            .think
            .map(|shape| {
                thinking_words(
                    &mut rng,
                    shape,
                    request.prompt.thinking,
                    directives.think_words,
                )
            })
            .unwrap_or_default()
            .into_iter();
        Self {
            rng,
            thinking,
            echo: directives
                .echo_from
                .map(|at| input[at..].trim_start().as_bytes()),
            first: true,
        }
    }

    /// Tokens of the thinking block not yet given.
    fn thinking_tokens(&self) -> u64 {
        self.thinking.as_slice().iter().map(Vec::len).sum::<usize>() as u64
    }

    /// Whether the thinking block is still to come.
    fn thinking(&self) -> bool {
        !self.thinking.as_slice().is_empty()
    }

    /// Ends the thinking block now (its budget is spent): the closing tag
    /// is all that is left of it. Returns its tokens.
    fn close_thinking(&mut self) -> u64 {
        let close = self.thinking.as_slice().last().cloned().unwrap_or_default();
        let tokens = close.len() as u64;
        self.thinking = vec![close].into_iter();
        tokens
    }

    /// The next word's pieces, into `out`; false at the end of an echo.
    fn next_word(&mut self, out: &mut Vec<Vec<u8>>) -> bool {
        match (self.thinking.next(), &mut self.echo) {
            (Some(word), _) => *out = word,
            (None, None) => {
                next_word(&mut self.rng, self.first, out);
                self.first = false;
            }
            (None, Some([])) => return false,
            (None, Some(text)) => {
                *text = next_echoed_word(&mut self.rng, text, out);
                self.first = false;
            }
        }
        true
    }

    /// The echoed text not yet given, when it echoes.
    fn unsaid(&self) -> Option<&'a [u8]> {
        self.echo
    }

    /// The rest of the answer, after any thinking, as one text: `natural`
    /// tokens of it, the last word cut as a cap cuts it.
    fn answer_text(mut self, natural: u64) -> Vec<u8> {
        let mut pieces = Vec::new();
        let mut text = Vec::new();
        let mut tokens: u64 = 0;
        while tokens < natural && self.next_word(&mut pieces) {
            let room = natural - tokens;
            if pieces.len() as u64 > room {
                cut_word(&mut pieces, room as usize);
            }
            tokens += pieces.len() as u64;
            text.extend(pieces.concat());
        }
        text
    }
}

impl Runner for MockRunner {
    /// Emulates history reuse: a chat that continues what this model holds
    /// is "prefilled" (counted in `prompt_tokens`) for its new message
    /// only. The text depends on the whole prompt either way.
    fn generate(
        &mut self,
        request: &ValidRunRequest,
        sink: &mut TokenSink<'_>,
    ) -> Result<Generation, BackendError> {
        if let Some(spec) = request.embed {
            return Ok(mock_embedding(&request.prompt.text, spec));
        }
        if self.reranker
            && let Some((query, document)) = crate::model::rerank::parts(&request.prompt.text)
        {
            return Ok(self.judge(query, document, request, sink));
        }
        if request.clear_cache {
            self.conversation.reset();
            return Ok(Generation {
                kv_cache_tokens: Some(0),
                snapshots: None,
                idle_work: false,
                ..Generation::ended(FinishReason::Stop)
            });
        }
        let input = input_of(request);
        let directives = parse_directives(&input).map_err(|message| BackendError::Runtime {
            code: None,
            message,
        })?;
        let delay = Duration::from_millis(directives.prefill_ms.unwrap_or(self.config.prefill_ms));
        let prefilled = self.prefill(request, sink, delay);
        sink.set_prompt_tokens(prefilled.tokens);
        let mut result = if prefilled.left {
            Ok(Generation::ended(FinishReason::Abort))
        } else {
            self.produce(request, sink)
        };
        match (request.prompt.turns(), &result) {
            (Some(conversation), Ok(g))
                if g.finish_reason != FinishReason::Abort && sink.is_open() =>
            {
                let answer = crate::model::reasoning::answer_of(sink.produced(), self.reasoning);
                self.conversation.commit(conversation, &answer);
            }
            _ => self.conversation.reset(),
        }
        let ran = matches!(&result, Ok(g) if g.finish_reason != FinishReason::Abort);
        if let (Some(prompt), true) = (prefilled.keep, ran) {
            self.snapshots
                .keep(&prompt, false, request.prompt.keeping());
        }
        if let Ok(generation) = &mut result {
            if self.keeps_snapshots {
                generation.snapshots = Some(self.snapshots.report());
            }
            generation.prompt_reuse = Some(prefilled.reuse);
        }
        result
    }
}

/// Width of the mock's embeddings.
pub const MOCK_EMBEDDING_WIDTH: usize = 32;

/// The mock's "hidden layer" for `text`, as the RKLLM test double makes
/// it: one row per 4 bytes of the text (a token), element `d` of row `t`
/// being byte `(4t + d) mod len` divided by 255; then pooled as the model
/// says. Deterministic, so tests can compute the expected vector.
pub fn mock_hidden_rows(text: &str, width: usize) -> Vec<f32> {
    let bytes = text.as_bytes();
    let rows = bytes.len().div_ceil(4).max(1);
    let mut out = Vec::with_capacity(rows * width);
    for t in 0..rows {
        for d in 0..width {
            let byte = if bytes.is_empty() {
                0
            } else {
                bytes[(4 * t + d) % bytes.len()]
            };
            out.push(f32::from(byte) / 255.0);
        }
    }
    out
}

fn mock_embedding(text: &str, spec: crate::model::EmbeddingSpec) -> Generation {
    let rows = mock_hidden_rows(text, MOCK_EMBEDDING_WIDTH);
    let tokens = u32::try_from(rows.len() / MOCK_EMBEDDING_WIDTH).unwrap_or(u32::MAX);
    Generation {
        usage: Some(Usage {
            prompt_tokens: tokens,
            completion_tokens: 0,
            reasoning_tokens: 0,
        }),
        embedding: Some(spec.pool(&rows, MOCK_EMBEDDING_WIDTH)),
        ..Generation::ended(FinishReason::Stop)
    }
}

impl MockRunner {
    /// A reranker's answer to a judgement: one token, "yes" or "no"
    /// ([`logprobs::judgement`]), with its log probabilities when asked.
    fn judge(
        &mut self,
        query: &str,
        document: &str,
        request: &ValidRunRequest,
        sink: &mut TokenSink<'_>,
    ) -> Generation {
        let prefilled = request
            .prompt
            .tokens
            .map_or_else(|| self.count(&request.prompt.text), |t| t as usize);
        sink.set_prompt_tokens(u32::try_from(prefilled.max(1)).unwrap_or(u32::MAX));
        let mut answer = logprobs::judgement(query, document);
        let bytes = answer.bytes().to_vec();
        if let Some(top) = request.sampling.logprobs {
            answer.truncate_top(usize::from(top));
            sink.logprob(answer);
        }
        if !sink.token_bytes(&bytes) {
            return Generation::ended(FinishReason::Abort);
        }
        // A reranker goes on after its word; one token is all it is asked.
        Generation::ended(if request.max_tokens <= 1 {
            FinishReason::Length
        } else {
            FinishReason::Stop
        })
    }

    /// Tokens `text` is, by the model's tokenizer (an estimate of four
    /// bytes a token if it cannot be had).
    fn count(&mut self, text: &str) -> usize {
        if self.encoder.is_none() {
            self.encoder = crate::backend::vocabularies::load_encoder(&self.tokenizer).ok();
        }
        self.encoder
            .as_ref()
            .and_then(|encoder| encoder.count(text).ok())
            .unwrap_or_else(|| text.len().div_ceil(4))
    }

    fn produce(
        &mut self,
        request: &ValidRunRequest,
        sink: &mut TokenSink<'_>,
    ) -> Result<Generation, BackendError> {
        let input = input_of(request);
        let directives = parse_directives(&input).map_err(|message| BackendError::Runtime {
            code: None,
            message,
        })?;
        // A tool's result (role `tool`) is answered with text, not another
        // call; so is a request that offers no tools.
        let offers_tools = request.prompt.tools.is_some();
        if directives.tool_call && request.prompt.role == crate::model::Role::User && offers_tools {
            return tool_call(request, sink);
        }
        let seed = seed_of(request);
        // An echo ends with its text; otherwise the reply has a natural length.
        let natural = natural_length(&directives, seed);
        let mut reply = Reply::new(request, &directives, &input, seed);
        let cap = u64::from(request.max_tokens);

        // The prefill's wait was the plan's (`prefill`).
        let cancel = sink.cancel_token().clone();
        if let Some(constrained) = &request.constraint {
            return self.constrained(request, sink, constrained, reply, natural, seed);
        }

        let interval = (self.config.tokens_per_second > 0.0)
            .then(|| Duration::from_secs_f64(1.0 / self.config.tokens_per_second));
        let started = Instant::now();
        let mut pieces = Vec::new();
        let mut emitted: u64 = 0;
        // A thinking block before the answer, in pieces as a model's
        // tokens would cut it; its tokens count against the cap.
        let thinking_tokens = reply.thinking_tokens();
        // What the reply would take without the cap, and with it.
        let mut wanted = natural.saturating_add(thinking_tokens);
        let mut limit = wanted.min(cap);
        let budget = watch_budget(request, &directives, sink);
        let mut cut = false;
        let spent = |sink: &TokenSink<'_>| {
            budget.is_some_and(|b| sink.thinking() && u64::from(sink.thought()) >= b)
        };
        loop {
            if spent(sink) && reply.thinking_tokens() > 0 {
                // The budget is spent: close the block; the answer follows.
                let close = reply.close_thinking();
                wanted = emitted.saturating_add(close).saturating_add(natural);
                limit = wanted.min(cap);
            }
            if !reply.next_word(&mut pieces) {
                break;
            }
            // At the cap the word is cut after the last token that fits;
            // that token takes the rest of a character it would split, so
            // the count is exact and the text stays whole characters.
            let room = limit - emitted;
            cut = pieces.len() as u64 > room;
            if cut {
                cut_word(&mut pieces, room as usize);
            }
            for piece in &pieces {
                if self.config.isolated {
                    fail_process_if_asked(&directives, emitted);
                }
                if directives.error_after == Some(emitted) {
                    return Err(BackendError::Runtime {
                        code: Some(-1),
                        message: format!(
                            "mock runtime error injected by @mock(error_after={emitted})"
                        ),
                    });
                }
                if let Some(interval) = interval {
                    let due = started + interval.mul_f64((emitted + 1) as f64);
                    let wait = due.saturating_duration_since(Instant::now());
                    if !wait.is_zero() && cancel.wait_timeout(wait) {
                        return Ok(Generation::ended(FinishReason::Abort));
                    }
                }
                if let Some(top) = request.sampling.logprobs {
                    let greedy = request.sampling.greedy() == Some(true);
                    sink.logprob(logprobs::of(piece, top, seed, emitted, greedy));
                }
                emitted += 1;
                if !sink.token_bytes(piece) {
                    return Ok(Generation::ended(FinishReason::Abort));
                }
                if spent(sink) && reply.thinking() {
                    // The rest of this word is not thought.
                    break;
                }
            }
            if cut || emitted == limit {
                break;
            }
        }
        // An error point past the natural end fails at the end.
        if directives.error_after.is_some() {
            return Err(BackendError::Runtime {
                code: Some(-1),
                message: format!("mock runtime error injected by @mock(error_after={emitted})"),
            });
        }
        // Cut by the cap: the echo's text not all said, or the reply (its
        // thinking included) wanting more tokens than the cap gave.
        let finish_reason = match reply.unsaid() {
            Some(unsaid) if cut || !unsaid.is_empty() => FinishReason::Length,
            None if emitted >= cap && wanted > cap => FinishReason::Length,
            _ => FinishReason::Stop,
        };
        Ok(Generation::ended(finish_reason))
    }
}

/// A request's thinking budget, in tokens, with the sink told the reply's
/// shape to count its thinking (in a runner process the sink does not
/// separate thinking; the engine's does).
fn watch_budget(
    request: &ValidRunRequest,
    directives: &Directives,
    sink: &mut TokenSink<'_>,
) -> Option<u64> {
    let budget = request
        .sampling
        .thinking_budget
        .map(|b| u64::from(b.tokens));
    if budget.is_some() {
        sink.watch_thinking(match directives.think {
            Some(2) => ReasoningMode::Implicit,
            _ => ReasoningMode::Opened,
        });
    }
    budget
}

/// A value that fits `schema` with as little as it takes: an object with
/// its required properties only, each a placeholder in turn; an array
/// empty; an enum its first value; strings "test", numbers 1, booleans
/// true.
fn placeholder(schema: &serde_json::Value) -> serde_json::Value {
    use serde_json::{Value, json};
    if let Some(first) = schema
        .get("enum")
        .and_then(Value::as_array)
        .and_then(|e| e.first())
    {
        return first.clone();
    }
    if let Some(value) = schema.get("const") {
        return value.clone();
    }
    let kind = match schema.get("type") {
        Some(Value::Array(kinds)) => kinds.iter().find_map(Value::as_str).unwrap_or("string"),
        Some(Value::String(kind)) => kind.as_str(),
        _ if schema.get("properties").is_some() => "object",
        _ => "string",
    };
    match kind {
        "object" => {
            let required: Vec<&str> = schema
                .get("required")
                .and_then(Value::as_array)
                .map(|r| r.iter().filter_map(Value::as_str).collect())
                .unwrap_or_default();
            let properties = schema.get("properties").and_then(Value::as_object);
            let object: serde_json::Map<String, Value> = required
                .iter()
                .map(|key| {
                    let property = properties.and_then(|p| p.get(*key)).unwrap_or(&Value::Null);
                    ((*key).to_owned(), placeholder(property))
                })
                .collect();
            Value::Object(object)
        }
        "array" => json!([]),
        "number" | "integer" => json!(1),
        "boolean" => json!(true),
        "null" => Value::Null,
        _ => json!("test"),
    }
}

/// The pieces of a thinking block's words: `shape` 1 opens it with
/// `<think>`, 2 (the template opened it) only closes it. With thinking
/// off, the block is empty, as a model emits it then.
fn thinking_words(
    rng: &mut Rng,
    shape: u64,
    enabled: bool,
    length: Option<u64>,
) -> Vec<Vec<Vec<u8>>> {
    const THOUGHTS: &[&str] = &[
        "Let",
        "me",
        "think.",
        "The",
        "user",
        "asks",
        "something;",
        "the",
        "NPU",
        "answers",
        "with",
        "care",
        "and",
        "déjà-vu",
        "🤔",
    ];
    let mut words = Vec::new();
    let mut say = |text: &str, rng: &mut Rng| {
        let mut pieces = Vec::new();
        split_pieces(rng, text.as_bytes(), &mut pieces);
        words.push(pieces);
    };
    if shape == 1 {
        say("<think>\n", rng);
    }
    if enabled {
        let count = length.unwrap_or_else(|| 6 + rng.below(6));
        for i in 0..count {
            let word = THOUGHTS[rng.below(THOUGHTS.len() as u64) as usize];
            let text = if i == 0 {
                word.to_owned()
            } else {
                format!(" {word}")
            };
            say(&text, rng);
        }
    }
    say("\n</think>\n\n", rng);
    words
}

impl MockRunner {
    /// A constrained answer, made as the runtime and the runner make one
    /// on the NPU: thinking first when asked (`@mock(think=…)`), freely;
    /// then the mock proposes, token by token, the answer it would give
    /// without the constraint, and each token the constraint allows is
    /// kept as it is; a refused one is corrected (see [`constrained`]).
    fn constrained(
        &mut self,
        request: &ValidRunRequest,
        sink: &mut TokenSink<'_>,
        constrained: &crate::backend::Constrained,
        mut reply: Reply<'_>,
        natural: u64,
        seed: u64,
    ) -> Result<Generation, BackendError> {
        use crate::model::constraint::{Guide, SamplingParams};
        let failed = |message: String| BackendError::Runtime {
            code: None,
            message,
        };
        let vocabulary =
            crate::backend::vocabularies::load(&constrained.tokenizer).map_err(failed)?;
        self.vocabulary = Some(std::sync::Arc::clone(&vocabulary));
        let mut guide = Guide::new(&vocabulary, &constrained.constraint).map_err(failed)?;
        let s = &request.sampling;
        let params = SamplingParams {
            temperature: s.temperature.unwrap_or(0.0) as f32,
            top_p: s.top_p.unwrap_or(1.0) as f32,
            top_k: s.top_k.unwrap_or(0) as usize,
            repeat_penalty: s.repeat_penalty.unwrap_or(1.0) as f32,
            frequency_penalty: s.frequency_penalty.unwrap_or(0.0) as f32,
            presence_penalty: s.presence_penalty.unwrap_or(0.0) as f32,
        };
        let cap = u64::from(request.max_tokens);
        let interval = (self.config.tokens_per_second > 0.0)
            .then(|| Duration::from_secs_f64(1.0 / self.config.tokens_per_second));
        let cancel = sink.cancel_token().clone();
        let started = Instant::now();
        let mut emitted: u64 = 0;
        // Paced like any reply; false when it should stop.
        let mut emit = |bytes: &[u8], sink: &mut TokenSink<'_>| -> Option<FinishReason> {
            if emitted == cap {
                return Some(FinishReason::Length);
            }
            if let Some(interval) = interval {
                let due = started + interval.mul_f64((emitted + 1) as f64);
                let wait = due.saturating_duration_since(Instant::now());
                if !wait.is_zero() && cancel.wait_timeout(wait) {
                    return Some(FinishReason::Abort);
                }
            }
            emitted += 1;
            (!sink.token_bytes(bytes)).then_some(FinishReason::Abort)
        };
        let mut pieces = Vec::new();
        while reply.thinking() {
            reply.next_word(&mut pieces);
            for piece in &pieces {
                if let Some(end) = emit(piece, sink) {
                    return Ok(Generation::ended(end));
                }
            }
        }
        let mut writer = constrained::Writer::new(
            &vocabulary,
            reply.answer_text(natural),
            mock_logits(&vocabulary, seed),
            params,
            seed | 1,
        );
        while let Some(token) = writer.next(&mut guide).map_err(failed)? {
            guide.accept(token).map_err(failed)?;
            if let Some(end) = emit(vocabulary.bytes(token), sink) {
                return Ok(Generation::ended(end));
            }
        }
        Ok(Generation::ended(FinishReason::Stop))
    }
}

/// The mock model's logits for a constrained answer, which a correction
/// samples from where neither its own text nor a plausible value fits: a
/// model that wants to be done. The end token first, then a lone quote (closing a string), `}`
/// and `]`, then a comma (on to the next required member), then digits,
/// then shorter tokens; a little of the request's own noise on each, so
/// that requests differ where the constraint leaves a choice.
fn mock_logits(vocabulary: &crate::model::tokenizer::Vocabulary, seed: u64) -> Vec<f32> {
    let mut rng = Rng::new(seed);
    (0..vocabulary.len() as u32)
        .map(|token| {
            let bytes = vocabulary.bytes(token);
            let base = match bytes {
                _ if token == vocabulary.eos() => 100.0,
                b"\"" => 50.0,
                b"}" | b"]" => 40.0,
                _ if bytes.contains(&b',') => -3.0,
                [b'0'..=b'9', ..] => -5.0,
                _ => -5.0 - bytes.len() as f32,
            };
            base + (rng.below(1000) as f32 / 2000.0)
        })
        .collect()
}

/// `crash_after` and `stall_after`, which `check` admits only when this
/// code runs in a runner process: they fail that process the way a broken
/// runtime does (an `abort()`, or a run that never returns).
fn fail_process_if_asked(directives: &Directives, emitted: u64) {
    if directives.crash_after == Some(emitted) {
        eprintln!("mock runtime: aborting after {emitted} tokens (@mock(crash_after))");
        std::process::abort();
    }
    if directives.stall_after == Some(emitted) {
        eprintln!("mock runtime: stalling after {emitted} tokens (@mock(stall_after))");
        loop {
            std::thread::sleep(Duration::from_secs(3600));
        }
    }
}

/// `@mock(tool_call=1)`: answers with a call of the first offered tool,
/// in the `<tool_call>` form Qwen models use, with a value for each of its
/// required parameters only (see [`placeholder`]), so that an agent's
/// tools can be driven without looping.
fn tool_call(
    request: &ValidRunRequest,
    sink: &mut TokenSink<'_>,
) -> Result<Generation, BackendError> {
    let no_tools = || BackendError::Runtime {
        code: None,
        message: "@mock(tool_call=1) needs a request that offers tools".into(),
    };
    let tools: serde_json::Value =
        serde_json::from_str(request.prompt.tools.as_deref().ok_or_else(no_tools)?)
            .map_err(|_| no_tools())?;
    let function = tools
        .get(0)
        .and_then(|t| t.get("function"))
        .ok_or_else(no_tools)?;
    let name = function
        .get("name")
        .and_then(serde_json::Value::as_str)
        .unwrap_or("tool");
    let parameters = function
        .get("parameters")
        .cloned()
        .unwrap_or(serde_json::Value::Null);
    let arguments = placeholder(&parameters);
    let text = format!(
        "<tool_call>\n{}\n</tool_call>",
        serde_json::json!({"name": name, "arguments": arguments})
    );
    for piece in text.as_bytes().chunks(3) {
        if !sink.token_bytes(piece) {
            return Ok(Generation::ended(FinishReason::Abort));
        }
    }
    Ok(Generation::ended(FinishReason::Stop))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn directives_are_parsed_and_bad_ones_are_named() {
        assert_eq!(
            parse_directives("hi @mock(length=5, error_after=2) there").unwrap(),
            Directives {
                length: Some(5),
                error_after: Some(2),
                prefill_ms: None,
                tool_call: false,
                crash_after: None,
                stall_after: None,
                echo_from: None,
                think: None,
                think_words: None,
            }
        );
        assert_eq!(parse_directives("@mock(think=2)").unwrap().think, Some(2));
        assert_eq!(
            parse_directives("@mock(think=1,think_words=900)")
                .unwrap()
                .think_words,
            Some(900)
        );
        assert!(parse_directives("@mock(think_words=100001)").is_err());
        let schema = serde_json::json!({"type": "object", "required": ["cmd", "mode", "args", "opts"],
            "properties": {"cmd": {"type": "string"}, "mode": {"enum": ["fast", "slow"]},
                           "args": {"type": "array"}, "timeout": {"type": "integer"},
                           "opts": {"type": "object", "required": ["n"], "properties": {"n": {"type": "integer"}}}}});
        assert_eq!(
            placeholder(&schema),
            serde_json::json!({"cmd": "test", "mode": "fast", "args": [], "opts": {"n": 1}})
        );
        assert!(parse_directives("@mock(think=3)").is_err());
        let prompt = "say @mock(echo=1) <b>this</b>";
        let at = parse_directives(prompt).unwrap().echo_from.unwrap();
        assert_eq!(&prompt[at..], " <b>this</b>");
        assert_eq!(parse_directives("@mock(echo=0) x").unwrap().echo_from, None);
        assert_eq!(parse_directives("plain").unwrap(), Directives::default());
        assert!(
            parse_directives("@mock(colour=3)")
                .unwrap_err()
                .contains("colour")
        );
        assert!(
            parse_directives("@mock(length=x)")
                .unwrap_err()
                .contains("length")
        );
        assert!(parse_directives("@mock(length=1").is_err());
    }

    #[test]
    fn word_pieces_join_back_into_valid_text_and_some_split_characters() {
        let mut rng = Rng::new(42);
        let mut pieces = Vec::new();
        let mut split_seen = false;
        for i in 0..500 {
            next_word(&mut rng, i == 0, &mut pieces);
            let joined: Vec<u8> = pieces.concat();
            assert!(std::str::from_utf8(&joined).is_ok());
            split_seen |= pieces.iter().any(|p| std::str::from_utf8(p).is_err());
        }
        assert!(split_seen, "the mock must exercise split characters");
    }

    #[test]
    fn an_echoed_text_is_cut_into_pieces_word_by_word_and_joins_back() {
        let text = "<script>x</script>  ```rust\nfn é() {}\n```  🙂 end";
        let mut rng = Rng::new(7);
        let mut pieces = Vec::new();
        let mut rest = text.as_bytes();
        let mut joined = Vec::new();
        let mut words = 0;
        while !rest.is_empty() {
            rest = next_echoed_word(&mut rng, rest, &mut pieces);
            assert!(pieces.iter().all(|p| (1..=4).contains(&p.len())));
            joined.extend(pieces.concat());
            words += 1;
        }
        assert_eq!(joined, text.as_bytes());
        assert_eq!(words, 8);
    }

    /// Collects what a runner writes.
    struct Collected(parking_lot::Mutex<String>, crate::vocab::CancelToken);

    impl crate::backend::TokenOutput for Collected {
        fn push(&self, text: &str, _thinking: bool, _tokens: u32, _at: Option<u64>) -> bool {
            self.0.lock().push_str(text);
            true
        }
        fn stamp_now(&self) -> Option<u64> {
            None
        }
        fn set_prompt_tokens(&self, _tokens: u32) {}
        fn cancel_token(&self) -> &crate::vocab::CancelToken {
            &self.1
        }
    }

    /// The mock's answer to `prompt`, held to `constraint` if any, and how
    /// it ended.
    fn answer(
        prompt: &str,
        constraint: Option<crate::model::constraint::Constraint>,
    ) -> (String, FinishReason) {
        let backend = MockBackend::new(MockConfig {
            tokens_per_second: 0.0,
            prefill_ms: 0,
            lanes: 1,
            isolated: false,
        });
        let model = ModelSpec::named("mock");
        let mut runner = backend.load(&model).unwrap();
        let request = ValidRunRequest {
            prompt: crate::model::Prompt::plain(prompt),
            model: "mock".into(),
            max_tokens: 4000,
            max_tokens_requested: false,
            sampling: crate::model::Sampling::default(),
            images: Vec::new(),
            embed: None,
            clear_cache: false,
            refresh_snapshot: false,
            probe: None,
            stop: Vec::new(),
            constraint: constraint.map(|constraint| crate::backend::Constrained {
                constraint,
                tokenizer: TokenizerSource::Mock,
            }),
            lora: None,
        };
        let output = Collected(Default::default(), crate::vocab::CancelToken::new());
        let mut sink = TokenSink::new(&output, false);
        let generation = runner.generate(&request, &mut sink).unwrap();
        drop(sink);
        (output.0.into_inner(), generation.finish_reason)
    }

    #[test]
    fn under_a_constraint_it_proposes_the_answer_it_gives_without_one() {
        use crate::model::constraint::Constraint;
        let schema = serde_json::json!({"type": "object", "properties": {"name": {"type": "string"},
            "population": {"type": "integer"}}, "required": ["name", "population"]});
        let prompt = r#"@mock(echo=1) {"name": "Paris", "population": 2100000}"#;
        let (free, _) = answer(prompt, None);
        assert_eq!(free, r#"{"name": "Paris", "population": 2100000}"#);
        for constraint in [Constraint::JsonSchema(schema), Constraint::JsonObject] {
            assert_eq!(
                answer(prompt, Some(constraint)),
                (free.clone(), FinishReason::Stop)
            );
        }
        // Its default reply is free text: under JSON mode, the least
        // object, and it ends.
        let (text, end) = answer("Any object.", Some(Constraint::JsonObject));
        assert_eq!((text.as_str(), end), ("{}", FinishReason::Stop));
        // A date it must invent is a date.
        let dated = serde_json::json!({"type": "object", "properties": {"when": {"type": "string",
            "format": "date"}}, "required": ["when"]});
        let (text, end) = answer("When?", Some(Constraint::JsonSchema(dated)));
        assert_eq!(
            (text.as_str(), end),
            (r#"{"when": "2024-01-01"}"#, FinishReason::Stop)
        );
    }
}
