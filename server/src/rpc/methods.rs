//! The methods of PROTOCOL §3: `initialize`, `ping`, `run` (non-streaming,
//! streaming, polling), `subscribe`, `abort`, `stream_status`, `models`.
//! Each reads its params, calls the generation service (which owns the
//! models and the streams), and shapes the result; no business logic lives
//! here.

use std::time::Duration;

use serde::Serialize;
use serde_json::{Value, json};

use super::connection::Connection;
use super::context::{Handled, RequestCtx, Services, done, raw};
use super::generate::{finish_reason, prepare, start_private, submit, summarize};
use super::message::params_object;
use super::params::{GENERATION_FIELDS, Params};
use super::wire::ChunkJson;
use super::{PROTOCOL_VERSIONS, RpcError, codes};
use crate::service::streams::{PollError, StreamState};
use crate::service::{ALL_OVERRIDES, KeepAlive};
use crate::vocab::{FinishReason, Timings, Usage};

/// Longest long poll.
pub const MAX_WAIT_MS: u64 = 30_000;

/// Calls `method`; unknown methods are -32601. A request of MCP's
/// stateless revision (its `_meta` names a version) is served as that
/// revision says ([`super::modern`]).
pub(super) async fn call(
    state: &Services,
    conn: &Connection,
    ctx: &RequestCtx<'_>,
    method: &str,
    params: Option<Value>,
) -> Result<Handled, RpcError> {
    use super::modern;
    if modern::requested_version(params.as_ref()).is_none() {
        if method == "server/discover" {
            return modern::discover();
        }
        return call_legacy(state, conn, ctx, method, params).await;
    }
    modern::check_meta(params.as_ref())?;
    match method {
        "server/discover" => modern::discover(),
        "tools/list" => modern::answer(call_legacy(state, conn, ctx, method, params).await?, true),
        "tools/call" => modern::answer(call_legacy(state, conn, ctx, method, params).await?, false),
        m if modern::removed(m) => Err(RpcError::method_not_found(m)),
        _ => call_legacy(state, conn, ctx, method, params).await,
    }
}

/// Calls `method` as the handshake revisions and JSON-RPC clients have it.
async fn call_legacy(
    state: &Services,
    conn: &Connection,
    ctx: &RequestCtx<'_>,
    method: &str,
    params: Option<Value>,
) -> Result<Handled, RpcError> {
    match method {
        "initialize" => initialize(conn, params),
        "ping" => done(&json!({})),
        "run" => run(state, conn, ctx, Params(params_object(params)?)).await,
        "tools/list" => done(&super::mcp::tools_list()),
        "tools/call" => super::mcp::tools_call(state, ctx, Params(params_object(params)?)).await,
        "subscribe" => subscribe(state, conn, Params(params_object(params)?)),
        "abort" => abort(state, Params(params_object(params)?)),
        "stream_status" => stream_status(state, Params(params_object(params)?)),
        "models" => {
            Params(params_object(params)?).only("models", &[])?;
            done(&json!({ "models": state.service.models() }))
        }
        "load" => load(state, Params(params_object(params)?)).await,
        "unload" => unload(state, Params(params_object(params)?)).await,
        "embed" => embed(state, Params(params_object(params)?)).await,
        "clear_kv_cache" => clear_kv_cache(state, ctx, Params(params_object(params)?)).await,
        other => Err(RpcError::method_not_found(other)),
    }
}

/// Acts on a notification; nothing is ever answered. Unknown ones and
/// broken ones are ignored.
pub(super) fn notify(state: &Services, conn: &Connection, method: &str, params: Option<Value>) {
    let Ok(map) = params_object(params) else {
        return;
    };
    match method {
        "abort" => {
            if let Ok(stream) = Params(map)
                .req_str("stream_id")
                .and_then(|id| Ok(state.service.stream(&id)?))
            {
                stream.abort("client");
            }
        }
        "notifications/cancelled" => {
            if let Some(id) = map.get("requestId") {
                conn.cancel_request(id);
            }
        }
        _ => {}
    }
}

/// `load {model?, keep_alive?}`: loads a model now (a failed one is
/// retried) and answers once it is loaded.
async fn load(state: &Services, mut p: Params) -> Result<Handled, RpcError> {
    p.only("load", &[&["model", "keep_alive"]])?;
    let model = p.opt_str("model")?;
    let keep_alive = keep_alive(&p)?;
    let name = state.service.load(model.as_deref(), keep_alive).await?;
    let info = state.service.model(Some(&name)).ok();
    done(&json!({ "model": name, "state": "loaded", "info": info }))
}

/// `unload {model?}`: unloads a model once its current generation is over.
async fn unload(state: &Services, mut p: Params) -> Result<Handled, RpcError> {
    p.only("unload", &[&["model"]])?;
    let model = p.opt_str("model")?;
    let (name, was_loaded) = state.service.unload(model.as_deref()).await?;
    done(&json!({ "model": name, "state": "available", "was_loaded": was_loaded }))
}

/// `embed {input, model?}`: the embedding of each text of
/// `input` (a string or an array of strings), run one after another in
/// the model's queue.
async fn embed(state: &Services, mut p: Params) -> Result<Handled, RpcError> {
    p.only("embed", &[&["input", "model"]])?;
    let model = p.opt_str("model")?;
    let input = p.0.remove("input").unwrap_or(Value::Null);
    let embedded = state.service.embed(model, &input, None).await?;
    let embeddings: Vec<&[f32]> = embedded.vectors.iter().map(|v| &v[..]).collect();
    done(&json!({
        "model": embedded.model,
        "embeddings": embeddings,
        "usage": {"prompt_tokens": embedded.prompt_tokens}
    }))
}

/// `clear_kv_cache {model?}`: empties the model's KV cache (the chat
/// history its runtime holds), in turn with its queue; a model that is not
/// loaded holds nothing and is not loaded for it.
async fn clear_kv_cache(
    state: &Services,
    ctx: &RequestCtx<'_>,
    mut p: Params,
) -> Result<Handled, RpcError> {
    p.only("clear_kv_cache", &[&["model"]])?;
    let model = p.opt_str("model")?;
    let info = state.service.model(model.as_deref())?;
    if !info.loaded {
        return done(&json!({ "model": info.name, "cleared": false, "loaded": false }));
    }
    let prepared = state.service.clear_cache(&info.name);
    let cleared = start_private(state, ctx, prepared)?.collect().await?;
    if let Some(err) = &cleared.ending.error {
        return Err(RpcError::new(codes::GENERATION_FAILED, err.message.clone()));
    }
    let after = state.service.model(Some(&info.name)).ok();
    done(&json!({
        "model": info.name,
        "cleared": true,
        "kv_cache_tokens": after.and_then(|m| m.kv_cache_tokens),
    }))
}

fn keep_alive(p: &Params) -> Result<Option<KeepAlive>, RpcError> {
    p.get("keep_alive")
        .map(|v| {
            KeepAlive::parse(v).map_err(|message| RpcError::invalid_params("keep_alive", message))
        })
        .transpose()
}

fn initialize(conn: &Connection, params: Option<Value>) -> Result<Handled, RpcError> {
    let mut p = Params(params_object(params)?);
    let requested = p.opt_str("protocolVersion")?;
    let version = requested
        .as_deref()
        .and_then(|v| PROTOCOL_VERSIONS.iter().find(|s| **s == v))
        .copied()
        .unwrap_or(PROTOCOL_VERSIONS[0]);
    conn.set_protocol(version);
    done(&json!({
        "protocolVersion": version,
        "capabilities": { "tools": { "listChanged": false }, "streaming": true },
        "serverInfo": { "name": "rkllm-server", "version": env!("CARGO_PKG_VERSION") },
        "instructions": super::modern::INSTRUCTIONS,
    }))
}

async fn run(
    state: &Services,
    conn: &Connection,
    ctx: &RequestCtx<'_>,
    mut p: Params,
) -> Result<Handled, RpcError> {
    p.only(
        "run",
        &[
            GENERATION_FIELDS,
            ALL_OVERRIDES,
            &["stream", "stream_id", "from_seq", "wait_ms"],
        ],
    )?;
    if p.has("stream_id") {
        if p.has("prompt") {
            return Err(RpcError::invalid_params(
                "prompt",
                "`prompt` cannot be combined with `stream_id`: a poll reads an existing stream",
            ));
        }
        return poll(state, p).await;
    }
    let streaming = p.opt_bool("stream")?.unwrap_or(false);
    let prepared = prepare(state, &mut p).await?;
    if streaming {
        let stream = submit(state, ctx, prepared, !conn.can_push())?;
        let subscribe = conn.can_push().then(|| stream.attach(0));
        return Ok(Handled {
            result: raw(&json!({ "stream_id": stream.id(), "status": "streaming_started" }))?,
            subscribe,
            started: Some(stream.id().to_owned()),
        });
    }
    // Dropping this future (the client left) drops the generation, which
    // aborts it.
    let completed = start_private(state, ctx, prepared)?.collect().await?;
    summarize(ctx, &completed);
    if let Some(error) = &completed.ending.error {
        return Err(RpcError::from(error).with_data(json!({ "text": completed.text })));
    }
    done(&RunResult {
        text: &completed.text,
        thinking: &completed.thinking,
        finish_reason: finish_reason(completed.ending.finish),
        usage: completed.ending.usage,
        timings: completed.ending.timings.unwrap_or_default(),
    })
}

#[derive(Serialize)]
struct RunResult<'a> {
    text: &'a str,
    /// A reasoning model's thinking, apart from the answer.
    #[serde(skip_serializing_if = "str::is_empty")]
    thinking: &'a str,
    finish_reason: FinishReason,
    usage: Usage,
    timings: Timings,
}

fn poll_error(err: PollError) -> RpcError {
    match err {
        PollError::Expired => RpcError::new(codes::STREAM_EXPIRED, "stream expired"),
        PollError::Ahead { next_seq } => RpcError::invalid_params(
            "from_seq",
            format!("`from_seq` must be at most {next_seq}, the stream's next seq"),
        ),
    }
}

async fn poll(state: &Services, mut p: Params) -> Result<Handled, RpcError> {
    let id = p.req_str("stream_id")?;
    let from_seq = p.opt_int("from_seq", 0, u64::MAX)?.unwrap_or(0);
    let wait_ms = p.opt_int("wait_ms", 0, MAX_WAIT_MS)?.unwrap_or(0);
    let stream = state.service.stream(&id)?;
    let mut batch = stream.poll(from_seq).map_err(poll_error)?;
    if batch.chunks.is_empty() && batch.has_more && wait_ms > 0 {
        // Timing out is a normal outcome: the empty batch is returned.
        let _ =
            tokio::time::timeout(Duration::from_millis(wait_ms), stream.wait_for(from_seq)).await;
        batch = stream.poll(from_seq).map_err(poll_error)?;
    }
    let chunks: Vec<ChunkJson<'_>> = batch
        .chunks
        .iter()
        .map(|c| ChunkJson::new(c, None))
        .collect();
    done(&json!({ "stream_id": id, "chunks": chunks, "has_more": batch.has_more }))
}

fn subscribe(state: &Services, conn: &Connection, mut p: Params) -> Result<Handled, RpcError> {
    p.only("subscribe", &[&["stream_id", "from_seq"]])?;
    let id = p.req_str("stream_id")?;
    let from_seq = p.opt_int("from_seq", 0, u64::MAX)?.unwrap_or(0);
    if !conn.can_push() {
        return Err(RpcError::invalid_request(
            "`subscribe` needs a push transport (WebSocket or stdio); over HTTP, poll with `run` {stream_id, from_seq}",
        ));
    }
    let stream = state.service.stream(&id)?;
    if stream.status().0 == StreamState::Expired {
        return Err(RpcError::new(codes::STREAM_EXPIRED, "stream expired"));
    }
    Ok(Handled {
        result: raw(&json!({ "stream_id": id, "status": "subscribed" }))?,
        subscribe: Some(stream.attach(from_seq)),
        started: None,
    })
}

fn abort(state: &Services, mut p: Params) -> Result<Handled, RpcError> {
    p.only("abort", &[&["stream_id"]])?;
    let stream = state.service.stream(&p.req_str("stream_id")?)?;
    if stream.abort("client") {
        done(&json!({ "aborted": true }))
    } else {
        let (stream_state, _) = stream.status();
        Err(RpcError::new(
            codes::INVALID_STATE,
            format!("the stream has already ended (state {stream_state:?})").to_lowercase(),
        ))
    }
}

fn stream_status(state: &Services, mut p: Params) -> Result<Handled, RpcError> {
    p.only("stream_status", &[&["stream_id"]])?;
    let stream = state.service.stream(&p.req_str("stream_id")?)?;
    let (stream_state, next_seq) = stream.status();
    let mut result = json!({ "state": stream_state, "next_seq": next_seq });
    if stream_state == StreamState::Queued {
        // 0: out of the queue, its model loading or waiting for a place
        // (the stream is `initializing` once its prefill starts).
        let position = state.service.queue_position(&stream).unwrap_or(0);
        result["queue_position"] = json!(position);
    }
    if let Some((tokens, of)) = stream.prefill() {
        result["prefill"] = json!({"tokens": tokens, "of": of});
    }
    done(&result)
}
