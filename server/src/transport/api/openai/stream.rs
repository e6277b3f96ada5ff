//! The OpenAI chunks of a generation, as the official client reads them:
//! one id and `created` per response; the role on the first chunk only;
//! text as `delta.content` and thinking as `delta.reasoning_content`; a
//! tool call as a `tool_calls` delta with its index, id, type and name,
//! then its arguments in fragments; `finish_reason` on its own chunk with
//! an empty delta; usage on its own chunk (empty `choices`) when
//! `stream_options.include_usage` asks for it; then `[DONE]`.

use serde::Serialize;
use serde_json::{Value, json};

use super::super::drive::Framer;
use super::super::logprobs;
use super::error::error_body;
use crate::service::{Batch, Ending, Event, Finish, ServiceError, ToolCall};
use crate::vocab::Usage;

/// Chat completions or text completions.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// `/v1/chat/completions`.
    Chat,
    /// `/v1/completions`.
    Completion,
}

/// What every chunk of one response repeats.
#[derive(Debug)]
pub struct Ids {
    /// `chatcmpl-…` or `cmpl-…`.
    pub id: String,
    /// Unix seconds.
    pub created: u64,
    /// The model that answers.
    pub model: String,
    /// Which API.
    pub kind: Kind,
}

/// `finish_reason` as OpenAI names it.
pub fn finish_reason(finish: Finish) -> &'static str {
    match finish {
        Finish::Length => "length",
        Finish::ToolCalls => "tool_calls",
        Finish::Stop | Finish::Abort | Finish::Error => "stop",
    }
}

/// `usage`, with the thinking's share.
pub fn usage(usage: &Usage) -> Value {
    let (p, c) = (usage.prompt_tokens, usage.completion_tokens);
    json!({"prompt_tokens": p, "completion_tokens": c, "total_tokens": p + c,
           "completion_tokens_details": {"reasoning_tokens": usage.reasoning_tokens}})
}

/// A call in a whole message: arguments as JSON text.
pub fn call_value(call: &ToolCall) -> Value {
    json!({"id": call.id, "type": "function",
           "function": {"name": call.name, "arguments": call.arguments}})
}

impl Ids {
    fn object(&self, chunk: bool) -> &'static str {
        match (self.kind, chunk) {
            (Kind::Chat, false) => "chat.completion",
            (Kind::Chat, true) => "chat.completion.chunk",
            (Kind::Completion, _) => "text_completion",
        }
    }

    /// The response (or chunk) around `choices`.
    pub fn envelope(&self, chunk: bool, choices: Value) -> Value {
        json!({"id": self.id, "object": self.object(chunk), "created": self.created,
               "model": self.model, "system_fingerprint": null, "choices": choices})
    }

    fn chunk(&self, delta: Value, finish: Option<&str>) -> String {
        let choice = match self.kind {
            Kind::Chat => {
                json!({"index": 0, "delta": delta, "logprobs": null, "finish_reason": finish})
            }
            Kind::Completion => {
                let mut choice = json!({"index": 0, "text": delta.get("content").cloned()
                    .unwrap_or(json!("")), "logprobs": null, "finish_reason": finish});
                if let Some(thinking) = delta.get("reasoning_content") {
                    choice["reasoning_content"] = thinking.clone();
                }
                choice
            }
        };
        self.envelope(true, json!([choice])).to_string()
    }

    /// A chunk of text (or thinking), serialised directly: the token
    /// path builds no `Value`. `produced_ns` only in benchmark mode.
    pub fn text_event(&self, text: &str, thinking: bool, produced_ns: Option<u64>) -> String {
        self.text_event_with(text, thinking, produced_ns, None)
    }

    /// [`Ids::text_event`] with the log probabilities of its tokens.
    fn text_event_with(
        &self,
        text: &str,
        thinking: bool,
        produced_ns: Option<u64>,
        logprobs: Option<Value>,
    ) -> String {
        #[derive(Serialize)]
        struct Chunk<'a> {
            id: &'a str,
            object: &'static str,
            created: u64,
            model: &'a str,
            system_fingerprint: (),
            choices: [Choice<'a>; 1],
            #[serde(skip_serializing_if = "Option::is_none")]
            produced_ns: Option<u64>,
        }
        #[derive(Serialize)]
        struct Choice<'a> {
            index: u32,
            #[serde(skip_serializing_if = "Option::is_none")]
            delta: Option<Delta<'a>>,
            #[serde(skip_serializing_if = "Option::is_none")]
            text: Option<&'a str>,
            #[serde(skip_serializing_if = "Option::is_none")]
            reasoning_content: Option<&'a str>,
            logprobs: Option<Value>,
            finish_reason: (),
        }
        #[derive(Serialize)]
        struct Delta<'a> {
            #[serde(skip_serializing_if = "Option::is_none")]
            content: Option<&'a str>,
            #[serde(skip_serializing_if = "Option::is_none")]
            reasoning_content: Option<&'a str>,
        }
        let chat = self.kind == Kind::Chat;
        let (content, reasoning) = if thinking {
            (None, Some(text))
        } else {
            (Some(text), None)
        };
        serde_json::to_string(&Chunk {
            id: &self.id,
            object: self.object(true),
            created: self.created,
            model: &self.model,
            system_fingerprint: (),
            choices: [Choice {
                index: 0,
                delta: chat.then_some(Delta {
                    content,
                    reasoning_content: reasoning,
                }),
                text: (!chat).then_some(content.unwrap_or_default()),
                reasoning_content: if chat { None } else { reasoning },
                logprobs,
                finish_reason: (),
            }],
            produced_ns,
        })
        .unwrap_or_default()
    }

    /// The first chunk of a chat stream: the role, and nothing else.
    pub fn role_chunk(&self) -> String {
        self.chunk(json!({"role": "assistant", "content": ""}), None)
    }

    /// The events of one batch, in order; its answer's first text carries
    /// `logprobs`, those of the batch's tokens.
    pub fn batch_events(
        &self,
        batch: &Batch,
        include_usage: bool,
        mut logprobs: Option<Value>,
        out: &mut Vec<String>,
    ) {
        let mut produced_ns = batch.produced_ns;
        for event in &batch.events {
            match event {
                Event::Thinking(text) => out.push(self.text_event(text, true, produced_ns.take())),
                Event::Text(text) => {
                    out.push(self.text_event_with(text, false, produced_ns.take(), logprobs.take()))
                }
                Event::CallStart { index, id, name } => out.push(self.chunk(
                    json!({"tool_calls": [{"index": index, "id": id, "type": "function",
                                           "function": {"name": name, "arguments": ""}}]}),
                    None,
                )),
                Event::CallArguments { index, fragment } => out.push(self.chunk(
                    json!({"tool_calls": [{"index": index, "function": {"arguments": fragment}}]}),
                    None,
                )),
                Event::CallEnd(..) => {}
            }
        }
        if let Some(end) = &batch.end {
            self.end_events(end, include_usage, out);
        }
    }

    fn end_events(&self, end: &Ending, include_usage: bool, out: &mut Vec<String>) {
        if let Some(error) = &end.error {
            let failed = ServiceError::Failed {
                message: error.message.clone(),
            };
            out.push(error_body(&failed).to_string());
        } else {
            out.push(self.chunk(json!({}), Some(finish_reason(end.finish))));
            if include_usage {
                let mut chunk = self.envelope(true, json!([]));
                chunk["usage"] = usage(&end.usage);
                out.push(chunk.to_string());
            }
        }
        out.push("[DONE]".to_owned());
    }
}

/// A response's chunks as they stream: the role first (chat), then each
/// batch's.
#[derive(Debug)]
pub struct Chunks {
    /// What every chunk repeats.
    pub ids: Ids,
    /// A usage chunk before `[DONE]`.
    pub include_usage: bool,
    /// Bytes of the completion so far (text completions' `text_offset`).
    pub offset: usize,
}

impl Framer for Chunks {
    type Frame = String;

    fn start(&mut self, out: &mut Vec<String>) {
        if self.ids.kind == Kind::Chat {
            out.push(self.ids.role_chunk());
        }
    }

    fn batch(&mut self, batch: &Batch, out: &mut Vec<String>) {
        let logprobs = (!batch.logprobs.is_empty()).then(|| match self.ids.kind {
            Kind::Chat => logprobs::value(&logprobs::Chat(&batch.logprobs)),
            Kind::Completion => logprobs::value(&logprobs::Completion {
                entries: &batch.logprobs,
                offset: self.offset,
            }),
        });
        self.offset += batch
            .logprobs
            .iter()
            .map(|e| e.bytes().len())
            .sum::<usize>();
        self.ids
            .batch_events(batch, self.include_usage, logprobs, out);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_streamed_text_event_is_the_chunk_of_its_delta() {
        for kind in [Kind::Chat, Kind::Completion] {
            let ids = Ids {
                id: "chatcmpl-1".into(),
                created: 7,
                model: "mock".into(),
                kind,
            };
            let text = "é \"quoted\"\n";
            for thinking in [false, true] {
                let field = if thinking {
                    "reasoning_content"
                } else {
                    "content"
                };
                let expected: Value =
                    serde_json::from_str(&ids.chunk(json!({ field: text }), None)).unwrap();
                let event: Value =
                    serde_json::from_str(&ids.text_event(text, thinking, None)).unwrap();
                assert_eq!(event, expected, "{kind:?} thinking={thinking}");
            }
            let stamped: Value =
                serde_json::from_str(&ids.text_event(text, false, Some(42))).unwrap();
            assert_eq!(stamped["produced_ns"], 42);
        }
    }
}
