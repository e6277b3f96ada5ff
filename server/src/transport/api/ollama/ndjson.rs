//! The lines of an Ollama generation (NDJSON, one object per line): text
//! as `response` (generate) or `message.content` (chat), thinking as
//! `thinking` / `message.thinking`, each tool call whole in a chat line's
//! `message.tool_calls` once it is complete, then the last line with
//! `done: true`, the reason, counts and integer-nanosecond durations.

use std::time::{Instant, SystemTime};

use axum::body::Bytes;
use serde::Serialize;
use serde_json::{Value, json};

use super::super::super::clock::rfc3339;
use super::super::drive::Framer;
use super::super::logprobs;
use crate::service::{Batch, Ending, Event, Finish, ToolCall};

/// `/api/generate` or `/api/chat`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Api {
    /// `/api/generate`.
    Generate,
    /// `/api/chat`.
    Chat,
}

/// A call in Ollama's shape: arguments as an object.
pub fn call_value(call: &ToolCall) -> Value {
    json!({"function": {"name": call.name, "arguments": call.arguments_value()}})
}

/// Writes lines for one generation.
#[derive(Debug)]
pub struct Lines {
    /// Which API.
    pub api: Api,
    /// The model.
    pub model: String,
    /// When the request came.
    pub started: Instant,
}

impl Lines {
    /// A line with `text` (or thinking), serialised directly: the token
    /// path builds no `Value`. `produced_ns` only in benchmark mode.
    pub fn text_line(
        &self,
        out: &mut Vec<u8>,
        text: &str,
        thinking: bool,
        produced_ns: Option<u64>,
    ) {
        self.text_line_with(out, text, thinking, produced_ns, None);
    }

    /// [`Lines::text_line`] with the log probabilities of its tokens.
    fn text_line_with(
        &self,
        out: &mut Vec<u8>,
        text: &str,
        thinking: bool,
        produced_ns: Option<u64>,
        logprobs: Option<Value>,
    ) {
        #[derive(Serialize)]
        struct Line<'a> {
            model: &'a str,
            created_at: String,
            #[serde(skip_serializing_if = "Option::is_none")]
            response: Option<&'a str>,
            #[serde(skip_serializing_if = "Option::is_none")]
            thinking: Option<&'a str>,
            #[serde(skip_serializing_if = "Option::is_none")]
            message: Option<Message<'a>>,
            done: bool,
            #[serde(skip_serializing_if = "Option::is_none")]
            logprobs: Option<Value>,
            #[serde(skip_serializing_if = "Option::is_none")]
            produced_ns: Option<u64>,
        }
        #[derive(Serialize)]
        struct Message<'a> {
            role: &'static str,
            content: &'a str,
            #[serde(skip_serializing_if = "Option::is_none")]
            thinking: Option<&'a str>,
        }
        let (content, thought) = if thinking {
            ("", Some(text))
        } else {
            (text, None)
        };
        let line = Line {
            model: &self.model,
            created_at: rfc3339(SystemTime::now()),
            response: (self.api == Api::Generate).then_some(content),
            thinking: if self.api == Api::Generate {
                thought
            } else {
                None
            },
            message: (self.api == Api::Chat).then_some(Message {
                role: "assistant",
                content,
                thinking: thought,
            }),
            done: false,
            logprobs,
            produced_ns,
        };
        if serde_json::to_writer(&mut *out, &line).is_ok() {
            out.push(b'\n');
        }
    }

    /// A line as a value (for the few lines off the token path).
    pub fn line(&self, text: &str, thinking: Option<&str>) -> Value {
        let now = rfc3339(SystemTime::now());
        let mut line = match self.api {
            Api::Generate => {
                json!({"model": self.model, "created_at": now, "response": text, "done": false})
            }
            Api::Chat => json!({"model": self.model, "created_at": now,
                                "message": {"role": "assistant", "content": text}, "done": false}),
        };
        if let Some(thinking) = thinking.filter(|t| !t.is_empty()) {
            match self.api {
                Api::Generate => line["thinking"] = json!(thinking),
                Api::Chat => line["message"]["thinking"] = json!(thinking),
            }
        }
        line
    }

    /// The last line: done, the reason, counts and durations.
    pub fn last_line(&self, text: &str, thinking: Option<&str>, end: &Ending) -> Value {
        let mut value = self.line(text, thinking);
        let ns = |ms: f64| (ms * 1_000_000.0).round() as u64;
        let timings = end.timings.unwrap_or_default();
        value["done"] = json!(true);
        value["done_reason"] = json!(if end.finish == Finish::Length {
            "length"
        } else {
            "stop"
        });
        value["total_duration"] =
            json!(u64::try_from(self.started.elapsed().as_nanos()).unwrap_or(u64::MAX));
        value["load_duration"] = json!(0);
        value["prompt_eval_count"] = json!(end.usage.prompt_tokens);
        value["prompt_eval_duration"] = json!(ns(timings.prefill_ms));
        value["eval_count"] = json!(end.usage.completion_tokens);
        value["eval_duration"] = json!(ns(timings.generate_ms));
        value
    }

    /// The lines of one batch.
    pub fn batch_lines(&self, batch: &Batch, out: &mut Vec<u8>) {
        let mut produced_ns = batch.produced_ns;
        let mut logprobs = (!batch.logprobs.is_empty())
            .then(|| logprobs::value(&logprobs::Entries(&batch.logprobs)));
        for event in &batch.events {
            match event {
                Event::Thinking(text) => self.text_line(out, text, true, produced_ns.take()),
                Event::Text(text) => {
                    self.text_line_with(out, text, false, produced_ns.take(), logprobs.take());
                }
                Event::CallEnd(_, call) => {
                    let mut line = self.line("", None);
                    line["message"]["tool_calls"] = json!([call_value(call)]);
                    push_value(out, &line);
                }
                Event::CallStart { .. } | Event::CallArguments { .. } => {}
            }
        }
        if let Some(end) = &batch.end {
            let last = match &end.error {
                Some(err) => json!({"error": err.message}),
                None => self.last_line("", None, end),
            };
            push_value(out, &last);
        }
    }
}

/// Each batch's lines, together in one frame.
impl Framer for Lines {
    type Frame = Bytes;

    fn batch(&mut self, batch: &Batch, out: &mut Vec<Bytes>) {
        let mut lines = Vec::new();
        self.batch_lines(batch, &mut lines);
        out.push(Bytes::from(lines));
    }
}

/// Appends one JSON line.
pub fn push_value(out: &mut Vec<u8>, value: &Value) {
    if serde_json::to_writer(&mut *out, value).is_ok() {
        out.push(b'\n');
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_streamed_line_is_the_line_value_serialised() {
        for api in [Api::Generate, Api::Chat] {
            let lines = Lines {
                api,
                model: "mock".into(),
                started: Instant::now(),
            };
            let text = "é \"quoted\"\n";
            for thinking in [false, true] {
                let mut out = Vec::new();
                lines.text_line(&mut out, text, thinking, None);
                assert_eq!(out.last(), Some(&b'\n'));
                let mut written: Value = serde_json::from_slice(&out).unwrap();
                let mut expected = if thinking {
                    lines.line("", Some(text))
                } else {
                    lines.line(text, None)
                };
                assert!(written["created_at"].as_str().unwrap().ends_with('Z'));
                written["created_at"] = json!(null);
                expected["created_at"] = json!(null);
                assert_eq!(written, expected, "{api:?} thinking={thinking}");
            }
            let mut stamped = Vec::new();
            lines.text_line(&mut stamped, text, false, Some(42));
            let stamped: Value = serde_json::from_slice(&stamped).unwrap();
            assert_eq!(stamped["produced_ns"], 42);
        }
    }
}
