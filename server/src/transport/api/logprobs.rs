//! Token log probabilities in the shapes of the APIs that report them,
//! written straight to JSON: a long answer's entries (up to `max_tokens`
//! of them, each with up to 20 alternatives) never become a `Value` each,
//! and a whole response carries them through [`Spliced`].

use std::fmt;

use axum::response::{IntoResponse, Response};
use serde::ser::{Serialize, SerializeMap, SerializeSeq, Serializer};
use serde_json::Value;

use crate::service::TokenLogprob;

/// A token's text as OpenAI writes it (see [`crate::service::token_text`]),
/// written without a string of its own.
struct Text<'a>(&'a [u8]);

impl fmt::Display for Text<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match std::str::from_utf8(self.0) {
            Ok(text) => f.write_str(text),
            Err(_) => {
                f.write_str("bytes:")?;
                self.0.iter().try_for_each(|b| write!(f, "\\x{b:02x}"))
            }
        }
    }
}

impl Serialize for Text<'_> {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(self)
    }
}

/// One token or alternative: `token`, `logprob`, its raw `bytes`, and
/// (a token only) the likeliest tokens at its place.
struct Token<'a> {
    bytes: &'a [u8],
    logprob: f32,
    top: Option<&'a TokenLogprob>,
}

impl Serialize for Token<'_> {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let mut map = s.serialize_map(Some(3 + usize::from(self.top.is_some())))?;
        map.serialize_entry("token", &Text(self.bytes))?;
        map.serialize_entry("logprob", &self.logprob)?;
        map.serialize_entry("bytes", self.bytes)?;
        if let Some(entry) = self.top {
            map.serialize_entry("top_logprobs", &Alternatives(entry))?;
        }
        map.end()
    }
}

struct Alternatives<'a>(&'a TokenLogprob);

impl Serialize for Alternatives<'_> {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_seq(self.0.top().map(|(bytes, logprob)| Token {
            bytes,
            logprob,
            top: None,
        }))
    }
}

/// A list of tokens in OpenAI's chat shape (Ollama's `logprobs` is the
/// same): each `token` (its text, or `bytes:\xNN…` when it is part of a
/// character), `logprob`, its raw `bytes`, and the likeliest tokens there
/// in `top_logprobs`.
pub struct Entries<'a>(pub &'a [TokenLogprob]);

impl Serialize for Entries<'_> {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_seq(self.0.iter().map(|e| Token {
            bytes: e.bytes(),
            logprob: e.logprob(),
            top: Some(e),
        }))
    }
}

/// OpenAI chat's `choices[].logprobs`.
pub struct Chat<'a>(pub &'a [TokenLogprob]);

impl Serialize for Chat<'_> {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let mut map = s.serialize_map(Some(2))?;
        map.serialize_entry("content", &Entries(self.0))?;
        map.serialize_entry("refusal", &())?;
        map.end()
    }
}

/// OpenAI text completions' `choices[].logprobs`, the first token's text
/// starting at `offset` in the completion.
pub struct Completion<'a> {
    /// The tokens.
    pub entries: &'a [TokenLogprob],
    /// Where the first one starts in the completion's text.
    pub offset: usize,
}

/// One token's alternatives as text completions give them: text to value.
struct AlternativesByText<'a>(&'a TokenLogprob);

impl Serialize for AlternativesByText<'_> {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let mut map = s.serialize_map(Some(self.0.top().len()))?;
        for (bytes, logprob) in self.0.top() {
            map.serialize_entry(&Text(bytes), &logprob)?;
        }
        map.end()
    }
}

impl Serialize for Completion<'_> {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let es = self.entries;
        let mut map = s.serialize_map(Some(4))?;
        map.serialize_entry("tokens", &Seq(|| es.iter().map(|e| Text(e.bytes()))))?;
        map.serialize_entry(
            "token_logprobs",
            &Seq(|| es.iter().map(TokenLogprob::logprob)),
        )?;
        map.serialize_entry("top_logprobs", &Seq(|| es.iter().map(AlternativesByText)))?;
        let offsets = || {
            es.iter().scan(self.offset, |at, e| {
                let start = *at;
                *at += e.bytes().len();
                Some(start)
            })
        };
        map.serialize_entry("text_offset", &Seq(offsets))?;
        map.end()
    }
}

/// A sequence made on demand by its closure.
struct Seq<F>(F);

impl<F, I> Serialize for Seq<F>
where
    F: Fn() -> I,
    I: Iterator,
    I::Item: Serialize,
{
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_seq((self.0)())
    }
}

/// `value` as JSON (a streamed chunk's few entries).
pub fn value(shape: &impl Serialize) -> Value {
    serde_json::to_value(shape).unwrap_or(Value::Null)
}

/// A step on the way to a field in a JSON document.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Step {
    /// An object's field.
    Key(&'static str),
    /// An array's element.
    At(usize),
}

/// A JSON document with fields set at paths (each ends with a
/// [`Step::Key`]) to values written straight to the output: a response
/// built as a `Value` carries its log probabilities without them being
/// one. A path that does not lead to an object leaves the document as it
/// is there.
pub struct Spliced<'a, T> {
    /// The document.
    pub value: &'a Value,
    /// Each field's path and value.
    pub fields: &'a [(Vec<Step>, T)],
}

impl<T: Serialize> Serialize for Spliced<'_, T> {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let all: Vec<&(Vec<Step>, T)> = self.fields.iter().collect();
        Node {
            value: self.value,
            depth: 0,
            fields: &all,
        }
        .serialize(s)
    }
}

struct Node<'a, 'b, T> {
    value: &'a Value,
    depth: usize,
    fields: &'b [&'a (Vec<Step>, T)],
}

impl<T: Serialize> Node<'_, '_, T> {
    /// The fields that go on below `step`.
    fn below(&self, step: Step) -> Vec<&(Vec<Step>, T)> {
        self.fields
            .iter()
            .copied()
            .filter(|(path, _)| path.len() > self.depth + 1 && path[self.depth] == step)
            .collect()
    }

    /// The field set at `key` here.
    fn here(&self, key: &str) -> Option<&T> {
        self.fields.iter().find_map(|(path, value)| {
            (path.len() == self.depth + 1 && matches!(path[self.depth], Step::Key(k) if k == key))
                .then_some(value)
        })
    }
}

impl<T: Serialize> Serialize for Node<'_, '_, T> {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        match self.value {
            Value::Object(object) => {
                let mut map = s.serialize_map(None)?;
                for (key, value) in object {
                    if let Some(set) = self.here(key) {
                        map.serialize_entry(key, set)?;
                        continue;
                    }
                    let key_step =
                        self.fields
                            .iter()
                            .find_map(|(path, _)| match path.get(self.depth) {
                                Some(&Step::Key(k)) if k == key => Some(Step::Key(k)),
                                _ => None,
                            });
                    let below = key_step.map(|step| self.below(step)).unwrap_or_default();
                    if below.is_empty() {
                        map.serialize_entry(key, value)?;
                    } else {
                        let node = Node {
                            value,
                            depth: self.depth + 1,
                            fields: &below,
                        };
                        map.serialize_entry(key, &node)?;
                    }
                }
                // Fields the document does not have yet.
                for (path, set) in self.fields.iter().copied() {
                    if path.len() == self.depth + 1
                        && let Step::Key(key) = path[self.depth]
                        && !object.contains_key(key)
                    {
                        map.serialize_entry(key, set)?;
                    }
                }
                map.end()
            }
            Value::Array(items) => {
                let mut seq = s.serialize_seq(Some(items.len()))?;
                for (i, value) in items.iter().enumerate() {
                    let below = self.below(Step::At(i));
                    if below.is_empty() {
                        seq.serialize_element(value)?;
                    } else {
                        seq.serialize_element(&Node {
                            value,
                            depth: self.depth + 1,
                            fields: &below,
                        })?;
                    }
                }
                seq.end()
            }
            other => other.serialize(s),
        }
    }
}

/// A `200` with `body` as JSON, written straight to bytes.
pub fn json_response(body: &impl Serialize) -> Response {
    match serde_json::to_vec(body) {
        Ok(bytes) => (
            [(axum::http::header::CONTENT_TYPE, "application/json")],
            bytes,
        )
            .into_response(),
        Err(e) => (
            axum::http::StatusCode::INTERNAL_SERVER_ERROR,
            format!("the response could not be written: {e}"),
        )
            .into_response(),
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn token(bytes: &[u8], logprob: f32) -> TokenLogprob {
        TokenLogprob::new(bytes, logprob, [(bytes, logprob), (&b" x"[..], -3.0)])
    }

    #[test]
    fn each_api_shape_carries_the_tokens_and_their_bytes() {
        let es = [token(b"Hi", -0.5), token(&[0xe6, 0x97], -1.0)];
        let c = value(&Chat(&es));
        assert_eq!(c["content"][0]["token"], "Hi");
        assert_eq!(c["content"][1]["token"], "bytes:\\xe6\\x97");
        assert_eq!(c["content"][1]["bytes"], json!([0xe6, 0x97]));
        assert_eq!(c["content"][0]["top_logprobs"][1]["token"], " x");
        assert_eq!(
            c["content"][0]["top_logprobs"][1]["bytes"],
            json!([32, 120])
        );
        assert_eq!(c["refusal"], Value::Null);
        let t = value(&Completion {
            entries: &es,
            offset: 4,
        });
        assert_eq!(t["text_offset"], json!([4, 6]));
        assert_eq!(t["token_logprobs"], json!([-0.5, -1.0]));
        assert_eq!(t["tokens"], json!(["Hi", "bytes:\\xe6\\x97"]));
        assert_eq!(t["top_logprobs"][0][" x"], json!(-3.0));
    }

    #[test]
    fn a_spliced_document_is_the_document_with_its_fields_set() {
        let doc = json!({"choices": [{"index": 0, "logprobs": null}, {"index": 1}],
                         "usage": {"n": 1}});
        let fields = [
            (
                vec![Step::Key("choices"), Step::At(0), Step::Key("logprobs")],
                json!([1, 2]),
            ),
            (
                vec![Step::Key("choices"), Step::At(1), Step::Key("extra")],
                json!("x"),
            ),
            // Leads nowhere: ignored.
            (
                vec![Step::Key("usage"), Step::At(3), Step::Key("y")],
                json!(0),
            ),
        ];
        let written = value(&Spliced {
            value: &doc,
            fields: &fields,
        });
        assert_eq!(
            written,
            json!({"choices": [{"index": 0, "logprobs": [1, 2]}, {"index": 1, "extra": "x"}],
                   "usage": {"n": 1}})
        );
    }
}
