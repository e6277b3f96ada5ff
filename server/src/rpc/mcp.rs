//! MCP tools: `tools/list` offers `generate`; `tools/call generate` runs a
//! generation, sends each new fragment as `notifications/progress` when
//! the caller gave a progress token, and answers with the whole text.
//!
//! Per MCP, problems with the arguments and failures of the generation are
//! tool results with `isError: true` (the model can read and correct
//! them); only an unknown tool or malformed params are JSON-RPC errors.

use serde_json::{Map, Value, json};

use super::context::{Handled, RequestCtx, Services, done};
use super::generate::{run_request, start_private, summarize};
use super::params::{GENERATION_FIELDS, Params};
use super::{RpcError, codes};
use crate::engine::ALL_OVERRIDES;
use crate::vocab::FinishReason;

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
    let token =
        p.0.get("_meta")
            .and_then(|m| m.get("progressToken"))
            .filter(|t| t.is_string() || t.is_i64() || t.is_u64())
            .cloned();
    let arguments = match p.0.remove("arguments") {
        None | Some(Value::Null) => Map::new(),
        Some(Value::Object(map)) => map,
        Some(_) => return tool_error("`arguments` must be an object"),
    };
    let mut args = Params(arguments);
    if let Err(err) = args.only(GENERATE, &[GENERATION_FIELDS, ALL_OVERRIDES]) {
        return tool_error(err.message);
    }
    let request = match run_request(&mut args) {
        Ok(request) => request,
        Err(err) => return tool_error(err.message),
    };
    let total = request.max_tokens;
    let mut private = match start_private(state, ctx, request) {
        Ok(started) => started,
        Err(err) => return tool_error(err.message),
    };
    let notifier = ctx.notifier.filter(|_| token.is_some());
    let mut text = String::new();
    let mut progress: u64 = 0;
    loop {
        let batch = private.consumer.next_batch().await;
        if batch.is_empty() {
            return tool_error("the generation expired");
        }
        let start = text.len();
        let mut end = None;
        for chunk in &batch {
            text.push_str(&chunk.delta);
            if chunk.end.is_some() {
                end = chunk.end.clone();
            }
        }
        let fragment = &text[start..];
        if let (Some(notifier), Some(token), false) = (notifier, &token, fragment.is_empty()) {
            let tokens = batch.iter().map(|c| u64::from(c.tokens)).max().unwrap_or(0);
            progress = tokens.max(progress + 1);
            let mut params =
                json!({"progressToken": token, "progress": progress, "message": fragment});
            if let Some(total) = total {
                params["total"] = json!(total);
            }
            // Benchmark mode only: the oldest production time in the fragment.
            if let Some(produced_ns) = batch.iter().filter_map(|c| c.produced_ns).min() {
                params["_meta"] = json!({"produced_ns": produced_ns});
            }
            let note =
                json!({"jsonrpc": "2.0", "method": "notifications/progress", "params": params});
            if !notifier.send(note.to_string()).await {
                // The caller is gone: dropping the consumer aborts the run.
                return Err(RpcError::new(codes::INTERNAL_ERROR, "the client went away"));
            }
        }
        if let Some(end) = end {
            summarize(ctx, private.stream(), &end);
            if let Some(error) = &end.error {
                return tool_error(format!("generation failed: {}", error.message));
            }
            if end.finish_reason == FinishReason::Abort {
                return tool_error("the generation was aborted");
            }
            return done(&json!({
                "content": [{"type": "text", "text": text}],
                "structuredContent": {"text": text, "finish_reason": end.finish_reason, "usage": end.usage},
                "isError": false
            }));
        }
    }
}
