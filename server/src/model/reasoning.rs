//! Reasoning models think in `<think>…</think>` before they answer. The
//! [`ThinkSplitter`] separates that thinking from the answer while the
//! text streams, for the two shapes that occur:
//!
//! - [`ReasoningMode::Opened`] (Qwen3 and most): the reply itself opens
//!   with `<think>` (after optional white space). A reply that starts with
//!   anything else has no thinking; a `<think>` later in the answer is
//!   answer text.
//! - [`ReasoningMode::Implicit`] (the DeepSeek-R1 distills): the chat
//!   template has already opened the block, so the reply is thinking until
//!   `</think>` (a stray leading `<think>` is dropped).
//!
//! Tags may be split across tokens anywhere: a tail that may still become
//! a tag is held back. White space between `</think>` and the answer is
//! dropped, so an empty block (`<think>\n\n</think>\n\n`, what a model
//! emits with thinking switched off) shows nothing at all. An unterminated
//! block (the token cap reached while thinking) is all thinking.

/// The thinking budget, in tokens, that an API's effort level stands for
/// (OpenAI's `reasoning_effort` and `reasoning.effort`, Ollama's `think`
/// levels): `minimal` 256, `low` 1,024, `medium` 4,096, `high` 16,384,
/// `xhigh` 32,768; `max` (and any other level) has none.
pub fn effort_budget(level: &str) -> Option<u32> {
    match level {
        "minimal" => Some(256),
        "low" => Some(1024),
        "medium" => Some(4096),
        "high" => Some(16_384),
        "xhigh" => Some(32_768),
        _ => None,
    }
}

use serde::{Deserialize, Serialize};

const OPEN: &str = "<think>";
const CLOSE: &str = "</think>";

/// How a model's replies carry their thinking.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum ReasoningMode {
    /// No parsing: everything is answer text.
    Off,
    /// A reply that opens with `<think>` thinks until `</think>`.
    #[default]
    Opened,
    /// The template opened the block: the reply thinks until `</think>`.
    Implicit,
}

impl ReasoningMode {
    /// Whether a model thinks (the `thinking` capability clients show a
    /// switch for): implicit models do, and so do the families known to
    /// think in `<think>` blocks.
    pub fn thinks(self, model_name: &str) -> bool {
        let name = model_name.to_ascii_lowercase();
        match self {
            Self::Off => false,
            Self::Implicit => true,
            Self::Opened => ["qwen3", "qwq", "deepseek-r1", "r1-distill", "think"]
                .iter()
                .any(|family| name.contains(family)),
        }
    }

    /// The mode for a model by its setting (`auto`, `opened`, `implicit`,
    /// `off`) and, for `auto`, its name: the DeepSeek-R1 distills are
    /// implicit, every other model is read as `opened` (a model that does
    /// not think never starts a reply with the tag).
    ///
    /// # Errors
    /// An unknown setting.
    pub fn resolve(setting: &str, model_name: &str) -> Result<Self, String> {
        match setting {
            "auto" => {
                let name = model_name.to_ascii_lowercase();
                let r1 = name.contains("deepseek-r1")
                    || name.contains("r1-distill")
                    || name.contains("deepseek_r1");
                Ok(if r1 { Self::Implicit } else { Self::Opened })
            }
            "opened" => Ok(Self::Opened),
            "implicit" => Ok(Self::Implicit),
            "off" => Ok(Self::Off),
            other => Err(format!(
                "must be \"auto\", \"opened\", \"implicit\" or \"off\", got {other:?}"
            )),
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum State {
    /// Before the reply's first non-space text (`Opened`): is it the tag?
    Start,
    /// Inside the block.
    Thinking,
    /// Just after the block: white space is dropped.
    AfterBlock,
    /// The answer: passed through.
    Answer,
}

/// Splits streamed text into thinking and answer.
#[derive(Debug, Clone)]
pub struct ThinkSplitter {
    state: State,
    mode: ReasoningMode,
    held: String,
    /// Some thinking text has been seen (a stray opening tag can only
    /// come before it).
    thought: bool,
}

/// What one piece of text became.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Split {
    /// Thinking text (comes first).
    pub thinking: String,
    /// Answer text.
    pub answer: String,
}

/// The length of the longest tail of `text` that is a proper prefix of
/// `tag` (and so may still become it).
fn partial_tail(text: &str, tag: &str) -> usize {
    (1..tag.len().min(text.len() + 1))
        .rev()
        .find(|&n| {
            text.is_char_boundary(text.len() - n) && tag.starts_with(&text[text.len() - n..])
        })
        .unwrap_or(0)
}

impl ThinkSplitter {
    /// A splitter for one reply.
    pub fn new(mode: ReasoningMode) -> Self {
        let state = match mode {
            ReasoningMode::Off => State::Answer,
            ReasoningMode::Opened => State::Start,
            ReasoningMode::Implicit => State::Thinking,
        };
        Self {
            state,
            mode,
            held: String::new(),
            thought: false,
        }
    }

    /// Whether text pushed now would pass through as answer, unchanged (the
    /// thinking, if any, is over and nothing is held back).
    pub fn passes_through(&self) -> bool {
        self.state == State::Answer && self.held.is_empty()
    }

    /// Whether text pushed now would be thinking (for counting tokens).
    pub fn thinking(&self) -> bool {
        self.state == State::Thinking
    }

    /// Feeds a piece of text; appends what can be shown now to `out`.
    pub fn push(&mut self, text: &str, out: &mut Split) {
        if self.state == State::Answer && self.held.is_empty() {
            out.answer.push_str(text);
            return;
        }
        self.held.push_str(text);
        loop {
            match self.state {
                State::Answer => {
                    out.answer.push_str(&self.held);
                    self.held.clear();
                    return;
                }
                State::Start => {
                    let rest = self.held.trim_start();
                    if rest.is_empty() {
                        return;
                    }
                    if let Some(after) = rest.strip_prefix(OPEN) {
                        self.held = after.to_owned();
                        self.thought = false;
                        self.state = State::Thinking;
                    } else if let Some(after) = rest.strip_prefix(CLOSE) {
                        // The end of a block the template opened (a model
                        // of the implicit shape read as opened): empty.
                        self.held = after.to_owned();
                        self.state = State::AfterBlock;
                    } else if OPEN.starts_with(rest) || CLOSE.starts_with(rest) {
                        return;
                    } else {
                        self.state = State::Answer;
                    }
                }
                State::Thinking => {
                    if !self.thought {
                        // White space opening the block is dropped; a
                        // block of nothing else shows nothing.
                        let rest = self.held.trim_start();
                        if let Some(after) = rest.strip_prefix(CLOSE) {
                            self.held = after.to_owned();
                            self.state = State::AfterBlock;
                            continue;
                        }
                        let stray = self.mode == ReasoningMode::Implicit;
                        if rest.is_empty()
                            || CLOSE.starts_with(rest)
                            || (stray && OPEN.starts_with(rest) && rest != OPEN)
                        {
                            return;
                        }
                        // A model that opens the block although the
                        // template did: the tag is not thinking.
                        let rest = match rest.strip_prefix(OPEN).filter(|_| stray) {
                            Some(after) => after.trim_start(),
                            None => rest,
                        };
                        if rest.is_empty() {
                            self.held.clear();
                            return;
                        }
                        self.held = rest.to_owned();
                        self.thought = true;
                    }
                    if let Some(at) = self.held.find(CLOSE) {
                        out.thinking.push_str(self.held[..at].trim_end());
                        self.held.drain(..at + CLOSE.len());
                        self.state = State::AfterBlock;
                        continue;
                    }
                    // White space before the closing tag is dropped too:
                    // hold it until something follows it.
                    let tag = partial_tail(&self.held, CLOSE);
                    let before = &self.held[..self.held.len() - tag];
                    let keep = tag + (before.len() - before.trim_end().len());
                    let cut = self.held.len() - keep;
                    out.thinking.push_str(&self.held[..cut]);
                    self.held.drain(..cut);
                    return;
                }
                State::AfterBlock => {
                    let trimmed = self.held.trim_start();
                    if trimmed.is_empty() {
                        self.held.clear();
                        return;
                    }
                    self.held = trimmed.to_owned();
                    self.state = State::Answer;
                }
            }
        }
    }

    /// At the end: what is still held (an unterminated block is thinking;
    /// a partial tag that never completed is text of its kind).
    pub fn finish(&mut self, out: &mut Split) {
        let held = std::mem::take(&mut self.held);
        match self.state {
            State::Thinking if !self.thought => out.thinking.push_str(held.trim_start()),
            State::Thinking => out.thinking.push_str(&held),
            State::Start | State::Answer => out.answer.push_str(&held),
            State::AfterBlock => {}
        }
    }
}

/// The answer part of a whole reply (what a client was shown as content).
pub fn answer_of(reply: &str, mode: ReasoningMode) -> String {
    let mut splitter = ThinkSplitter::new(mode);
    let mut out = Split::default();
    splitter.push(reply, &mut out);
    splitter.finish(&mut out);
    out.answer
}

#[cfg(test)]
mod tests {
    use super::*;

    fn split(mode: ReasoningMode, pieces: &[&str]) -> (String, String) {
        let mut splitter = ThinkSplitter::new(mode);
        let mut out = Split::default();
        for piece in pieces {
            splitter.push(piece, &mut out);
        }
        splitter.finish(&mut out);
        (out.thinking, out.answer)
    }

    /// Every way of cutting `text` in two gives the same split.
    fn at_every_byte(mode: ReasoningMode, text: &str, thinking: &str, answer: &str) {
        for cut in 0..=text.len() {
            if !text.is_char_boundary(cut) {
                continue;
            }
            let got = split(mode, &[&text[..cut], &text[cut..]]);
            assert_eq!(
                got,
                (thinking.to_owned(), answer.to_owned()),
                "{mode:?} cut at {cut} of {text:?}"
            );
        }
        // And one character at a time.
        let chars: Vec<String> = text.chars().map(String::from).collect();
        let pieces: Vec<&str> = chars.iter().map(String::as_str).collect();
        assert_eq!(
            split(mode, &pieces),
            (thinking.to_owned(), answer.to_owned())
        );
    }

    #[test]
    fn an_opened_block_is_thinking_at_every_split() {
        at_every_byte(
            ReasoningMode::Opened,
            "<think>\nLet me see: 2+2.\n</think>\n\nIt is 4.",
            "Let me see: 2+2.",
            "It is 4.",
        );
        at_every_byte(
            ReasoningMode::Opened,
            "  <think>é</think>ünïcode",
            "é",
            "ünïcode",
        );
    }

    #[test]
    fn an_implicit_block_needs_only_its_closing_tag() {
        at_every_byte(
            ReasoningMode::Implicit,
            "Hmm, 2+2.\n</think>\n\nIt is 4.",
            "Hmm, 2+2.",
            "It is 4.",
        );
        // A model that opens it again anyway.
        at_every_byte(
            ReasoningMode::Implicit,
            "<think>Hmm.</think>Four.",
            "Hmm.",
            "Four.",
        );
    }

    #[test]
    fn an_empty_block_shows_nothing() {
        at_every_byte(
            ReasoningMode::Opened,
            "<think>\n\n</think>\n\nHello.",
            "",
            "Hello.",
        );
        at_every_byte(
            ReasoningMode::Implicit,
            "\n</think>\n\nHello.",
            "",
            "Hello.",
        );
        let (thinking, answer) = split(ReasoningMode::Opened, &["<think></think>Hi"]);
        assert_eq!((thinking.as_str(), answer.as_str()), ("", "Hi"));
    }

    #[test]
    fn a_closing_tag_at_the_start_ends_an_empty_block_the_template_opened() {
        at_every_byte(ReasoningMode::Opened, "\n</think>\n\nHello.", "", "Hello.");
        at_every_byte(ReasoningMode::Opened, "</b> is a tag", "", "</b> is a tag");
    }

    #[test]
    fn a_reply_without_a_block_and_later_tags_are_answer() {
        at_every_byte(
            ReasoningMode::Opened,
            "The tag <think> is HTML-like.",
            "",
            "The tag <think> is HTML-like.",
        );
        at_every_byte(ReasoningMode::Opened, "<thin", "", "<thin");
        at_every_byte(ReasoningMode::Opened, "<b>bold</b>", "", "<b>bold</b>");
        at_every_byte(
            ReasoningMode::Off,
            "<think>x</think>y",
            "",
            "<think>x</think>y",
        );
    }

    #[test]
    fn an_unterminated_block_is_all_thinking() {
        at_every_byte(
            ReasoningMode::Opened,
            "<think>first, consider</th",
            "first, consider</th",
            "",
        );
        at_every_byte(
            ReasoningMode::Implicit,
            "still thinking",
            "still thinking",
            "",
        );
        at_every_byte(ReasoningMode::Implicit, " <thi", "<thi", "");
    }

    #[test]
    fn modes_resolve_from_the_setting_and_the_name() {
        let r = ReasoningMode::resolve;
        assert_eq!(
            r("auto", "DeepSeek-R1-Distill-Qwen-1.5B_w8a8").unwrap(),
            ReasoningMode::Implicit
        );
        assert_eq!(r("auto", "qwen3-1.7b").unwrap(), ReasoningMode::Opened);
        assert_eq!(r("off", "qwen3").unwrap(), ReasoningMode::Off);
        assert_eq!(r("implicit", "x").unwrap(), ReasoningMode::Implicit);
        assert!(r("maybe", "x").is_err());
        assert_eq!(answer_of("<think>a</think>\nb", ReasoningMode::Opened), "b");
    }
}
