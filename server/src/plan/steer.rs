//! How a constrained answer is held on the NPU, one logits row at a time.
//!
//! The runtime runs in logits mode (`RKLLM_INFER_GET_LOGITS`): each
//! callback carries the next token's distribution (the last row) and, as
//! far as this scheme assumes, the runtime's own pick from it (`token_id`),
//! not yet decoded. [`Steering::step`] answers each row:
//!
//! - the pick is allowed: it stands, and the callback returns 0, so the
//!   runtime decodes it and goes on by itself ([`Step::Continue`]): no extra
//!   runtime call;
//! - the pick is not allowed (or is missing, past the tokenizer, or not
//!   plausible from the row): the runner samples an allowed token from the
//!   row with the request's settings, the callback returns 1 (pause, KV
//!   kept), and the next `rkllm_run` feeds it as token input
//!   ([`Step::Feed`]), followed in the same call by every token the grammar
//!   then forces;
//! - a pick that stands and is followed by [`FORCED_FEED_MIN`] or more
//!   forced tokens pauses too, and they are fed in one go with it: one
//!   prefill instead of as many decode steps;
//! - the answer is complete (only the end may follow), the token cap is
//!   reached or the request is gone: [`Step::End`], the callback returns 1.
//!
//! A reasoning model thinks freely first: its picks stand until the
//! thinking block closes (`</think>`), and white space after it passes;
//! the grammar holds the answer from its first token on. Every token's
//! text goes out through the request's sink, thinking included, so stop
//! strings, UTF-8 assembly and tool-call parsing see it as free text.
//!
//! Whatever the runtime does, the text written is only ever tokens the
//! grammar accepted: a runtime that behaves otherwise than assumed can
//! cost more runs or a worse answer, never an answer that breaks its
//! schema.

use std::sync::Arc;

use toktrie::SimpleVob;

use crate::model::constraint::{Constraint, Guide, SamplingParams, sample};
use crate::model::reasoning::ReasoningMode;
use crate::model::tokenizer::Vocabulary;

/// Forced tokens after a standing pick that are worth a pause to feed them
/// in one go (fewer are left to the runtime, whose picks will likely be
/// them).
pub const FORCED_FEED_MIN: usize = 2;

/// How many ids a logits row may hold past the tokenizer's: the padding of
/// a model's embedding table (Qwen's rows are 151,936 wide, its
/// tokenizer.json has 151,665 tokens). Those ids are never allowed.
pub const ROW_PADDING_MAX: usize = 1024;

/// Implausible picks after which a runner stops trusting the runtime's
/// picks for good and chooses every constrained token itself.
const IMPLAUSIBLE_MAX: u32 = 3;

/// The rank a pick may have when the runtime's top-k does not bound it.
const UNBOUNDED_RANK: usize = 1024;

/// White-space tokens passed between the thinking and the answer.
const AFTER_BLOCK_MAX: u32 = 8;

const OPEN: &[u8] = b"<think>";
const CLOSE: &[u8] = b"</think>";

/// One callback's logits: `count` rows of `width` values.
#[derive(Debug, Clone, Copy)]
pub struct Logits<'a> {
    pub rows: &'a [f32],
    pub width: usize,
    pub count: usize,
}

impl Logits<'_> {
    /// The last row: the next token's distribution.
    pub fn last_row(&self) -> &[f32] {
        let start = self.width * (self.count - 1);
        &self.rows[start..start + self.width]
    }
}

/// What to do after a row.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Step {
    /// The runtime's pick stands: let it decode and go on.
    Continue,
    /// Pause; the next run feeds these tokens (already written out).
    Feed(Vec<u32>),
    /// The generation is over.
    End(Ending),
}

/// Why a constrained generation ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Ending {
    /// The answer is complete.
    Complete,
    /// The request's token cap.
    Length,
    /// The request went away (or a stop string ended it).
    Closed,
}

/// What a run's callbacks decided, for the run loop.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Outcome {
    Feed(Vec<u32>),
    End(Ending),
    /// The logits rows are `width` wide: not this tokenizer's.
    Mismatch(usize),
    Failed(String),
}

/// The callback's answer to the runtime.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RowAnswer {
    /// Return 0.
    Continue,
    /// Return 1.
    Pause,
    /// The runtime did not pause when asked: abort the run.
    Abort,
}

/// Counts of one constrained generation, for the log and the benchmark.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct Counts {
    /// Rows answered (callbacks with logits).
    pub rows: u64,
    /// Runtime picks that stood.
    pub stood: u64,
    /// Tokens the runner chose instead of the runtime.
    pub corrected: u64,
    /// Forced tokens fed in one go.
    pub forced: u64,
    /// Runs after the first (each feeds tokens).
    pub feeds: u64,
    /// Picks not trusted for not ranking among the row's likely tokens.
    pub implausible: u64,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Phase {
    /// A reply that may open a thinking block.
    Start,
    /// Inside the block: free.
    Thinking,
    /// After it: white space passes.
    AfterBlock,
    /// The answer: the grammar holds it.
    Answer,
}

/// One constrained generation's state.
pub struct Steering {
    guide: Guide,
    vocabulary: Arc<Vocabulary>,
    params: SamplingParams,
    rng: u64,
    cap: u32,
    emitted: u32,
    phase: Phase,
    /// The end of the thinking so far (to find the closing tag).
    tail: Vec<u8>,
    after_block: u32,
    /// Tokens a free pick may be (all but the end and special ones), made
    /// on first need.
    free: Option<SimpleVob>,
    /// The vocabulary's `</think>` token, looked up on first need.
    close: Option<Option<u32>>,
    /// Whether the runtime's picks are taken as its next token.
    trust: bool,
    /// Rank within its row under which a pick is plausible.
    plausible_rank: usize,
    /// Implausible picks seen by the runner before this generation.
    implausible_before: u32,
    width_checked: bool,
    prompt_rows: Option<usize>,
    outcome: Option<Outcome>,
    pub counts: Counts,
}

impl std::fmt::Debug for Steering {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Steering")
            .field("phase", &self.phase)
            .field("emitted", &self.emitted)
            .field("cap", &self.cap)
            .field("trust", &self.trust)
            .field("counts", &self.counts)
            .finish_non_exhaustive()
    }
}

/// The settings of one constrained generation.
#[derive(Debug)]
pub struct SteerSettings {
    pub mode: ReasoningMode,
    pub params: SamplingParams,
    /// The runtime's own top-k (how far from the top its pick may rank).
    pub runtime_top_k: i32,
    pub seed: u64,
    pub cap: u32,
    /// Implausible picks the runner has seen (none trusted from
    /// [`IMPLAUSIBLE_MAX`] on).
    pub implausible: u32,
}

/// That a logits row of `width` values fits a tokenizer of `tokens`.
///
/// # Errors
/// A row shorter than the tokenizer, or longer by more than the padding
/// models have.
pub fn check_width(width: usize, tokens: usize) -> Result<(), String> {
    if width < tokens {
        return Err(format!(
            "the runtime's logits rows hold {width} tokens, fewer than the tokenizer's {tokens}"
        ));
    }
    if width - tokens > ROW_PADDING_MAX {
        return Err(format!(
            "the runtime's logits rows hold {width} tokens, {} more than the tokenizer's {tokens} \
             (a model's padding is at most {ROW_PADDING_MAX})",
            width - tokens
        ));
    }
    Ok(())
}

/// Where `CLOSE` ends in `tail` + `bytes`, counted in `bytes`, when it
/// does.
fn close_end(tail: &[u8], bytes: &[u8]) -> Option<usize> {
    let joined = [tail, bytes].concat();
    let at = joined.windows(CLOSE.len()).position(|w| w == CLOSE)?;
    Some((at + CLOSE.len()).saturating_sub(tail.len()))
}

impl Steering {
    /// A generation held to `constraint`.
    ///
    /// # Errors
    /// A constraint the engine cannot compile.
    pub fn new(
        vocabulary: &Arc<Vocabulary>,
        constraint: &Constraint,
        settings: &SteerSettings,
    ) -> Result<Self, String> {
        let k = usize::try_from(settings.runtime_top_k)
            .ok()
            .filter(|&k| k > 0)
            .unwrap_or(UNBOUNDED_RANK);
        Ok(Self {
            guide: Guide::new(vocabulary, constraint)?,
            vocabulary: Arc::clone(vocabulary),
            params: settings.params,
            rng: settings.seed | 1,
            cap: settings.cap,
            emitted: 0,
            phase: match settings.mode {
                ReasoningMode::Off => Phase::Answer,
                ReasoningMode::Opened => Phase::Start,
                ReasoningMode::Implicit => Phase::Thinking,
            },
            tail: Vec::new(),
            after_block: 0,
            free: None,
            close: None,
            trust: settings.implausible < IMPLAUSIBLE_MAX,
            plausible_rank: (2 * k).max(8),
            implausible_before: settings.implausible,
            width_checked: false,
            prompt_rows: None,
            outcome: None,
            counts: Counts::default(),
        })
    }

    /// Implausible picks seen, this generation's included.
    pub fn implausible(&self) -> u32 {
        self.implausible_before
            .saturating_add(u32::try_from(self.counts.implausible).unwrap_or(u32::MAX))
    }

    /// Rows the first callback held: the prompt's tokens.
    pub fn prompt_rows(&self) -> Option<usize> {
        self.prompt_rows
    }

    /// Tokens written out.
    pub fn emitted(&self) -> u32 {
        self.emitted
    }

    /// What the last run's callbacks decided (taken).
    pub fn take_outcome(&mut self) -> Option<Outcome> {
        self.outcome.take()
    }

    /// Answers one callback of a logits run.
    pub fn on_row(
        &mut self,
        logits: Option<Logits<'_>>,
        token: i32,
        emit: &mut dyn FnMut(&[u8]) -> bool,
    ) -> RowAnswer {
        if self.outcome.is_some() {
            self.outcome = Some(Outcome::Failed(
                "the runtime went on after its callback returned 1 (pause), which structured \
                 output needs"
                    .into(),
            ));
            return RowAnswer::Abort;
        }
        let Some(logits) = logits.filter(|l| l.count > 0 && l.width > 0) else {
            self.outcome = Some(Outcome::Failed(
                "the runtime sent no logits row in logits mode".into(),
            ));
            return RowAnswer::Pause;
        };
        if !self.width_checked {
            if check_width(logits.width, self.vocabulary.len()).is_err() {
                self.outcome = Some(Outcome::Mismatch(logits.width));
                return RowAnswer::Pause;
            }
            self.width_checked = true;
        }
        self.prompt_rows.get_or_insert(logits.count);
        let pick = u32::try_from(token).ok();
        let step = self.step(logits.last_row(), pick, emit);
        let outcome = match step {
            Ok(Step::Continue) => return RowAnswer::Continue,
            Ok(Step::Feed(tokens)) => Outcome::Feed(tokens),
            Ok(Step::End(ending)) => Outcome::End(ending),
            Err(message) => Outcome::Failed(message),
        };
        self.outcome = Some(outcome);
        RowAnswer::Pause
    }

    /// Decides one step from the next token's distribution `row` and the
    /// runtime's pick from it (`None`: it gave none); writes each token
    /// taken to `emit` (false: stop).
    ///
    /// # Errors
    /// The engine's failure, or a grammar that allows nothing here.
    pub fn step(
        &mut self,
        row: &[f32],
        pick: Option<u32>,
        emit: &mut dyn FnMut(&[u8]) -> bool,
    ) -> Result<Step, String> {
        self.counts.rows += 1;
        // Ids past the tokenizer (a padded row) are never taken.
        let mut pick = pick.filter(|&p| (p as usize) < self.vocabulary.len());
        if let Some(p) = pick
            && !self.plausible(row, p)
        {
            pick = None;
        }
        match self.phase {
            Phase::Answer => self.guided(row, pick, emit),
            Phase::Thinking => self.think(row, pick, emit),
            Phase::Start => {
                let bytes = pick.map_or(&[][..], |p| self.vocabulary.bytes(p));
                if bytes.starts_with(OPEN) || bytes.starts_with(CLOSE) {
                    self.phase = Phase::Thinking;
                    self.think(row, pick, emit)
                } else {
                    self.phase = Phase::Answer;
                    self.guided(row, pick, emit)
                }
            }
            Phase::AfterBlock => match pick {
                Some(p) if self.blank(p) && self.after_block < AFTER_BLOCK_MAX => {
                    self.after_block += 1;
                    self.counts.stood += 1;
                    Ok(self.take_free(p, emit).map_or(Step::Continue, Step::End))
                }
                _ => {
                    self.phase = Phase::Answer;
                    self.guided(row, pick, emit)
                }
            },
        }
    }

    /// Whether the runtime's pick `p` ranks among the likely tokens of its
    /// row (as a pick sampled from it does): the first implausible picks
    /// are only corrected; from [`IMPLAUSIBLE_MAX`] on none is trusted.
    fn plausible(&mut self, row: &[f32], p: u32) -> bool {
        if !self.trust {
            return false;
        }
        let Some(&value) = row.get(p as usize) else {
            return false;
        };
        let limit = self.vocabulary.len().min(row.len());
        let above = row[..limit].iter().filter(|&&v| v > value).count();
        if above < self.plausible_rank {
            return true;
        }
        self.counts.implausible += 1;
        if self.implausible() >= IMPLAUSIBLE_MAX {
            self.trust = false;
            tracing::warn!(
                "the runtime's picks in logits mode do not rank among their rows' likely \
                 tokens: from now on this model's runner chooses every constrained token itself"
            );
        }
        false
    }

    fn blank(&self, p: u32) -> bool {
        let bytes = self.vocabulary.bytes(p);
        !self.vocabulary.is_special(p)
            && !bytes.is_empty()
            && bytes.iter().all(u8::is_ascii_whitespace)
    }

    /// Whether thinking may go on with `p`: not the end, and not a token
    /// that closes the block with answer text after the tag (which the
    /// grammar would not have seen).
    fn free_allows(&self, p: u32) -> bool {
        if p == self.vocabulary.eos() {
            return false;
        }
        let bytes = self.vocabulary.bytes(p);
        close_end(&self.tail, bytes)
            .is_none_or(|end| bytes[end..].iter().all(u8::is_ascii_whitespace))
    }

    /// The thinking phase: the runtime's picks stand; an end wanted here
    /// closes the block instead (with the vocabulary's `</think>` token).
    fn think(
        &mut self,
        row: &[f32],
        pick: Option<u32>,
        emit: &mut dyn FnMut(&[u8]) -> bool,
    ) -> Result<Step, String> {
        if let Some(p) = pick.filter(|&p| self.free_allows(p)) {
            self.counts.stood += 1;
            return Ok(self.take_free(p, emit).map_or(Step::Continue, Step::End));
        }
        let vocabulary = Arc::clone(&self.vocabulary);
        let close = *self.close.get_or_insert_with(|| {
            (0..vocabulary.len() as u32).find(|&t| vocabulary.bytes(t) == CLOSE)
        });
        let chosen = match (pick, close) {
            (Some(p), Some(close)) if p == self.vocabulary.eos() => close,
            _ => {
                let free = self.free.get_or_insert_with(|| {
                    let mut free = SimpleVob::alloc(vocabulary.len());
                    for t in 0..vocabulary.len() as u32 {
                        if !vocabulary.is_special(t) {
                            free.allow_token(t);
                        }
                    }
                    free
                });
                let sampled = sample(row, free, &self.params, &[], &mut self.rng)
                    .ok_or("the vocabulary has no token to think with")?;
                match close {
                    Some(close) if !self.free_allows(sampled) => close,
                    _ => sampled,
                }
            }
        };
        self.counts.corrected += 1;
        Ok(match self.take_free(chosen, emit) {
            Some(ending) => Step::End(ending),
            None => Step::Feed(vec![chosen]),
        })
    }

    /// Writes a free token; follows the thinking block's end.
    fn take_free(&mut self, p: u32, emit: &mut dyn FnMut(&[u8]) -> bool) -> Option<Ending> {
        if self.emitted >= self.cap {
            return Some(Ending::Length);
        }
        self.emitted += 1;
        let bytes = self.vocabulary.bytes(p);
        if self.phase == Phase::Thinking {
            if close_end(&self.tail, bytes).is_some() {
                self.phase = Phase::AfterBlock;
                self.tail.clear();
            } else {
                self.tail.extend_from_slice(bytes);
                let keep = self.tail.len().saturating_sub(CLOSE.len() - 1);
                self.tail.drain(..keep);
            }
        }
        (!emit(bytes)).then_some(Ending::Closed)
    }

    /// Takes `p` into the answer and writes it out.
    fn take(
        &mut self,
        p: u32,
        emit: &mut dyn FnMut(&[u8]) -> bool,
    ) -> Result<Option<Ending>, String> {
        if self.emitted >= self.cap {
            return Ok(Some(Ending::Length));
        }
        self.guide.accept(p)?;
        self.emitted += 1;
        Ok((!emit(self.vocabulary.bytes(p))).then_some(Ending::Closed))
    }

    /// Whether nothing but the end may follow.
    fn complete(&mut self) -> Result<bool, String> {
        self.guide.only_end_follows()
    }

    /// Takes `forced` (tokens the grammar forces now) into `fed`; an
    /// ending when the answer ends with them.
    fn take_forced(
        &mut self,
        forced: Vec<u32>,
        fed: &mut Vec<u32>,
        emit: &mut dyn FnMut(&[u8]) -> bool,
    ) -> Result<Option<Ending>, String> {
        for token in forced {
            if let Some(ending) = self.take(token, emit)? {
                return Ok(Some(ending));
            }
            self.counts.forced += 1;
            fed.push(token);
        }
        Ok(self.complete()?.then_some(Ending::Complete))
    }

    /// The answer: the pick stands when the grammar allows it; otherwise
    /// an allowed token is sampled from the row.
    fn guided(
        &mut self,
        row: &[f32],
        pick: Option<u32>,
        emit: &mut dyn FnMut(&[u8]) -> bool,
    ) -> Result<Step, String> {
        let eos = self.vocabulary.eos();
        if let Some(p) = pick {
            if p == eos && self.guide.may_end()? {
                return Ok(Step::End(Ending::Complete));
            }
            if p != eos && self.guide.allows(p)? {
                self.counts.stood += 1;
                if let Some(ending) = self.take(p, emit)? {
                    return Ok(Step::End(ending));
                }
                if self.complete()? {
                    return Ok(Step::End(Ending::Complete));
                }
                let forced = self.guide.forced();
                if forced.len() < FORCED_FEED_MIN {
                    return Ok(Step::Continue);
                }
                let mut fed = vec![p];
                if let Some(ending) = self.take_forced(forced, &mut fed, emit)? {
                    return Ok(Step::End(ending));
                }
                return Ok(Step::Feed(fed));
            }
        }
        let mask = self.guide.mask()?.clone();
        let chosen = sample(row, &mask, &self.params, self.guide.tokens(), &mut self.rng)
            .ok_or("the constraint allows no token here")?;
        if chosen == eos {
            return Ok(Step::End(Ending::Complete));
        }
        self.counts.corrected += 1;
        if let Some(ending) = self.take(chosen, emit)? {
            return Ok(Step::End(ending));
        }
        if self.complete()? {
            return Ok(Step::End(Ending::Complete));
        }
        let mut fed = vec![chosen];
        let forced = self.guide.forced();
        if let Some(ending) = self.take_forced(forced, &mut fed, emit)? {
            return Ok(Step::End(ending));
        }
        Ok(Step::Feed(fed))
    }
}

#[cfg(test)]
mod tests;
