//! How the mock writes an answer held to a constraint, as the runtime and
//! the runner do on the NPU (`backend/rkllm/constrained.rs`): the model
//! proposes a token at each step, and the runner keeps it when the grammar
//! allows it, correcting only a token it refuses.
//!
//! The mock's proposals are the answer it gives without the constraint
//! (its echo, its words), cut into tokens of its vocabulary, each the
//! longest that starts what is left of the text. A proposal the grammar
//! allows is kept. A refused one is corrected, keeping as much of the
//! mock's text as fits:
//!
//! - white space the grammar does not want is left out (it writes its own);
//! - bytes the grammar forces are written, and the mock's text goes on
//!   after the part of them it had (a missing `{"name": ` is written, the
//!   value after it is the mock's);
//! - a value of the mock's text that does not fit where it stands is
//!   written as the schema's type asks when it can be (`5` where a string
//!   is due becomes `"5"`, `"5"` where a number is due becomes `5`), or
//!   replaced by a plausible value;
//! - a string of the mock's text the grammar stops in the middle is ended
//!   (closed, or completed into a plausible value: a date, an e-mail
//!   address) and the mock's text goes on after that string;
//! - where the mock's text has nothing that fits (free text where JSON is
//!   due, or its text has ended), the answer ends as soon as the grammar
//!   lets it: the end, a closing `}` or `]`, or else the first plausible
//!   value the grammar takes (see [`VALUE_FILLS`]: `"test"`, a date
//!   `2024-01-01`, a date-time, a time, an e-mail address, a URI, a UUID,
//!   IP addresses, a duration, numbers, booleans, `null`, `{}`, `[]`).
//!
//! Only when none of these fits does it sample among the allowed tokens,
//! from the logits of a model that wants to be done (`mock_logits`), until
//! its text or a plausible value fits again. What the grammar allows is
//! the engine's to say, so the answer is always valid; the proposals only
//! choose among what it allows.

use std::sync::Arc;

use crate::model::constraint::{Guide, SamplingParams, sample};
use crate::model::tokenizer::Vocabulary;

/// Values the mock writes where its own text cannot go on, in order of
/// preference; the first the grammar takes whole is written. The string
/// formats the engine follows each have one: a string in such a format
/// refuses the ones before it.
pub(super) const VALUE_FILLS: &[&str] = &[
    "\"test\"",
    "\"2024-01-01\"",
    "\"2024-01-01T00:00:00Z\"",
    "\"12:00:00Z\"",
    "\"user@example.com\"",
    "\"https://example.com\"",
    "\"00000000-0000-4000-8000-000000000000\"",
    "\"192.0.2.1\"",
    "\"2001:db8::1\"",
    "\"P1D\"",
    "1",
    "0",
    "true",
    "false",
    "null",
    "{}",
    "[]",
];

/// Endings of a string whose start is not a plausible value's: what makes
/// the common formats of it (an e-mail address, a URI).
const STRING_ENDINGS: &[&str] = &["@example.com", "://example.com"];

/// Corrections planned in a row without a token written, at most (then it
/// samples).
const MAX_REPLANS: usize = 16;

/// Where the answer so far stands: inside a JSON string (and that
/// string's content so far), inside a number, or between values.
#[derive(Debug, Default)]
struct Lexer {
    in_string: bool,
    escaped: bool,
    content: Vec<u8>,
    in_number: bool,
    /// The open objects (`true`) and arrays.
    open: Vec<bool>,
    /// Whether a string here would be an object's key.
    key_next: bool,
    /// Whether the open string is a key.
    in_key: bool,
}

impl Lexer {
    fn push(&mut self, bytes: &[u8]) {
        for &b in bytes {
            if !self.in_string {
                self.in_number = matches!(b, b'0'..=b'9' | b'-' | b'+' | b'.' | b'e' | b'E');
                match b {
                    b'"' => {
                        self.in_string = true;
                        self.in_key = self.key_next;
                        self.content.clear();
                    }
                    b'{' | b'[' => self.open.push(b == b'{'),
                    b'}' | b']' => {
                        self.open.pop();
                    }
                    _ => {}
                }
                if !b.is_ascii_whitespace() {
                    self.key_next = matches!(b, b'{' | b',') && self.open.last() == Some(&true);
                }
            } else if self.escaped {
                self.escaped = false;
                self.content.push(b);
            } else if b == b'\\' {
                self.escaped = true;
                self.content.push(b);
            } else if b == b'"' {
                self.in_string = false;
            } else {
                self.content.push(b);
            }
        }
    }
}

/// What a correction decided.
enum Step {
    /// Write this token.
    Token(u32),
    /// Look again (its text or its plan changed).
    Again,
    /// The answer is over.
    End,
}

/// Writes one constrained answer, token by token (see the module's doc).
pub(super) struct Writer {
    vocabulary: Arc<Vocabulary>,
    /// The answer it would give without the constraint.
    own: Vec<u8>,
    /// How much of `own` is behind it (written or left out).
    at: usize,
    /// A correction's text, written before its own goes on.
    plan: Vec<u8>,
    planned: usize,
    /// Whether the last token came from its own text.
    from_own: bool,
    /// Whether its own text waits for the string a correction opened to
    /// end (after a sampled token, or when its text goes on with JSON
    /// that is no string's content).
    paused: bool,
    lexer: Lexer,
    logits: Vec<f32>,
    params: SamplingParams,
    state: u64,
}

impl Writer {
    /// A writer of `own` (the mock's unconstrained answer), correcting
    /// from `logits` with `params` and the random `state`.
    pub(super) fn new(
        vocabulary: &Arc<Vocabulary>,
        own: Vec<u8>,
        logits: Vec<f32>,
        params: SamplingParams,
        state: u64,
    ) -> Self {
        Self {
            vocabulary: Arc::clone(vocabulary),
            own,
            at: 0,
            plan: Vec::new(),
            planned: 0,
            from_own: false,
            paused: false,
            lexer: Lexer::default(),
            logits,
            params,
            state,
        }
    }

    /// The next token of the answer (the caller takes it into `guide`), or
    /// `None` at its end.
    ///
    /// # Errors
    /// The engine's failure, or a grammar that allows nothing.
    pub(super) fn next(&mut self, guide: &mut Guide) -> Result<Option<u32>, String> {
        for _ in 0..MAX_REPLANS {
            if guide.is_done() {
                return Ok(None);
            }
            if self.planned < self.plan.len() {
                let plan = std::mem::take(&mut self.plan);
                let found = self.allowed_prefix(guide, &plan[self.planned..])?;
                self.plan = plan;
                if let Some((token, len)) = found {
                    self.planned += len;
                    return Ok(Some(self.took(token, false)));
                }
                self.plan.clear();
                self.planned = 0;
            }
            if !(self.paused && self.lexer.in_string) {
                let own = std::mem::take(&mut self.own);
                let found = self.allowed_prefix(guide, &own[self.at..])?;
                self.own = own;
                if let Some((token, len)) = found {
                    self.at += len;
                    self.paused = false;
                    return Ok(Some(self.took(token, true)));
                }
            }
            match self.correct(guide)? {
                Step::Token(token) => return Ok(Some(token)),
                Step::End => return Ok(None),
                Step::Again => {}
            }
        }
        match self.sampled(guide)? {
            Step::Token(token) => Ok(Some(token)),
            _ => Ok(None),
        }
    }

    /// Notes a token written.
    fn took(&mut self, token: u32, from_own: bool) -> u32 {
        self.lexer.push(self.vocabulary.bytes(token));
        self.from_own = from_own;
        token
    }

    /// The longest token the grammar allows that starts `bytes`, and its
    /// length.
    fn allowed_prefix(
        &self,
        guide: &mut Guide,
        bytes: &[u8],
    ) -> Result<Option<(u32, usize)>, String> {
        for token in self.vocabulary.prefix_tokens(bytes) {
            if guide.allows(token)? {
                return Ok(Some((token, self.vocabulary.bytes(token).len())));
            }
        }
        Ok(None)
    }

    /// Whether the grammar would take all of `text` from here. A number
    /// could go on: it must be followed by the end of its member or item.
    fn fits(&self, guide: &mut Guide, text: &[u8]) -> Result<bool, String> {
        let tokens = self.vocabulary.greedy_tokens(text);
        if tokens.is_empty()
            || tokens
                .iter()
                .map(|&t| self.vocabulary.bytes(t).len())
                .sum::<usize>()
                != text.len()
        {
            return Ok(false);
        }
        let open = matches!(text.last(), Some(b'0'..=b'9' | b'.'));
        if !open {
            return Ok(guide.validates(&tokens)? == tokens.len());
        }
        for end in [b"}", b",", b"]"] {
            let mut then = tokens.clone();
            then.extend(self.vocabulary.greedy_tokens(end));
            if guide.validates(&then)? == then.len() {
                return Ok(true);
            }
        }
        Ok(false)
    }

    /// The first of `candidates` the grammar takes whole, planned.
    fn plan_first(
        &mut self,
        guide: &mut Guide,
        candidates: impl IntoIterator<Item = Vec<u8>>,
    ) -> Result<bool, String> {
        for candidate in candidates {
            if self.fits(guide, &candidate)? {
                self.plan = candidate;
                self.planned = 0;
                return Ok(true);
            }
        }
        Ok(false)
    }

    /// Corrects a step where its own text does not fit (see the module's
    /// doc for the order).
    fn correct(&mut self, guide: &mut Guide) -> Result<Step, String> {
        let rest = &self.own[self.at..];
        // The grammar writes its own white space.
        if !self.lexer.in_string && rest.first().is_some_and(u8::is_ascii_whitespace) {
            self.at += rest.iter().take_while(|b| b.is_ascii_whitespace()).count();
            return Ok(Step::Again);
        }
        // Its string cannot go on: the rest of it is left out.
        if self.lexer.in_string && self.from_own {
            self.at += string_end(rest);
            self.from_own = false;
        }
        let rest = &self.own[self.at..];
        if rest.is_empty() && guide.may_end()? {
            return Ok(Step::End);
        }
        // Free text before JSON: the JSON, where it fits.
        if !self.lexer.in_string && value_len(rest).is_none() && self.jump_to_json(guide)? {
            return Ok(Step::Again);
        }
        let rest = &self.own[self.at..];
        let forced: Vec<u8> = guide
            .forced()
            .into_iter()
            .filter(|&t| !self.vocabulary.is_special(t))
            .flat_map(|t| self.vocabulary.bytes(t).to_vec())
            .collect();
        let own_value = (!self.lexer.in_string).then(|| value_len(rest)).flatten();
        let overlap = overlap_of(&forced, rest);
        if !forced.is_empty() && (own_value.is_none() || overlap > 0) {
            self.at += overlap;
            self.plan_forced(forced);
            return Ok(Step::Again);
        }
        if self.lexer.in_string {
            let endings = if self.lexer.in_key {
                vec![b"\"".to_vec()]
            } else {
                string_endings(&self.lexer.content)
            };
            if self.plan_first(guide, endings)? {
                return Ok(Step::Again);
            }
            return self.sampled(guide);
        }
        if let Some(len) = own_value {
            // Its value does not fit here: as the type asks, or another.
            let value = rest[..len].to_vec();
            self.at += len;
            let candidates = coerced(&value)
                .into_iter()
                .chain(VALUE_FILLS.iter().map(|f| f.as_bytes().to_vec()));
            if self.plan_first(guide, candidates)? {
                return Ok(Step::Again);
            }
            if !forced.is_empty() {
                self.at += overlap_of(&forced, &self.own[self.at..]);
                self.plan_forced(forced);
                return Ok(Step::Again);
            }
        } else if !rest.trim_ascii_start().starts_with(b"}")
            && !rest.trim_ascii_start().starts_with(b"]")
            && !rest.trim_ascii_start().starts_with(b",")
        {
            // Free text with no JSON that fits: nothing of it.
            self.at = self.own.len();
        }
        // Nothing of its own fits: the least that does.
        if guide.may_end()? {
            return Ok(Step::End);
        }
        for closer in [b"}", b"]"] {
            if let Some(&token) = self.vocabulary.prefix_tokens(closer).first()
                && self.vocabulary.bytes(token) == closer
                && guide.allows(token)?
            {
                return Ok(Step::Token(self.took(token, false)));
            }
        }
        // (In a number, a value would only lengthen it.)
        if !self.lexer.in_number
            && self.plan_first(guide, VALUE_FILLS.iter().map(|f| f.as_bytes().to_vec()))?
        {
            return Ok(Step::Again);
        }
        self.sampled(guide)
    }

    /// Plans the bytes the grammar forces. When its own text goes on with
    /// JSON's punctuation (or is over), that is no content for a string
    /// they open.
    fn plan_forced(&mut self, forced: Vec<u8>) {
        let rest = self.own[self.at..].trim_ascii_start();
        if rest.is_empty() || matches!(rest[0], b',' | b':' | b'}' | b']') {
            self.paused = true;
        }
        self.plan = forced;
        self.planned = 0;
    }

    /// Skips its free text to the first JSON object or array in it whose
    /// start the grammar allows; false if there is none.
    fn jump_to_json(&mut self, guide: &mut Guide) -> Result<bool, String> {
        let own = std::mem::take(&mut self.own);
        let mut found = None;
        for at in later_values(&own[self.at..]) {
            if self.allowed_prefix(guide, &own[self.at + at..])?.is_some() {
                found = Some(at);
                break;
            }
        }
        self.own = own;
        if let Some(at) = found {
            self.at += at;
        }
        Ok(found.is_some())
    }

    /// A token sampled among the allowed ones.
    fn sampled(&mut self, guide: &mut Guide) -> Result<Step, String> {
        self.paused = true;
        let eos = self.vocabulary.eos();
        let history = guide.tokens().to_vec();
        let mask = guide.mask()?;
        let token = sample(&self.logits, mask, &self.params, &history, &mut self.state)
            .ok_or_else(|| "the constraint allows no token".to_owned())?;
        if token == eos {
            return Ok(Step::End);
        }
        Ok(Step::Token(self.took(token, false)))
    }
}

/// Bytes of `rest` up to the end of the string it is inside (its closing
/// quote included), or all of it.
fn string_end(rest: &[u8]) -> usize {
    let mut escaped = false;
    for (i, &b) in rest.iter().enumerate() {
        match b {
            _ if escaped => escaped = false,
            b'\\' => escaped = true,
            b'"' => return i + 1,
            _ => {}
        }
    }
    rest.len()
}

/// The longest end of `forced` that `rest` starts with (white space in
/// `rest` before it aside): what of the forced text the mock had.
fn overlap_of(forced: &[u8], rest: &[u8]) -> usize {
    let lead = rest.iter().take_while(|b| b.is_ascii_whitespace()).count();
    let body = &rest[lead..];
    (1..=forced.len().min(body.len()))
        .rev()
        .find(|&k| forced.ends_with(&body[..k]))
        .map_or(0, |k| lead + k)
}

/// The length of the JSON value `text` starts with (white space before it
/// included), if it starts with one.
fn value_len(text: &[u8]) -> Option<usize> {
    let mut values =
        serde_json::Deserializer::from_slice(text).into_iter::<serde::de::IgnoredAny>();
    match values.next() {
        Some(Ok(_)) => Some(values.byte_offset()),
        _ => None,
    }
}

/// Where JSON objects and arrays start in free text.
fn later_values(text: &[u8]) -> impl Iterator<Item = usize> + '_ {
    text.iter()
        .enumerate()
        .filter(|(_, b)| matches!(b, b'{' | b'['))
        .map(|(i, _)| i)
        .filter(|&i| value_len(&text[i..]).is_some())
        .take(8)
}

/// A value written as another type asks: a number, boolean or null as a
/// string, a string that holds one as the value itself, a whole float as
/// an integer.
fn coerced(value: &[u8]) -> Vec<Vec<u8>> {
    use serde_json::Value;
    let Ok(parsed) = serde_json::from_slice::<Value>(value) else {
        return Vec::new();
    };
    let mut out = Vec::new();
    match &parsed {
        Value::Number(n) => {
            if let Some(f) = n.as_f64()
                && f.fract() == 0.0
                && f.abs() < 1e15
                && !n.is_i64()
                && !n.is_u64()
            {
                out.push(format!("{}", f as i64).into_bytes());
            }
            out.push(format!("\"{n}\"").into_bytes());
        }
        Value::Bool(_) | Value::Null => out.push(format!("\"{parsed}\"").into_bytes()),
        Value::String(s) => {
            if let Ok(inner @ (Value::Number(_) | Value::Bool(_) | Value::Null)) =
                serde_json::from_str::<Value>(s.trim())
            {
                out.push(inner.to_string().into_bytes());
            }
        }
        _ => {}
    }
    out
}

/// Ways to end a string whose content so far is `content`: completing a
/// plausible value it is the start of, closing it (before the plausible
/// values when it has content), or a format's ending.
fn string_endings(content: &[u8]) -> Vec<Vec<u8>> {
    let mut out = Vec::new();
    if !content.is_empty() {
        out.push(b"\"".to_vec());
    }
    for fill in VALUE_FILLS {
        if let Some(inner) = fill.strip_prefix('"').and_then(|f| f.strip_suffix('"'))
            && inner.len() > content.len()
            && inner.as_bytes().starts_with(content)
        {
            let mut ending = inner.as_bytes()[content.len()..].to_vec();
            ending.push(b'"');
            out.push(ending);
        }
    }
    if content.is_empty() {
        out.push(b"\"".to_vec());
    } else {
        for ending in STRING_ENDINGS {
            out.push(format!("{ending}\"").into_bytes());
        }
    }
    out
}

#[cfg(test)]
mod tests;
