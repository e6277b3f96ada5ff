//! Anthropic's messages, whole and streamed, as the official client reads
//! them. A stream is named SSE events: `message_start` (with an estimate
//! of the input tokens), then each content block — thinking, text, or a
//! tool call — as `content_block_start`, its deltas (`thinking_delta`,
//! `text_delta`, `input_json_delta` with the call's arguments in the
//! fragments the model writes them) and `content_block_stop`, their
//! indexes dense and in start order; then `message_delta` (the stop
//! reason, the matched stop sequence, the real usage) and `message_stop`.
//! A failure after the start is an `error` event.
//!
//! Text that is only white space is held back until text follows it, so
//! the space between thinking and a tool call opens no empty text block;
//! a whole message likewise leaves out text that is only white space.

use serde::Serialize;
use serde_json::{Value, json};

use super::super::drive::Framer;
use super::error::error_body;
use crate::service::{Batch, Completed, Ending, Event, Finish, ToolCall};
use crate::vocab::Usage;

/// What a message repeats: its id and the model as the request named it.
#[derive(Debug)]
pub struct Ids {
    /// `msg_…`.
    pub id: String,
    /// The requested model.
    pub model: String,
}

/// One SSE event: its name and its data.
pub type Frame = (&'static str, String);

/// A tool call's id as Anthropic writes them (`toolu_…`).
pub fn tool_id(call_id: &str) -> String {
    format!("toolu_{}", call_id.strip_prefix("call_").unwrap_or(call_id))
}

/// `stop_reason`: a stop sequence when one of the request's ended the
/// answer.
pub fn stop_reason(ending: &Ending) -> &'static str {
    match ending.finish {
        Finish::Length => "max_tokens",
        Finish::ToolCalls => "tool_use",
        Finish::Stop if ending.stop_sequence.is_some() => "stop_sequence",
        Finish::Stop | Finish::Abort | Finish::Error => "end_turn",
    }
}

fn usage(usage: &Usage) -> Value {
    json!({"input_tokens": usage.prompt_tokens, "output_tokens": usage.completion_tokens})
}

fn tool_use(call: &ToolCall) -> Value {
    json!({"type": "tool_use", "id": tool_id(&call.id), "name": call.name,
           "input": call.arguments_value()})
}

/// A whole message: thinking, text, then the tool calls.
pub fn message(ids: &Ids, done: &Completed) -> Value {
    let mut content = Vec::new();
    if !done.thinking.is_empty() {
        content.push(json!({"type": "thinking", "thinking": done.thinking, "signature": ""}));
    }
    if !done.text.trim().is_empty() {
        content.push(json!({"type": "text", "text": done.text}));
    }
    content.extend(done.calls.iter().map(tool_use));
    json!({"id": ids.id, "type": "message", "role": "assistant", "model": ids.model,
           "content": content, "stop_reason": stop_reason(&done.ending),
           "stop_sequence": done.ending.stop_sequence, "usage": usage(&done.ending.usage)})
}

/// The kind of block that is open.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Open {
    Thinking,
    Text,
    /// A tool call, by its index among the calls.
    Call(usize),
}

/// A stream's state: the blocks started so far and the one still open.
#[derive(Debug)]
pub struct Blocks {
    ids: Ids,
    /// The next block's index.
    next: usize,
    /// The open block and its index.
    open: Option<(Open, usize)>,
    /// Each call's block index, by call index.
    calls: Vec<(usize, usize)>,
    /// White space held back before a text block.
    space: String,
}

/// A delta event's data, serialised directly: the token path builds no
/// `Value`. `produced_ns` only in benchmark mode.
#[derive(Serialize)]
struct DeltaEvent<'a> {
    #[serde(rename = "type")]
    kind: &'static str,
    index: usize,
    delta: Delta<'a>,
    #[serde(skip_serializing_if = "Option::is_none")]
    produced_ns: Option<u64>,
}

#[derive(Serialize)]
#[serde(tag = "type")]
enum Delta<'a> {
    #[serde(rename = "text_delta")]
    Text { text: &'a str },
    #[serde(rename = "thinking_delta")]
    Thinking { thinking: &'a str },
    #[serde(rename = "input_json_delta")]
    InputJson { partial_json: &'a str },
}

fn delta(index: usize, delta: Delta<'_>, produced_ns: Option<u64>) -> Frame {
    let data = serde_json::to_string(&DeltaEvent {
        kind: "content_block_delta",
        index,
        delta,
        produced_ns,
    })
    .unwrap_or_default();
    ("content_block_delta", data)
}

impl Blocks {
    /// A stream of the message `ids`.
    pub fn new(ids: Ids) -> Self {
        Self {
            ids,
            next: 0,
            open: None,
            calls: Vec::new(),
            space: String::new(),
        }
    }

    /// `message_start`, with `input_tokens` estimated before the prefill.
    pub fn start(&self, input_estimate: u32) -> Frame {
        let message = json!({"id": self.ids.id, "type": "message", "role": "assistant",
            "model": self.ids.model, "content": [], "stop_reason": null, "stop_sequence": null,
            "usage": {"input_tokens": input_estimate, "output_tokens": 0}});
        (
            "message_start",
            json!({"type": "message_start", "message": message}).to_string(),
        )
    }

    fn close(&mut self, out: &mut Vec<Frame>) {
        if let Some((_, index)) = self.open.take() {
            out.push((
                "content_block_stop",
                json!({"type": "content_block_stop", "index": index}).to_string(),
            ));
        }
    }

    /// The index of an open block of `kind`, opening it (and closing the
    /// one before) when needed.
    fn open(&mut self, kind: Open, block: impl FnOnce() -> Value, out: &mut Vec<Frame>) -> usize {
        if let Some((open, index)) = self.open
            && open == kind
        {
            return index;
        }
        self.close(out);
        let index = self.next;
        self.next += 1;
        self.open = Some((kind, index));
        out.push((
            "content_block_start",
            json!({"type": "content_block_start", "index": index, "content_block": block()})
                .to_string(),
        ));
        index
    }

    /// The events of one batch, in order.
    pub fn batch(&mut self, batch: &Batch, out: &mut Vec<Frame>) {
        let mut produced_ns = batch.produced_ns;
        for event in &batch.events {
            match event {
                Event::Thinking(text) => {
                    let block = || json!({"type": "thinking", "thinking": "", "signature": ""});
                    let index = self.open(Open::Thinking, block, out);
                    let thinking = Delta::Thinking { thinking: text };
                    out.push(delta(index, thinking, produced_ns.take()));
                }
                Event::Text(text) => {
                    let opened = matches!(self.open, Some((Open::Text, _)));
                    if !opened && text.trim().is_empty() {
                        self.space.push_str(text);
                        continue;
                    }
                    let index = self.open(Open::Text, || json!({"type": "text", "text": ""}), out);
                    let text = if self.space.is_empty() {
                        Delta::Text { text }
                    } else {
                        self.space.push_str(text);
                        Delta::Text { text: &self.space }
                    };
                    out.push(delta(index, text, produced_ns.take()));
                    self.space.clear();
                }
                Event::CallStart { index, id, name } => {
                    self.space.clear();
                    let block = || {
                        json!({"type": "tool_use", "id": tool_id(id), "name": name,
                                          "input": {}})
                    };
                    let at = self.open(Open::Call(*index), block, out);
                    self.calls.push((*index, at));
                }
                Event::CallArguments { index, fragment } => {
                    if let Some(&(_, at)) = self.calls.iter().find(|(call, _)| call == index) {
                        let json = Delta::InputJson {
                            partial_json: fragment,
                        };
                        out.push(delta(at, json, None));
                    }
                }
                Event::CallEnd(index, _) => {
                    if self
                        .open
                        .is_some_and(|(open, _)| open == Open::Call(*index))
                    {
                        self.close(out);
                    }
                }
            }
        }
        if let Some(end) = &batch.end {
            self.end(end, out);
        }
    }

    /// The last events: `message_delta` and `message_stop`, or the error.
    fn end(&mut self, end: &Ending, out: &mut Vec<Frame>) {
        if let Some(error) = &end.error {
            out.push(("error", error_body("api_error", &error.message).to_string()));
            return;
        }
        self.close(out);
        out.push((
            "message_delta",
            json!({"type": "message_delta",
                   "delta": {"stop_reason": stop_reason(end), "stop_sequence": end.stop_sequence},
                   "usage": usage(&end.usage)})
            .to_string(),
        ));
        out.push(("message_stop", json!({"type": "message_stop"}).to_string()));
    }
}

/// A message's events as they stream: `message_start` (with the input
/// estimate), then each batch's.
#[derive(Debug)]
pub struct Events {
    /// The stream's blocks.
    pub blocks: Blocks,
    /// The input tokens estimated before the prefill.
    pub estimate: u32,
}

impl Framer for Events {
    type Frame = Frame;

    fn start(&mut self, out: &mut Vec<Frame>) {
        out.push(self.blocks.start(self.estimate));
    }

    fn batch(&mut self, batch: &Batch, out: &mut Vec<Frame>) {
        self.blocks.batch(batch, out);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::vocab::{EndError, EndErrorKind};

    fn ids() -> Ids {
        Ids {
            id: "msg_1".into(),
            model: "m".into(),
        }
    }

    fn ending(finish: Finish, stop_sequence: Option<&str>) -> Ending {
        Ending {
            finish,
            usage: Usage {
                prompt_tokens: 7,
                completion_tokens: 5,
                reasoning_tokens: 2,
            },
            timings: None,
            error: None,
            expired: false,
            stop_sequence: stop_sequence.map(str::to_owned),
        }
    }

    fn events(
        blocks: &mut Blocks,
        batches: Vec<(Vec<Event>, Option<Ending>)>,
    ) -> Vec<(String, Value)> {
        let mut out = Vec::new();
        for (events, end) in batches {
            let batch = Batch {
                events,
                produced_ns: None,
                tokens: 0,
                end,
                logprobs: Vec::new(),
            };
            blocks.batch(&batch, &mut out);
        }
        out.into_iter()
            .map(|(name, data)| {
                let data: Value = serde_json::from_str(&data).unwrap();
                assert_eq!(data["type"], name, "{data}");
                (name.to_owned(), data)
            })
            .collect()
    }

    fn call(index: usize) -> ToolCall {
        ToolCall {
            id: format!("call_{index}"),
            name: "Bash".into(),
            arguments: r#"{"command":"ls"}"#.into(),
        }
    }

    #[test]
    fn blocks_open_in_order_with_dense_indexes_and_deltas_in_between() {
        let mut blocks = Blocks::new(ids());
        let start: Value = serde_json::from_str(&blocks.start(12).1).unwrap();
        assert_eq!(start["message"]["usage"]["input_tokens"], 12);
        assert_eq!(start["message"]["content"], json!([]));
        let out = events(
            &mut blocks,
            vec![
                (
                    vec![Event::Thinking("hm".into()), Event::Thinking("m".into())],
                    None,
                ),
                (
                    vec![
                        Event::Text("\n\n".into()),
                        Event::Text("Hi".into()),
                        Event::Text(" there".into()),
                        Event::Text("\n".into()),
                        Event::CallStart {
                            index: 0,
                            id: "call_a".into(),
                            name: "Bash".into(),
                        },
                        Event::CallArguments {
                            index: 0,
                            fragment: "{\"command\":".into(),
                        },
                    ],
                    None,
                ),
                (
                    vec![
                        Event::CallArguments {
                            index: 0,
                            fragment: "\"ls\"}".into(),
                        },
                        Event::CallEnd(0, call(0)),
                        Event::Text("\n".into()),
                        Event::CallStart {
                            index: 1,
                            id: "call_b".into(),
                            name: "Read".into(),
                        },
                        Event::CallEnd(1, call(1)),
                    ],
                    Some(ending(Finish::ToolCalls, None)),
                ),
            ],
        );
        let names: Vec<&str> = out.iter().map(|(n, _)| n.as_str()).collect();
        assert_eq!(
            names,
            [
                "content_block_start",
                "content_block_delta",
                "content_block_delta",
                "content_block_stop",
                "content_block_start",
                "content_block_delta",
                "content_block_delta",
                "content_block_delta",
                "content_block_stop",
                "content_block_start",
                "content_block_delta",
                "content_block_delta",
                "content_block_stop",
                "content_block_start",
                "content_block_stop",
                "message_delta",
                "message_stop"
            ]
        );
        assert_eq!(
            out[0].1["content_block"],
            json!({"type": "thinking", "thinking": "", "signature": ""})
        );
        assert_eq!(
            out[1].1["delta"],
            json!({"type": "thinking_delta", "thinking": "hm"})
        );
        assert_eq!(
            out[4].1["content_block"],
            json!({"type": "text", "text": ""})
        );
        // The held-back space goes out with the text after it.
        assert_eq!(
            out[5].1["delta"],
            json!({"type": "text_delta", "text": "\n\nHi"})
        );
        assert_eq!(out[7].1["delta"]["text"], "\n");
        assert_eq!(
            out[9].1["content_block"],
            json!({"type": "tool_use", "id": "toolu_a", "name": "Bash", "input": {}})
        );
        let json: String = out[10..12]
            .iter()
            .map(|(_, d)| d["delta"]["partial_json"].as_str().unwrap())
            .collect();
        assert_eq!(json, r#"{"command":"ls"}"#);
        let indexes: Vec<u64> = out[..15]
            .iter()
            .map(|(_, d)| d["index"].as_u64().unwrap())
            .collect();
        assert_eq!(indexes, [0, 0, 0, 0, 1, 1, 1, 1, 1, 2, 2, 2, 2, 3, 3]);
        assert_eq!(
            out[15].1,
            json!({"type": "message_delta",
                   "delta": {"stop_reason": "tool_use", "stop_sequence": null},
                   "usage": {"input_tokens": 7, "output_tokens": 5}})
        );
    }

    #[test]
    fn the_end_tells_the_stop_sequence_or_the_failure() {
        let mut blocks = Blocks::new(ids());
        let out = events(
            &mut blocks,
            vec![(
                vec![Event::Text("Hello".into())],
                Some(ending(Finish::Stop, Some("END"))),
            )],
        );
        assert_eq!(out[3].1["delta"]["stop_reason"], "stop_sequence");
        assert_eq!(out[3].1["delta"]["stop_sequence"], "END");
        let mut failed = ending(Finish::Error, None);
        failed.error = Some(EndError {
            kind: EndErrorKind::Internal,
            message: "the runtime failed".into(),
        });
        let out = events(
            &mut Blocks::new(ids()),
            vec![(vec![Event::Text("Hel".into())], Some(failed))],
        );
        assert_eq!(
            out.last().unwrap().1,
            json!({"type": "error", "error": {"type": "api_error",
                                              "message": "the runtime failed"}})
        );
        for (finish, reason) in [
            (Finish::Stop, "end_turn"),
            (Finish::Length, "max_tokens"),
            (Finish::ToolCalls, "tool_use"),
            (Finish::Abort, "end_turn"),
        ] {
            assert_eq!(stop_reason(&ending(finish, None)), reason);
        }
    }

    #[test]
    fn a_whole_message_has_thinking_text_and_calls_in_that_order() {
        let done = Completed {
            model: "m".into(),
            text: "\n".into(),
            thinking: "hm".into(),
            calls: vec![call(3)],
            ending: ending(Finish::ToolCalls, None),
            logprobs: Vec::new(),
        };
        assert_eq!(
            message(&ids(), &done),
            json!({"id": "msg_1", "type": "message", "role": "assistant", "model": "m",
                   "content": [
                       {"type": "thinking", "thinking": "hm", "signature": ""},
                       {"type": "tool_use", "id": "toolu_3", "name": "Bash",
                        "input": {"command": "ls"}}],
                   "stop_reason": "tool_use", "stop_sequence": null,
                   "usage": {"input_tokens": 7, "output_tokens": 5}})
        );
    }

    #[test]
    fn a_delta_carries_the_production_stamp_in_benchmark_mode() {
        let (name, data) = delta(2, Delta::Text { text: "é \"q\"\n" }, Some(42));
        assert_eq!(name, "content_block_delta");
        let data: Value = serde_json::from_str(&data).unwrap();
        assert_eq!(
            data,
            json!({"type": "content_block_delta", "index": 2,
                   "delta": {"type": "text_delta", "text": "é \"q\"\n"}, "produced_ns": 42})
        );
    }
}
