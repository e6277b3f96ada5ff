//! MCP tools: `tools/list` offers `generate`; `tools/call generate` runs a
//! generation, sends each new fragment as `notifications/progress` when
//! the caller gave a progress token, and answers with the whole text.
//!
//! Per MCP, problems with the arguments and failures of the generation are
//! tool results with `isError: true` (the model can read and correct
//! them); only an unknown tool or malformed params are JSON-RPC errors.

use serde_json::{Map, Value, json};

use super::context::{Handled, RequestCtx, Services, done};
use super::generate::{finish_reason, prepare, start_private, summarize};
use super::params::{GENERATION_FIELDS, Params};
use super::{RpcError, codes};
use crate::service::ALL_OVERRIDES;
use crate::service::{Batch, Completed, Event, Finish, ServiceError, Step};

/// The tool's name.
pub const GENERATE: &str = "generate";

/// The `tools/list` result.
pub(super) fn tools_list() -> Value {
    json!({
        "tools": [{
            "name": GENERATE,
            "title": "Generate text",
            "description": "Generate text for a prompt on the NPU. With a progress token, \
                            each new fragment arrives as a progress notification.",
            "inputSchema": {
                "type": "object",
                "properties": {
                    "prompt": {"type": "string", "description": "The user input."},
                    "max_tokens": {"type": "integer", "minimum": 1, "description": "Cap on generated tokens."},
                    "temperature": {"type": "number", "minimum": 0, "maximum": 2},
                    "top_p": {"type": "number", "exclusiveMinimum": 0, "maximum": 1},
                    "top_k": {"type": "integer", "minimum": 0, "maximum": 1000},
                    "model": {"type": "string", "description": "Model name (see `models`); the default model if absent."},
                    "lora": {"type": "string", "description": "A LoRA adapter of the model (see `models`)."},
                    "stop": {
                        "type": "array",
                        "items": {"type": "string"},
                        "description": "Strings that end the answer (not included)."
                    },
                    "enable_thinking": {"type": "boolean", "description": "Thinking on or off, for reasoning models."},
                    "format": {
                        "anyOf": [{"type": "string", "enum": ["text", "json"]}, {"type": "object"}],
                        "description": "The answer's shape: \"text\" (the default), \"json\" (a JSON object) or a JSON schema the answer is held to."
                    },
                    "priority": {"type": "string", "enum": ["interactive", "background"], "description": "The lane of the model's queue: background work waits for every interactive request and runs with thinking off."},
                    "images": {
                        "type": "array",
                        "items": {"type": "string"},
                        "description": "Images for a vision model, as base64 or data URLs (JPEG, PNG, WebP), one per `<image>` tag of the prompt, or placed before it."
                    }
                },
                "required": ["prompt"]
            },
            "outputSchema": {
                "type": "object",
                "properties": {
                    "text": {"type": "string"},
                    "thinking": {"type": "string", "description": "A reasoning model's thinking, apart from the answer."},
                    "finish_reason": {"type": "string", "enum": ["stop", "length", "abort", "error"]},
                    "usage": {
                        "type": "object",
                        "properties": {
                            "prompt_tokens": {"type": "integer"},
                            "completion_tokens": {"type": "integer"}
                        }
                    }
                },
                "required": ["text", "finish_reason", "usage"]
            },
            "annotations": {"readOnlyHint": true, "openWorldHint": false}
        }]
    })
}

fn tool_error(message: impl Into<String>) -> Result<Handled, RpcError> {
    let message = message.into();
    done(&json!({
        "content": [{"type": "text", "text": message}],
        "isError": true
    }))
}

/// Why reading the generation stopped before its end.
enum Stop {
    /// The caller went away while a progress notification was sent.
    Gone,
    /// The service's error (the stream expired).
    Service(ServiceError),
}

impl From<ServiceError> for Stop {
    fn from(err: ServiceError) -> Self {
        Self::Service(err)
    }
}

/// The progress notifications of one call: each new fragment of text or
/// thinking, counted in tokens (at least one more each time). Before them,
/// a long prompt prefilled in chunks is told as a fraction below 1 (the
/// share prefilled), so that one sequence rises through both.
struct Progress {
    token: Value,
    total: Option<u64>,
    progress: u64,
}

impl Progress {
    /// The notification for a prefill in chunks that has `tokens` of its
    /// `of` prompt tokens prefilled: `progress` is the share prefilled
    /// (below 1, where the tokens generated begin), with no `total` and no
    /// `message` (the message is the answer's text), and
    /// `_meta.prefill {tokens, of}`. None once generating, or for a
    /// prefill that is over. The share rises because a stream hands out
    /// each new, larger position once.
    fn prefill(&self, tokens: u32, of: u32) -> Option<String> {
        if self.progress > 0 || tokens >= of {
            return None;
        }
        let share = f64::from(tokens) / f64::from(of);
        let params = json!({"progressToken": self.token, "progress": share,
                            "_meta": {"prefill": {"tokens": tokens, "of": of}}});
        let note = json!({"jsonrpc": "2.0", "method": "notifications/progress", "params": params});
        Some(note.to_string())
    }

    /// The notifications for one batch, one per fragment.
    fn notes(&mut self, batch: &Batch) -> Vec<String> {
        let mut notes = Vec::new();
        for event in &batch.events {
            let (fragment, thinking) = match event {
                Event::Text(text) => (text, false),
                Event::Thinking(text) => (text, true),
                _ => continue,
            };
            self.progress = u64::from(batch.tokens).max(self.progress + 1);
            let mut params = json!({"progressToken": self.token, "progress": self.progress,
                                    "message": fragment});
            if let Some(total) = self.total {
                params["total"] = json!(total);
            }
            let mut meta = serde_json::Map::new();
            if thinking {
                meta.insert("thinking".into(), json!(true));
            }
            // Benchmark mode only: the oldest production time in the fragment.
            if let Some(produced_ns) = batch.produced_ns {
                meta.insert("produced_ns".into(), json!(produced_ns));
            }
            if !meta.is_empty() {
                params["_meta"] = Value::Object(meta);
            }
            let note =
                json!({"jsonrpc": "2.0", "method": "notifications/progress", "params": params});
            notes.push(note.to_string());
        }
        notes
    }
}

/// The caller's progress token, when it gave one of the types MCP allows.
fn progress_token(p: &Params) -> Option<Value> {
    p.0.get("_meta")
        .and_then(|m| m.get("progressToken"))
        .filter(|t| t.is_string() || t.is_i64() || t.is_u64())
        .cloned()
}

/// `tools/call`.
pub(super) async fn tools_call(
    state: &Services,
    ctx: &RequestCtx<'_>,
    mut p: Params,
) -> Result<Handled, RpcError> {
    let name = p.req_str("name")?;
    if name != GENERATE {
        return Err(RpcError::invalid_params(
            "name",
            format!("Unknown tool: {name}"),
        ));
    }
    let token = progress_token(&p);
    let arguments = match p.0.remove("arguments") {
        None | Some(Value::Null) => Map::new(),
        Some(Value::Object(map)) => map,
        Some(_) => return tool_error("`arguments` must be an object"),
    };
    let mut args = Params(arguments);
    if let Err(err) = args.only(GENERATE, &[GENERATION_FIELDS, ALL_OVERRIDES]) {
        return tool_error(err.message);
    }
    let prepared = match prepare(state, &mut args).await {
        Ok(prepared) => prepared,
        Err(err) => return tool_error(err.message),
    };
    let total = prepared.run.max_tokens;
    let running = match start_private(state, ctx, prepared) {
        Ok(started) => started,
        Err(err) => return tool_error(err.message),
    };
    let notifier = ctx.notifier.filter(|_| token.is_some());
    let mut progress = token.map(|token| Progress {
        token,
        total,
        progress: 0,
    });
    let collected = running
        .collect_steps(|step| {
            let notes = match (notifier, &mut progress, step) {
                (Some(_), Some(progress), Step::Batch(batch)) => progress.notes(batch),
                (Some(_), Some(progress), &Step::Prefill { tokens, of }) => {
                    progress.prefill(tokens, of).into_iter().collect()
                }
                _ => Vec::new(),
            };
            async move {
                for note in notes {
                    if let Some(notifier) = notifier
                        && !notifier.send(note).await
                    {
                        return Err(Stop::Gone);
                    }
                }
                Ok(())
            }
        })
        .await;
    match collected {
        Ok(completed) => answer(ctx, &completed),
        // The caller is gone: the generation was dropped, which aborted it.
        Err(Stop::Gone) => Err(RpcError::new(codes::INTERNAL_ERROR, "the client went away")),
        // The stream expired: "the generation expired".
        Err(Stop::Service(err)) => tool_error(err.to_string()),
    }
}

/// The tool's result for a generation read to its end.
fn answer(ctx: &RequestCtx<'_>, completed: &Completed) -> Result<Handled, RpcError> {
    summarize(ctx, completed);
    if let Some(error) = &completed.ending.error {
        return tool_error(format!("generation failed: {}", error.message));
    }
    if completed.ending.finish == Finish::Abort {
        return tool_error("the generation was aborted");
    }
    let mut structured = json!({"text": completed.text,
                                "finish_reason": finish_reason(completed.ending.finish),
                                "usage": completed.ending.usage});
    if !completed.thinking.is_empty() {
        structured["thinking"] = json!(completed.thinking);
    }
    done(&json!({
        "content": [{"type": "text", "text": completed.text}],
        "structuredContent": structured,
        "isError": false
    }))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_generate_tool_offers_every_shape_of_format() {
        let list = tools_list();
        let format = &list["tools"][0]["inputSchema"]["properties"]["format"];
        let shapes = format["anyOf"]
            .as_array()
            .expect("format is a choice of shapes");
        assert_eq!(shapes[0]["enum"], json!(["text", "json"]));
        assert_eq!(shapes[1]["type"], "object");
    }
}
