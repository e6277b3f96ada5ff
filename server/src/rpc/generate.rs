//! Starting and reading generations, shared by `run` and the MCP
//! `generate` tool: request parameters into the generation service's
//! request, the per-connection stream limit, and private generations
//! read to their end (once, by the service).

use std::sync::Arc;

use serde_json::Value;

use super::RpcError;
use super::context::{RequestCtx, Services, Summary};
use super::params::Params;
use crate::service::streams::Stream;
use crate::service::{
    Completed, Generate, ImageSource, Input, OutputFormat, Prepared, Priority, Role, Running,
    Sampling, ServiceError,
};
use crate::vocab::FinishReason;

/// The generation a `run` or `generate` call's parameters ask for,
/// checked and ready for the engine.
pub(super) async fn prepare(state: &Services, p: &mut Params) -> Result<Prepared, RpcError> {
    let role = match p.opt_str("role")?.as_deref() {
        None | Some("user") => Role::User,
        Some("tool") => Role::Tool,
        Some(other) => {
            return Err(RpcError::invalid_params(
                "role",
                format!("`role` must be \"user\" or \"tool\", got {other:?}"),
            ));
        }
    };
    let text = p.req_str("prompt")?;
    let images = images(p)?;
    let stop = match p.0.remove("stop") {
        None | Some(Value::Null) => Vec::new(),
        Some(Value::String(s)) => vec![s],
        Some(Value::Array(items)) if items.iter().all(Value::is_string) => items
            .into_iter()
            .filter_map(|v| v.as_str().map(str::to_owned))
            .collect(),
        Some(_) => {
            return Err(RpcError::invalid_params(
                "stop",
                "`stop` must be a string or an array of strings",
            ));
        }
    };
    let format = match p.0.remove("format") {
        None | Some(Value::Null) => OutputFormat::Text,
        Some(Value::String(s)) if s == "text" => OutputFormat::Text,
        Some(Value::String(s)) if s == "json" => OutputFormat::JsonObject,
        Some(schema @ Value::Object(_)) => OutputFormat::JsonSchema {
            name: None,
            schema,
            strict: false,
        },
        Some(_) => {
            return Err(RpcError::invalid_params(
                "format",
                "`format` must be \"text\", \"json\" or a JSON schema object",
            ));
        }
    };
    let priority = priority(p)?;
    let request = Generate {
        model: p.opt_str("model")?,
        input: Input::Prompt {
            text,
            system: None,
            role,
            images,
        },
        max_tokens: p.opt_int("max_tokens", 0, u64::MAX)?,
        sampling: Sampling {
            temperature: p.opt_f64("temperature")?,
            top_p: p.opt_f64("top_p")?,
            top_k: p.opt_int("top_k", 0, 1000)?.map(|k| k as u32),
            repeat_penalty: p.opt_f64("repeat_penalty")?,
            frequency_penalty: p.opt_f64("frequency_penalty")?,
            presence_penalty: p.opt_f64("presence_penalty")?,
            mirostat: p.opt_int("mirostat", 0, 2)?.map(|m| m as u8),
            mirostat_tau: p.opt_f64("mirostat_tau")?,
            mirostat_eta: p.opt_f64("mirostat_eta")?,
            thinking_budget: None,
            logprobs: None,
            seed: p.opt_int("seed", 0, u64::MAX)?,
        },
        stop,
        thinking: p.opt_bool("enable_thinking")?,
        lora: p.opt_str("lora")?,
        format,
        format_field: "format",
        ..Generate::default()
    };
    Ok(state.service.prepare_in(request, priority).await?)
}

/// `priority`: `"interactive"` or `"background"` (the lane of the model's
/// queue the request waits in).
fn priority(p: &mut Params) -> Result<Option<Priority>, RpcError> {
    let Some(value) = p.opt_str("priority")? else {
        return Ok(None);
    };
    Priority::parse(&value).map(Some).ok_or_else(|| {
        RpcError::invalid_params(
            "priority",
            format!("`priority` must be \"interactive\" or \"background\", got {value:?}"),
        )
    })
}

/// `images`: an array of base64 strings or `data:` URLs.
fn images(p: &mut Params) -> Result<Vec<ImageSource>, RpcError> {
    let Some(value) = p.0.remove("images").filter(|v| !v.is_null()) else {
        return Ok(Vec::new());
    };
    let Value::Array(items) = value else {
        return Err(RpcError::invalid_params(
            "images",
            "`images` must be an array of base64 strings or data URLs",
        ));
    };
    items
        .iter()
        .enumerate()
        .map(|(i, item)| {
            let text = item.as_str().ok_or_else(|| {
                RpcError::invalid_params(
                    "images",
                    format!("image {} must be a base64 string or a data URL", i + 1),
                )
            })?;
            crate::service::decode_base64_image(text)
                .map(ImageSource::Inline)
                .map_err(|e| RpcError::invalid_params("images", format!("image {} {e}", i + 1)))
        })
        .collect()
}

/// Submits a request, counting its stream against the connection's limit.
pub(super) fn submit(
    state: &Services,
    ctx: &RequestCtx<'_>,
    prepared: Prepared,
    polled: bool,
) -> Result<Arc<Stream>, RpcError> {
    let limit = state.limits.max_streams_per_connection;
    if !ctx.conn.has_room_for_stream(limit) {
        return Err(ServiceError::Busy {
            message: format!(
                "server busy: this connection already has {limit} unfinished streams \
                 (limits.max_streams_per_connection)"
            ),
            retry_after_ms: 1000,
        }
        .into());
    }
    let stream = state.service.submit(prepared, polled)?;
    ctx.conn.track_stream(&stream);
    Ok(stream)
}

/// Records a finished generation for the request's log line.
pub(super) fn summarize(ctx: &RequestCtx<'_>, done: &Completed) {
    *ctx.summary.lock() = Some(Summary {
        model: done.model.clone(),
        finish_reason: finish_reason(done.ending.finish).as_str(),
        tokens: done.ending.usage.completion_tokens,
    });
}

/// Starts a generation whose stream only this request reads (a
/// non-streaming `run`, an MCP `tools/call`): cancelling the request
/// aborts it, and dropping it forgets the stream.
pub(super) fn start_private(
    state: &Services,
    ctx: &RequestCtx<'_>,
    prepared: Prepared,
) -> Result<Running, RpcError> {
    let reads_tool_calls = prepared.reads_tool_calls;
    let stream = submit(state, ctx, prepared, false)?;
    let aborted = Arc::clone(&stream);
    ctx.cancel.on_cancel(move || {
        aborted.abort("cancelled");
    });
    Ok(Running::new(
        state.service.private(stream),
        reads_tool_calls,
    ))
}

/// The finish reason a completed generation reports on this protocol.
pub(super) fn finish_reason(finish: crate::service::Finish) -> FinishReason {
    use crate::service::Finish;
    match finish {
        Finish::Stop | Finish::ToolCalls => FinishReason::Stop,
        Finish::Length => FinishReason::Length,
        Finish::Abort => FinishReason::Abort,
        Finish::Error => FinishReason::Error,
    }
}
