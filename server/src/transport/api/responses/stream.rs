//! A generation as the Responses API tells it: output items in the order
//! the model made them — `reasoning` (its thinking, as `reasoning_text`),
//! `message` (its answer, as `output_text`) and `function_call` — and, when
//! streaming, the events the official clients read: `response.created`
//! and `response.in_progress` (the response with no output yet), then for
//! each item `output_item.added`, its content part, its deltas, their
//! `.done` and `output_item.done` (the complete item), and last
//! `response.completed`, `response.incomplete` (at the token limit) or
//! `response.failed` (with `error {code, message}`), each with the whole
//! response. Every event carries its `type` and a `sequence_number` that
//! counts from 0; item events carry the item's id and `output_index`, part
//! events their `content_index`.
//!
//! One [`Output`] builds both answers: the whole response reads the same
//! events without framing them. Whitespace the model writes between or
//! after tool calls opens no message (the chat API's `content: null`).

use serde::Serialize;
use serde_json::value::RawValue;
use serde_json::{Map, Value, json};

use super::super::logprobs::{Entries, Spliced, Step, json_response};

use crate::service::{
    Batch, Ending, Event, Finish, Message, Part, Speaker, TokenLogprob, ToolCall,
};
use crate::vocab::Usage;

/// One server-sent event: its name (= the payload's `type`) and JSON.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Frame {
    /// The event's name.
    pub kind: &'static str,
    /// Its payload.
    pub data: String,
}

/// How a response ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Status {
    /// The model ended its answer (or its tool calls).
    Completed,
    /// The token limit cut it.
    Incomplete,
    /// It failed.
    Failed,
}

impl Status {
    fn as_str(self) -> &'static str {
        match self {
            Self::Completed => "completed",
            Self::Incomplete => "incomplete",
            Self::Failed => "failed",
        }
    }
}

/// The item being written.
#[derive(Debug)]
enum Open {
    None,
    Reasoning {
        index: usize,
        id: String,
        text: String,
    },
    Message {
        index: usize,
        id: String,
        text: String,
        /// Its tokens' log probabilities, when asked.
        logprobs: Vec<TokenLogprob>,
    },
    Call {
        index: usize,
        id: String,
        call_id: String,
        name: String,
    },
}

/// A response's output as it is made, and its events when `emit`.
#[derive(Debug)]
pub struct Output {
    /// `resp_…`.
    id: String,
    /// The response object's fixed fields (id, model, what the request set).
    template: Map<String, Value>,
    emit: bool,
    sequence: u64,
    items: Vec<Value>,
    open: Open,
    /// Whitespace written while no message is open, shown if text follows.
    held: String,
    text: String,
    calls: Vec<ToolCall>,
    status: Option<Status>,
    /// Whether text parts and deltas carry log probabilities.
    logprobs: bool,
    /// Log probabilities of answer tokens not yet given to a delta.
    pending: Vec<TokenLogprob>,
    /// The log probabilities of each closed message (by its index in the
    /// output), written once: they join the output as they are written
    /// out, never as a `Value` each.
    written_logprobs: Vec<(usize, Box<RawValue>)>,
}

/// `usage` in the Responses shape.
pub fn usage(usage: &Usage) -> Value {
    let (input, output) = (usage.prompt_tokens, usage.completion_tokens);
    json!({"input_tokens": input,
           "input_tokens_details": {"cached_tokens": 0, "cache_write_tokens": 0},
           "output_tokens": output,
           "output_tokens_details": {"reasoning_tokens": usage.reasoning_tokens},
           "total_tokens": input + output})
}

/// A text or reasoning delta, serialised directly: the token path builds
/// no `Value`. `produced_ns` only in benchmark mode.
#[derive(Serialize)]
struct Delta<'a> {
    #[serde(rename = "type")]
    kind: &'static str,
    sequence_number: u64,
    item_id: &'a str,
    output_index: usize,
    #[serde(skip_serializing_if = "Option::is_none")]
    content_index: Option<usize>,
    delta: &'a str,
    #[serde(skip_serializing_if = "Option::is_none")]
    logprobs: Option<Entries<'a>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    produced_ns: Option<u64>,
}

impl Output {
    /// The output of response `id`; `template` holds the response
    /// object's fields that do not change (it gets `id` and `object`
    /// here). Events are made only when `emit`.
    pub fn new(id: String, mut template: Map<String, Value>, emit: bool) -> Self {
        template.insert("id".into(), json!(id));
        template.insert("object".into(), json!("response"));
        Self {
            id,
            template,
            emit,
            sequence: 0,
            items: Vec::new(),
            open: Open::None,
            held: String::new(),
            text: String::new(),
            calls: Vec::new(),
            status: None,
            logprobs: false,
            pending: Vec::new(),
            written_logprobs: Vec::new(),
        }
    }

    /// Text parts and `output_text` deltas carry each answer token's log
    /// probability (`include: ["message.output_text.logprobs"]`).
    #[must_use]
    pub fn with_logprobs(mut self, on: bool) -> Self {
        self.logprobs = on;
        self
    }

    /// The response's id.
    pub fn id(&self) -> &str {
        &self.id
    }

    /// How it ended, once it has.
    pub fn status(&self) -> Option<Status> {
        self.status
    }

    /// The id of the item at `index`: unique, as the response's id is.
    fn item_id(&self, prefix: &str, index: usize) -> String {
        format!("{prefix}_{}_{index}", self.id.trim_start_matches("resp_"))
    }

    fn event(&mut self, out: &mut Vec<Frame>, kind: &'static str, payload: impl FnOnce() -> Value) {
        self.event_with(out, kind, payload, &[]);
    }

    /// [`Output::event`] with log probabilities set at `fields` of the
    /// payload.
    fn event_with(
        &mut self,
        out: &mut Vec<Frame>,
        kind: &'static str,
        payload: impl FnOnce() -> Value,
        fields: &[(Vec<Step>, &RawValue)],
    ) {
        if !self.emit {
            return;
        }
        let mut payload = payload();
        payload["type"] = json!(kind);
        payload["sequence_number"] = json!(self.sequence);
        self.sequence += 1;
        let data = serde_json::to_string(&Spliced {
            value: &payload,
            fields,
        })
        .unwrap_or_default();
        out.push(Frame { kind, data });
    }

    fn delta(
        &mut self,
        out: &mut Vec<Frame>,
        kind: &'static str,
        delta: &str,
        produced_ns: Option<u64>,
        logprobs: &[TokenLogprob],
    ) {
        if !self.emit {
            return;
        }
        let (item_id, output_index) = match &self.open {
            Open::Reasoning { index, id, .. }
            | Open::Message { index, id, .. }
            | Open::Call { index, id, .. } => (id.as_str(), *index),
            Open::None => return,
        };
        // A call's argument deltas have no content part.
        let call = matches!(self.open, Open::Call { .. });
        let data = serde_json::to_string(&Delta {
            kind,
            sequence_number: self.sequence,
            item_id,
            output_index,
            content_index: (!call).then_some(0),
            delta,
            logprobs: (kind == "response.output_text.delta").then_some(Entries(logprobs)),
            produced_ns,
        })
        .unwrap_or_default();
        self.sequence += 1;
        out.push(Frame { kind, data });
    }

    /// The response object, with `status` and the items so far.
    pub fn response(&self, status: &str, usage_value: Value, extra: &[(&str, Value)]) -> Value {
        let mut response = self.template.clone();
        response.insert("status".into(), json!(status));
        response.insert("output".into(), Value::Array(self.items.clone()));
        response.insert("usage".into(), usage_value);
        response.insert("error".into(), Value::Null);
        response.insert("incomplete_details".into(), Value::Null);
        for (key, value) in extra {
            response.insert((*key).into(), value.clone());
        }
        Value::Object(response)
    }

    /// `response.created` and `response.in_progress` (the response
    /// serialised once for both: they go out before the first token).
    pub fn start(&mut self, out: &mut Vec<Frame>) {
        if !self.emit {
            return;
        }
        let response = self.response("in_progress", Value::Null, &[]).to_string();
        for kind in ["response.created", "response.in_progress"] {
            let data = format!(
                "{{\"response\":{response},\"sequence_number\":{},\"type\":\"{kind}\"}}",
                self.sequence
            );
            self.sequence += 1;
            out.push(Frame { kind, data });
        }
    }

    /// Closes the open item (as `status`).
    fn close(&mut self, status: &str, out: &mut Vec<Frame>) {
        match std::mem::replace(&mut self.open, Open::None) {
            Open::None => {}
            Open::Reasoning { index, id, text } => {
                let part = json!({"type": "reasoning_text", "text": text});
                self.event(out, "response.reasoning_text.done", || {
                    json!({"item_id": id, "output_index": index, "content_index": 0, "text": text})
                });
                self.event(out, "response.content_part.done", || {
                    json!({"item_id": id, "output_index": index, "content_index": 0, "part": part})
                });
                let item = json!({"type": "reasoning", "id": id, "summary": [],
                                  "content": [part], "status": status});
                self.done(index, item, out);
            }
            Open::Message {
                index,
                id,
                text,
                logprobs,
            } => {
                let part = json!({"type": "output_text", "text": text, "annotations": []});
                // Written once, however many events and answers carry them.
                let written = serde_json::value::to_raw_value(&Entries(&logprobs))
                    .unwrap_or_else(|_| RawValue::NULL.to_owned());
                drop(logprobs);
                self.event_with(
                    out,
                    "response.output_text.done",
                    || {
                        json!({"item_id": id, "output_index": index, "content_index": 0,
                           "text": text})
                    },
                    &[(vec![Step::Key("logprobs")], &written)],
                );
                let shown = self.logprobs.then_some(&*written);
                let at = |path: &[Step]| -> Vec<(Vec<Step>, &RawValue)> {
                    shown.map(|raw| (path.to_vec(), raw)).into_iter().collect()
                };
                let in_part = at(&[Step::Key("part"), Step::Key("logprobs")]);
                let in_item = at(&[
                    Step::Key("item"),
                    Step::Key("content"),
                    Step::At(0),
                    Step::Key("logprobs"),
                ]);
                self.event_with(
                    out,
                    "response.content_part.done",
                    || {
                        json!({"item_id": id, "output_index": index, "content_index": 0,
                               "part": part})
                    },
                    &in_part,
                );
                self.text.push_str(&text);
                let item = json!({"type": "message", "id": id, "role": "assistant",
                                  "status": status, "content": [part]});
                self.done_with(index, item, &in_item, out);
                if self.logprobs {
                    self.written_logprobs.push((index, written));
                }
            }
            // A call is closed by its end event; one left open is cut.
            Open::Call {
                index,
                id,
                call_id,
                name,
            } => {
                let item = json!({"type": "function_call", "id": id, "call_id": call_id,
                                  "name": name, "arguments": "", "status": "incomplete"});
                self.done(index, item, out);
            }
        }
    }

    fn done(&mut self, index: usize, item: Value, out: &mut Vec<Frame>) {
        self.done_with(index, item, &[], out);
    }

    /// [`Output::done`], the event with log probabilities at `fields`.
    fn done_with(
        &mut self,
        index: usize,
        item: Value,
        fields: &[(Vec<Step>, &RawValue)],
        out: &mut Vec<Frame>,
    ) {
        let event_item = item.clone();
        self.event_with(
            out,
            "response.output_item.done",
            || json!({"output_index": index, "item": event_item}),
            fields,
        );
        self.items.push(item);
    }

    fn open_reasoning(&mut self, out: &mut Vec<Frame>) {
        let index = self.items.len();
        let id = self.item_id("rs", index);
        self.event(out, "response.output_item.added", || {
            json!({"output_index": index, "item": {"type": "reasoning", "id": id, "summary": [],
                   "content": [], "status": "in_progress"}})
        });
        self.event(out, "response.content_part.added", || {
            json!({"item_id": id, "output_index": index, "content_index": 0,
                   "part": {"type": "reasoning_text", "text": ""}})
        });
        self.open = Open::Reasoning {
            index,
            id,
            text: String::new(),
        };
    }

    fn open_message(&mut self, out: &mut Vec<Frame>) {
        let index = self.items.len();
        let id = self.item_id("msg", index);
        self.event(out, "response.output_item.added", || {
            json!({"output_index": index, "item": {"type": "message", "id": id,
                   "role": "assistant", "status": "in_progress", "content": []}})
        });
        self.event(out, "response.content_part.added", || {
            json!({"item_id": id, "output_index": index, "content_index": 0,
                   "part": {"type": "output_text", "text": "", "annotations": []}})
        });
        self.open = Open::Message {
            index,
            id,
            text: String::new(),
            logprobs: Vec::new(),
        };
    }

    fn thinking(&mut self, text: &str, produced_ns: Option<u64>, out: &mut Vec<Frame>) {
        if !matches!(self.open, Open::Reasoning { .. }) {
            self.close("completed", out);
            self.open_reasoning(out);
        }
        if let Open::Reasoning { text: all, .. } = &mut self.open {
            all.push_str(text);
        }
        self.delta(out, "response.reasoning_text.delta", text, produced_ns, &[]);
    }

    fn answer(&mut self, text: &str, produced_ns: Option<u64>, out: &mut Vec<Frame>) {
        if !matches!(self.open, Open::Message { .. }) {
            self.held.push_str(text);
            if self.held.trim().is_empty() {
                return;
            }
            self.close("completed", out);
            self.open_message(out);
            let held = std::mem::take(&mut self.held);
            return self.message_delta(&held, produced_ns, out);
        }
        self.message_delta(text, produced_ns, out);
    }

    /// Text of the open message; it carries the log probabilities of the
    /// tokens read since the last delta.
    fn message_delta(&mut self, text: &str, produced_ns: Option<u64>, out: &mut Vec<Frame>) {
        let entries = std::mem::take(&mut self.pending);
        self.delta(
            out,
            "response.output_text.delta",
            text,
            produced_ns,
            &entries,
        );
        if let Open::Message {
            text: all,
            logprobs,
            ..
        } = &mut self.open
        {
            all.push_str(text);
            logprobs.extend(entries);
        }
    }

    fn call_start(&mut self, call_id: &str, name: &str, out: &mut Vec<Frame>) {
        self.close("completed", out);
        self.held.clear();
        let index = self.items.len();
        let id = self.item_id("fc", index);
        self.event(out, "response.output_item.added", || {
            json!({"output_index": index, "item": {"type": "function_call", "id": id,
                   "call_id": call_id, "name": name, "arguments": "", "status": "in_progress"}})
        });
        self.open = Open::Call {
            index,
            id,
            call_id: call_id.to_owned(),
            name: name.to_owned(),
        };
    }

    fn call_end(&mut self, call: &ToolCall, out: &mut Vec<Frame>) {
        let Open::Call { index, id, .. } = std::mem::replace(&mut self.open, Open::None) else {
            return;
        };
        self.event(out, "response.function_call_arguments.done", || {
            json!({"item_id": id, "output_index": index, "name": call.name,
                   "arguments": call.arguments})
        });
        let item = json!({"type": "function_call", "id": id, "call_id": call.id,
                          "name": call.name, "arguments": call.arguments, "status": "completed"});
        self.done(index, item, out);
        self.calls.push(call.clone());
    }

    /// The events of one batch, in order; the last batch also ends the
    /// response (see [`Output::end`]).
    pub fn batch(&mut self, batch: &Batch, out: &mut Vec<Frame>) {
        if self.logprobs {
            self.pending.extend(batch.logprobs.iter().cloned());
        }
        let mut produced_ns = batch.produced_ns;
        for event in &batch.events {
            match event {
                Event::Thinking(text) => self.thinking(text, produced_ns.take(), out),
                Event::Text(text) => self.answer(text, produced_ns.take(), out),
                Event::CallStart { id, name, .. } => self.call_start(id, name, out),
                Event::CallArguments { fragment, .. } => {
                    self.delta(
                        out,
                        "response.function_call_arguments.delta",
                        fragment,
                        None,
                        &[],
                    );
                }
                Event::CallEnd(_, call) => self.call_end(call, out),
            }
        }
        if let Some(end) = &batch.end {
            self.end(end, out);
        }
    }

    /// Closes the output and writes the last event: `response.completed`,
    /// `response.incomplete` at the token limit, or `response.failed`.
    pub fn end(&mut self, end: &Ending, out: &mut Vec<Frame>) {
        let failure = if end.expired {
            Some("the generation expired before it was read".to_owned())
        } else if let Some(error) = &end.error {
            Some(error.message.clone())
        } else if end.finish == Finish::Abort {
            Some("the generation was stopped before its end (the server is shutting down)".into())
        } else {
            None
        };
        let status = match (&failure, end.finish) {
            (Some(_), _) => Status::Failed,
            (None, Finish::Length) => Status::Incomplete,
            (None, _) => Status::Completed,
        };
        // The output is never empty: an answer of nothing (or of nothing
        // but whitespace) is one message. Whitespace after other items is
        // dropped.
        if matches!(self.open, Open::None) && self.items.is_empty() {
            self.open_message(out);
            let held = std::mem::take(&mut self.held);
            if !held.is_empty() {
                self.message_delta(&held, None, out);
            }
        }
        let item_status = if status == Status::Completed {
            "completed"
        } else {
            "incomplete"
        };
        self.close(item_status, out);
        self.status = Some(status);
        let usage_value = usage(&end.usage);
        let response = match (status, failure) {
            (Status::Failed, Some(message)) => self.response(
                "failed",
                usage_value,
                &[("error", json!({"code": "server_error", "message": message}))],
            ),
            (Status::Incomplete, _) => self.response(
                "incomplete",
                usage_value,
                &[("incomplete_details", json!({"reason": "max_output_tokens"}))],
            ),
            _ => self.response(status.as_str(), usage_value, &[]),
        };
        let kind = match status {
            Status::Completed => "response.completed",
            Status::Incomplete => "response.incomplete",
            Status::Failed => "response.failed",
        };
        // The messages' log probabilities go into the response as it is
        // written out.
        let written = std::mem::take(&mut self.written_logprobs);
        let fields = logprob_fields(&written, &[Step::Key("response")]);
        self.event_with(out, kind, || json!({"response": response}), &fields);
        drop(fields);
        self.written_logprobs = written;
    }

    /// A response refused before it started (the prompt over the
    /// context, say): `response.failed` with `code`.
    pub fn refuse(&mut self, code: &str, message: &str, out: &mut Vec<Frame>) {
        self.status = Some(Status::Failed);
        let response = self.response(
            "failed",
            Value::Null,
            &[("error", json!({"code": code, "message": message}))],
        );
        self.event(out, "response.failed", || json!({"response": response}));
    }

    /// The whole response once it has ended (without the events), as
    /// JSON: the messages' log probabilities written straight into it.
    pub fn finished_response(&self, end: &Ending) -> axum::response::Response {
        let fields = logprob_fields(&self.written_logprobs, &[]);
        json_response(&Spliced {
            value: &self.finished_without_logprobs(end),
            fields: &fields,
        })
    }

    /// The whole response once it has ended (without the events), as a
    /// `Value` (for tests: answers are written by
    /// [`Output::finished_response`]).
    #[cfg(test)]
    pub fn finished(&self, end: &Ending) -> Value {
        let fields = logprob_fields(&self.written_logprobs, &[]);
        super::super::logprobs::value(&Spliced {
            value: &self.finished_without_logprobs(end),
            fields: &fields,
        })
    }

    fn finished_without_logprobs(&self, end: &Ending) -> Value {
        let usage_value = usage(&end.usage);
        match self.status {
            Some(Status::Incomplete) => self.response(
                "incomplete",
                usage_value,
                &[("incomplete_details", json!({"reason": "max_output_tokens"}))],
            ),
            Some(status) => self.response(status.as_str(), usage_value, &[]),
            None => self.response("in_progress", usage_value, &[]),
        }
    }

    /// The answer as one assistant turn, to continue the conversation from
    /// (its thinking left out, as input `reasoning` items are).
    pub fn assistant_turn(&self) -> Message {
        Message {
            speaker: Speaker::Assistant,
            parts: if self.text.is_empty() {
                Vec::new()
            } else {
                vec![Part::Text(self.text.clone())]
            },
            tool_calls: self.calls.clone(),
        }
    }
}

/// Where the closed messages' log probabilities (`written`: each
/// message's index and its entries as JSON) go in a response found at
/// `prefix`.
fn logprob_fields<'a>(
    written: &'a [(usize, Box<RawValue>)],
    prefix: &[Step],
) -> Vec<(Vec<Step>, &'a RawValue)> {
    written
        .iter()
        .map(|(index, raw)| {
            let mut at = prefix.to_vec();
            at.extend([
                Step::Key("output"),
                Step::At(*index),
                Step::Key("content"),
                Step::At(0),
                Step::Key("logprobs"),
            ]);
            (at, &**raw)
        })
        .collect()
}

#[cfg(test)]
mod tests;
