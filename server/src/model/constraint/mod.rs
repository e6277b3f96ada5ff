//! Constrained generation: an answer held, token by token, to a grammar —
//! any JSON object, a JSON schema, or a call of one of the offered tools
//! with arguments valid against its schema. The engine is llguidance (the
//! one behind llama.cpp's and vLLM's JSON schemas), over the model's own
//! vocabulary read from its Hugging Face `tokenizer.json`.
//!
//! A runner that owns the sampling of a constrained request ([`Guide`])
//! asks, at each step, which tokens the grammar allows; it checks the
//! runtime's own pick against them and, when the pick is not allowed,
//! samples an allowed one from the step's logits with the request's
//! sampling settings ([`sample`]). Tokens the grammar forces are known in
//! advance and can be fed in one go ([`Guide::forced`]).
//!
//! Compiling a grammar costs milliseconds to hundreds of them, and a
//! compiled parser holds about [`BYTES_PER_SCHEMA_BYTE`] bytes per byte of
//! its schema. At most [`COMPILING_AT_ONCE`] compile at once (the others
//! wait), and compiled parsers are kept per vocabulary and grammar within
//! [`COMPILED_MAX_BYTES`] of that estimate (and [`COMPILED_KEPT`] entries;
//! least recently used dropped first), so a schema sent again starts at
//! once and memory stays bounded whatever schemas clients send.
//!
//! A schema no answer can meet (a `$ref` that leads only to references,
//! or a grammar that allows no first token) is refused when it is checked,
//! naming the `$ref` where there is one.

mod sampler;

use std::sync::Arc;

use llguidance::api::TopLevelGrammar;
use llguidance::{Matcher, TokenParser};
use parking_lot::Mutex;
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};
use toktrie::SimpleVob;

use super::tokenizer::Vocabulary;
pub use sampler::{SamplingParams, sample};

/// A function tool a forced call may name: its name and the JSON schema of
/// its arguments.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ToolSchema {
    /// The function's name.
    pub name: String,
    /// Its parameters' schema (an object schema; absent: any object).
    pub parameters: Value,
}

/// What the answer must be.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Constraint {
    /// Any JSON object.
    JsonObject,
    /// JSON valid against this schema.
    JsonSchema(Value),
    /// One call of one of these tools, written as the model writes calls
    /// (`<tool_call>{"name": …, "arguments": …}</tool_call>`), its
    /// arguments valid against the tool's schema.
    ToolCall(Vec<ToolSchema>),
}

/// JSON written one way: `", "` between items, `": "` after keys, no
/// other white space, so that a model cannot wander off into white space
/// and every answer reads the same.
fn compact(schema: &Value) -> Value {
    let mut schema = if schema.is_object() {
        schema.clone()
    } else {
        // `true` and the like: any JSON value.
        json!({})
    };
    if let Some(object) = schema.as_object_mut() {
        object.insert(
            "x-guidance".into(),
            json!({"whitespace_flexible": false, "item_separator": ", ", "key_separator": ": "}),
        );
    }
    schema
}

impl Constraint {
    /// The grammar llguidance compiles.
    pub fn grammar(&self) -> TopLevelGrammar {
        match self {
            Self::JsonObject => {
                TopLevelGrammar::from_json_schema(compact(&json!({"type": "object"})))
            }
            Self::JsonSchema(schema) => TopLevelGrammar::from_json_schema(compact(schema)),
            Self::ToolCall(tools) => {
                let calls: Vec<Value> = tools
                    .iter()
                    .map(|tool| {
                        let arguments = if tool.parameters.is_object() {
                            tool.parameters.clone()
                        } else {
                            json!({"type": "object"})
                        };
                        json!({
                            "type": "object",
                            "properties": {"name": {"const": tool.name}, "arguments": arguments},
                            "required": ["name", "arguments"],
                            "additionalProperties": false
                        })
                    })
                    .collect();
                let call = compact(&if calls.len() == 1 {
                    calls[0].clone()
                } else {
                    json!({"anyOf": calls})
                });
                TopLevelGrammar::from_lark(format!(
                    "start: \"<tool_call>\\n\" call \"\\n</tool_call>\"\ncall: %json {call}\n"
                ))
            }
        }
    }

    /// The key compiled parsers are kept under.
    fn key(&self) -> String {
        serde_json::to_string(self).unwrap_or_default()
    }

    /// Its size as JSON (the schemas it holds), which bounds what
    /// compiling it costs.
    pub fn schema_bytes(&self) -> usize {
        self.key().len()
    }
}

/// Compiled parsers, per vocabulary and constraint, least recently used
/// first, with the bytes each is counted for.
struct Compiled {
    entries: Vec<(u64, String, TokenParser, usize)>,
    bytes: usize,
}

/// Parsers kept, at most.
pub const COMPILED_KEPT: usize = 32;

/// Bytes the kept parsers may hold together (by [`compiled_bytes`]).
pub const COMPILED_MAX_BYTES: usize = 64 << 20;

/// What a compiled parser holds per byte of its grammar's text: measured
/// on llguidance 1.9 at 30 to 32 (enums of 1,000 to 50,000 values).
pub const BYTES_PER_SCHEMA_BYTE: usize = 32;

/// Grammars compiled at once; more wait their turn.
pub const COMPILING_AT_ONCE: usize = 2;

static COMPILED: Mutex<Compiled> = Mutex::new(Compiled {
    entries: Vec::new(),
    bytes: 0,
});

/// The memory a parser compiled from a grammar of `key_len` bytes is
/// counted for.
fn compiled_bytes(key_len: usize) -> usize {
    key_len.saturating_mul(BYTES_PER_SCHEMA_BYTE) + (256 << 10)
}

/// Compiles in progress, and their turn. Synchronous: compiles run on
/// blocking threads.
static COMPILING: (Mutex<usize>, parking_lot::Condvar) =
    (Mutex::new(0), parking_lot::Condvar::new());

/// A turn to compile, given back on drop.
struct Turn;

impl Turn {
    fn take() -> Self {
        let (count, turn) = &COMPILING;
        let mut count = count.lock();
        while *count >= COMPILING_AT_ONCE {
            turn.wait(&mut count);
        }
        *count += 1;
        Self
    }
}

impl Drop for Turn {
    fn drop(&mut self) {
        let (count, turn) = &COMPILING;
        *count.lock() -= 1;
        turn.notify_one();
    }
}

/// What the engine would let an answer break: `minProperties` above the
/// members a schema requires by name. The engine does not keep the names
/// of open members apart, so the model could meet the count by repeating
/// a name (`{"": "", "": ""}`), which a JSON parser reads as fewer members.
fn unheld(schema: &Value) -> Option<String> {
    match schema {
        Value::Object(object) => {
            if let Some(min) = object.get("minProperties").and_then(Value::as_u64) {
                let required = object
                    .get("required")
                    .and_then(Value::as_array)
                    .map_or(0, Vec::len) as u64;
                if min > required {
                    return Some(format!(
                        "`minProperties` {min} asks for members beyond the {required} required by \
                         name, and an answer could meet it only by repeating a name: list the \
                         members in `properties` and `required`"
                    ));
                }
            }
            object
                .iter()
                // Data, not schemas.
                .filter(|(key, _)| {
                    !matches!(key.as_str(), "enum" | "const" | "default" | "examples")
                })
                .find_map(|(_, value)| unheld(value))
        }
        Value::Array(items) => items.iter().find_map(unheld),
        _ => None,
    }
}

/// The first `$ref` of `schema` (a local one, `#…`) whose chain of
/// references comes back to itself without ever reaching a schema: no
/// value can meet it.
fn ref_cycle(root: &Value) -> Option<String> {
    fn target<'a>(root: &'a Value, reference: &str) -> Option<&'a Value> {
        let pointer = reference.strip_prefix('#')?;
        if pointer.is_empty() {
            return Some(root);
        }
        // JSON pointer escapes, and percent-encoded `$`.
        let pointer = pointer.replace("%24", "$");
        root.pointer(&pointer)
    }
    let mut stack = vec![root];
    let mut seen = 0usize;
    while let Some(value) = stack.pop() {
        // Deep or wide schemas are not walked without end.
        seen += 1;
        if seen > 100_000 {
            return None;
        }
        match value {
            Value::Object(object) => {
                if let Some(first) = object.get("$ref").and_then(Value::as_str) {
                    let mut chain = vec![first.to_owned()];
                    let mut at = first.to_owned();
                    while let Some(next) = target(root, &at)
                        .and_then(|t| t.get("$ref"))
                        .and_then(Value::as_str)
                    {
                        if chain.iter().any(|c| c == next) {
                            chain.push(next.to_owned());
                            return Some(format!(
                                "its `$ref` {first:?} leads only to references ({}), never to a \
                                 schema",
                                chain.join(" → ")
                            ));
                        }
                        chain.push(next.to_owned());
                        at = next.to_owned();
                    }
                }
                stack.extend(object.iter().filter_map(|(key, value)| {
                    (!matches!(key.as_str(), "enum" | "const" | "default" | "examples"))
                        .then_some(value)
                }));
            }
            Value::Array(items) => stack.extend(items),
            _ => {}
        }
    }
    None
}

impl Constraint {
    /// A `$ref` cycle no value can meet, in words for the client.
    fn ref_cycle(&self) -> Option<String> {
        match self {
            Self::JsonObject => None,
            Self::JsonSchema(schema) => ref_cycle(schema),
            Self::ToolCall(tools) => tools.iter().find_map(|tool| ref_cycle(&tool.parameters)),
        }
    }

    /// A part of the constraint an answer could satisfy only in a way its
    /// schema refuses, in words for the client.
    fn unheld(&self) -> Option<String> {
        match self {
            Self::JsonObject => None,
            Self::JsonSchema(schema) => unheld(schema),
            Self::ToolCall(tools) => tools.iter().find_map(|tool| unheld(&tool.parameters)),
        }
    }
}

/// A fresh parser of `constraint` over `vocabulary`, compiled once and
/// then cloned.
fn parser(vocabulary: &Arc<Vocabulary>, constraint: &Constraint) -> Result<TokenParser, String> {
    if let Some(reason) = constraint.unheld() {
        return Err(reason);
    }
    let key = constraint.key();
    let id = vocabulary.id();
    let lookup = || {
        // A short critical section: a lookup and a clone, no compiling.
        let mut compiled = COMPILED.lock();
        let at = compiled
            .entries
            .iter()
            .position(|(v, k, _, _)| *v == id && *k == key)?;
        let entry = compiled.entries.remove(at);
        let parser = entry.2.clone();
        compiled.entries.push(entry);
        Some(parser)
    };
    if let Some(parser) = lookup() {
        return Ok(parser);
    }
    if let Some(cycle) = constraint.ref_cycle() {
        return Err(cycle);
    }
    let turn = Turn::take();
    // Compiled by another request while this one waited?
    if let Some(parser) = lookup() {
        return Ok(parser);
    }
    let parser = vocabulary
        .factory()
        .create_parser(constraint.grammar())
        .map_err(|e| e.to_string())?;
    drop(turn);
    let bytes = compiled_bytes(key.len());
    if bytes <= COMPILED_MAX_BYTES {
        let mut compiled = COMPILED.lock();
        while !compiled.entries.is_empty()
            && (compiled.entries.len() >= COMPILED_KEPT
                || compiled.bytes + bytes > COMPILED_MAX_BYTES)
        {
            let (_, _, _, gone) = compiled.entries.remove(0);
            compiled.bytes -= gone;
        }
        compiled.bytes += bytes;
        compiled.entries.push((id, key, parser.clone(), bytes));
    }
    Ok(parser)
}

/// Bytes the kept parsers are counted for, and how many there are.
pub fn compiled_held() -> (usize, usize) {
    let compiled = COMPILED.lock();
    (compiled.bytes, compiled.entries.len())
}

/// Compiles `constraint` over `vocabulary` (kept for the generation that
/// follows): what a request is checked with before it is queued.
///
/// # Errors
/// What the engine cannot compile, in its words (the part of the schema).
pub fn check(vocabulary: &Arc<Vocabulary>, constraint: &Constraint) -> Result<(), String> {
    let parser = parser(vocabulary, constraint)?;
    // A grammar no answer can meet: nothing may come first.
    let mut matcher = Matcher::new(Ok(parser));
    let empty = match matcher.compute_mask() {
        Ok(mask) => mask.is_zero(),
        Err(_) => true,
    };
    if empty || matcher.is_error() {
        return Err("no answer can meet it: nothing may come first".into());
    }
    Ok(())
}

/// One constrained answer being generated.
pub struct Guide {
    matcher: Matcher,
    vocabulary: Arc<Vocabulary>,
    mask: Option<SimpleVob>,
    tokens: Vec<u32>,
}

impl std::fmt::Debug for Guide {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Guide")
            .field("tokens", &self.tokens.len())
            .finish_non_exhaustive()
    }
}

impl Guide {
    /// Starts an answer held to `constraint`.
    ///
    /// # Errors
    /// A constraint the engine cannot compile.
    pub fn new(vocabulary: &Arc<Vocabulary>, constraint: &Constraint) -> Result<Self, String> {
        let parser = parser(vocabulary, constraint)?;
        let matcher = Matcher::new(Ok(parser));
        if let Some(err) = matcher.get_error() {
            return Err(err);
        }
        Ok(Self {
            matcher,
            vocabulary: Arc::clone(vocabulary),
            mask: None,
            tokens: Vec::new(),
        })
    }

    /// The vocabulary it works over.
    pub fn vocabulary(&self) -> &Arc<Vocabulary> {
        &self.vocabulary
    }

    /// The tokens allowed next (computed once per step).
    ///
    /// # Errors
    /// The engine's failure.
    pub fn mask(&mut self) -> Result<&SimpleVob, String> {
        if self.mask.is_none() {
            let mask = self
                .matcher
                .compute_mask_or_eos()
                .map_err(|e| e.to_string())?;
            self.mask = Some(mask);
        }
        Ok(self.mask.get_or_insert_with(SimpleVob::new))
    }

    /// Whether `token` may come next. The step's mask answers when it is
    /// computed already; otherwise the engine checks the one token, which
    /// costs a walk of its bytes instead of one over the vocabulary.
    ///
    /// # Errors
    /// The engine's failure.
    pub fn allows(&mut self, token: u32) -> Result<bool, String> {
        if token as usize >= self.vocabulary.len() {
            return Ok(false);
        }
        if let Some(mask) = &self.mask {
            return Ok(mask.is_allowed(token));
        }
        if token == self.vocabulary.eos() {
            return Ok(self.mask()?.is_allowed(token));
        }
        let valid = self
            .matcher
            .validate_tokens(&[token])
            .map_err(|e| e.to_string())?;
        Ok(valid == 1)
    }

    /// Whether nothing but the end may follow: the answer is complete.
    /// The mask is computed only where the grammar may end.
    ///
    /// # Errors
    /// The engine's failure.
    pub fn only_end_follows(&mut self) -> Result<bool, String> {
        if self.is_done() {
            return Ok(true);
        }
        if !self.matcher.is_accepting().map_err(|e| e.to_string())? {
            return Ok(false);
        }
        let eos = self.vocabulary.eos();
        let mask = self.mask()?;
        Ok(mask.num_set() == 1 && mask.is_allowed(eos))
    }

    /// Takes `token` as the next of the answer.
    ///
    /// # Errors
    /// A token the grammar does not allow here.
    pub fn accept(&mut self, token: u32) -> Result<(), String> {
        self.mask = None;
        self.tokens.push(token);
        self.matcher.consume_token(token).map_err(|e| e.to_string())
    }

    /// The tokens the grammar forces next (none when it leaves a choice);
    /// not yet taken.
    pub fn forced(&mut self) -> Vec<u32> {
        let tokens = self.matcher.compute_ff_tokens();
        if !tokens.is_empty() {
            return tokens;
        }
        // The vocabulary comes without its tokenizer's merges, so the
        // engine does not cut forced bytes into tokens itself: they are cut
        // here, longest token first.
        let bytes = self.matcher.compute_ff_bytes();
        if bytes.is_empty() {
            return tokens;
        }
        self.vocabulary
            .factory()
            .tok_env()
            .tok_trie()
            .greedy_tokenize(&bytes)
    }

    /// How many of `tokens`, taken in turn from here, the grammar would
    /// allow (none is taken).
    ///
    /// # Errors
    /// The engine's failure.
    pub fn validates(&mut self, tokens: &[u32]) -> Result<usize, String> {
        if tokens.iter().any(|&t| t as usize >= self.vocabulary.len()) {
            return Ok(0);
        }
        self.matcher
            .validate_tokens(tokens)
            .map_err(|e| e.to_string())
    }

    /// Whether the answer is complete (nothing may follow it).
    pub fn is_done(&self) -> bool {
        self.matcher.is_stopped()
    }

    /// Whether the answer may end here (its end-of-text token is allowed).
    ///
    /// # Errors
    /// The engine's failure.
    pub fn may_end(&mut self) -> Result<bool, String> {
        let eos = self.vocabulary.eos();
        self.allows(eos)
    }

    /// The answer's tokens so far (for repetition penalties).
    pub fn tokens(&self) -> &[u32] {
        &self.tokens
    }
}

#[cfg(test)]
mod tests;
