//! Starting and reading generations, shared by `run` and the MCP
//! `generate` tool: request parameters into an engine request, the
//! per-connection stream limit, and reading a stream to its end.

use std::sync::Arc;

use serde_json::json;

use super::context::{RequestCtx, Services, Summary};
use super::params::Params;
use super::{RpcError, codes};
use crate::backend::image::decode_base64_image;
use crate::backend::{IMAGE_TAG, ImageData};
use crate::engine::{Role, RunRequest, Sampling};
use crate::stream::{Consumer, PrivateStream, Stream};
use crate::vocab::EndInfo;

pub(super) fn run_request(p: &mut Params) -> Result<RunRequest, RpcError> {
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
    let mut prompt = p.req_str("prompt")?;
    let images = images(p)?;
    if !images.is_empty() && !prompt.contains(IMAGE_TAG) {
        // Without tags of their own, the images go before the text.
        prompt = IMAGE_TAG.repeat(images.len()) + &prompt;
    }
    Ok(RunRequest {
        prompt,
        model: p.opt_str("model")?,
        max_tokens: p.opt_int("max_tokens", 0, u64::MAX)?,
        sampling: Sampling {
            temperature: p.opt_f64("temperature")?,
            top_p: p.opt_f64("top_p")?,
            top_k: p.opt_int("top_k", 0, 1000)?.map(|k| k as u32),
            repeat_penalty: p.opt_f64("repeat_penalty")?,
            frequency_penalty: p.opt_f64("frequency_penalty")?,
            presence_penalty: p.opt_f64("presence_penalty")?,
        },
        role,
        enable_thinking: p.opt_bool("enable_thinking")?,
        conversation: None,
        tools: None,
        images,
        embed: false,
        clear_cache: false,
        lora: p.opt_str("lora")?,
        stop: Vec::new(),
    })
}

/// `images`: an array of base64 strings or `data:` URLs.
fn images(p: &mut Params) -> Result<Vec<ImageData>, RpcError> {
    let Some(value) = p.0.remove("images").filter(|v| !v.is_null()) else {
        return Ok(Vec::new());
    };
    let serde_json::Value::Array(items) = value else {
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
            decode_base64_image(text)
                .map(ImageData)
                .map_err(|e| RpcError::invalid_params("images", format!("image {} {e}", i + 1)))
        })
        .collect()
}

/// Submits a request, counting its stream against the connection's limit.
pub(super) fn submit(
    state: &Services,
    ctx: &RequestCtx<'_>,
    request: RunRequest,
    polled: bool,
) -> Result<Arc<Stream>, RpcError> {
    let limit = state.limits.max_streams_per_connection;
    if !ctx.conn.has_room_for_stream(limit) {
        return Err(RpcError::new(
            codes::SERVER_BUSY,
            format!("server busy: this connection already has {limit} unfinished streams (limits.max_streams_per_connection)"),
        )
        .with_data(json!({ "retry_after_ms": 1000 })));
    }
    let stream = state.engine.submit(request, polled)?;
    ctx.conn.track_stream(&stream);
    Ok(stream)
}

/// Records a finished generation for the request's log line.
pub(super) fn summarize(ctx: &RequestCtx<'_>, stream: &Stream, end: &EndInfo) {
    *ctx.summary.lock() = Some(Summary {
        model: stream.model().to_owned(),
        finish_reason: end.finish_reason.as_str(),
        tokens: end.usage.completion_tokens,
    });
}

/// Starts a generation whose stream only this request reads (a
/// non-streaming `run`, an MCP `tools/call`): cancelling the request
/// aborts it, and dropping the result forgets the stream.
pub(super) fn start_private(
    state: &Services,
    ctx: &RequestCtx<'_>,
    request: RunRequest,
) -> Result<PrivateStream, RpcError> {
    let stream = submit(state, ctx, request, false)?;
    let aborted = Arc::clone(&stream);
    ctx.cancel.on_cancel(move || {
        aborted.abort("cancelled");
    });
    Ok(PrivateStream::new(&state.streams, stream))
}

/// Reads a stream to its end; returns the joined text and the end info.
pub(super) async fn collect(consumer: &mut Consumer) -> Result<(String, Arc<EndInfo>), RpcError> {
    let mut text = String::new();
    loop {
        let batch = consumer.next_batch().await;
        if batch.is_empty() {
            return Err(RpcError::new(codes::STREAM_EXPIRED, "stream expired"));
        }
        for chunk in batch {
            text.push_str(&chunk.delta);
            if let Some(end) = chunk.end {
                return Ok((text, end));
            }
        }
    }
}
