//! What a model answers about texts without generating, in the shapes
//! llama.cpp's server and the rerank services (Jina, Cohere) use:
//! `POST /tokenize` and `/detokenize` by the model's tokenizer, and
//! `POST /rerank` (also `/v1/rerank`) by an embedding model. Errors are
//! in OpenAI's shape.

use std::sync::Arc;

use axum::body::Bytes;
use axum::extract::State;
use axum::response::{IntoResponse, Response};
use axum::routing::post;
use axum::{Json, Router};
use serde::Deserialize;
use serde_json::{Value, json};

use super::openai::OpenAiError;
use crate::service::{ServiceError, parse_body};
use crate::transport::state::AppState;

type Result<T> = std::result::Result<T, OpenAiError>;

/// The routes.
pub fn routes() -> Router<Arc<AppState>> {
    Router::new()
        .route("/tokenize", post(tokenize))
        .route("/detokenize", post(detokenize))
        .route("/rerank", post(rerank))
        .route("/v1/rerank", post(rerank))
        .route("/probe", post(probe))
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct ProbeRequest {
    #[serde(default)]
    model: Option<String>,
    #[serde(default = "yes")]
    measure: bool,
}

fn yes() -> bool {
    true
}

/// `POST /probe {model?, measure?}` → `{models: [...]}`: each model's
/// runtime (or the one named) probed again on the NPU, one after another
/// in their queues, with the board's figures unless `measure` is false
/// (what `rkllm-server doctor --probe` asks of a running service).
async fn probe(State(state): State<Arc<AppState>>, body: Bytes) -> Result<Response> {
    let request: ProbeRequest = if body.is_empty() {
        ProbeRequest {
            model: None,
            measure: true,
        }
    } else {
        parse_body(&body)?
    };
    let names: Vec<String> = match request.model {
        Some(name) => vec![name],
        None => state.service.models().into_iter().map(|m| m.name).collect(),
    };
    let mut models = Vec::with_capacity(names.len());
    for name in names {
        models.push(state.service.probe(Some(&name), request.measure).await?);
    }
    Ok(Json(json!({ "models": models })).into_response())
}

#[derive(Debug, Deserialize)]
struct TokenizeRequest {
    #[serde(default)]
    model: Option<String>,
    content: String,
    #[serde(default)]
    add_special: bool,
    #[serde(default)]
    with_pieces: bool,
}

/// `POST /tokenize {model?, content, add_special?, with_pieces?}` →
/// `{tokens}`: ids, or with `with_pieces` `{id, piece}` objects whose
/// piece is the token's text, or its bytes when it is only part of a
/// character.
async fn tokenize(State(state): State<Arc<AppState>>, body: Bytes) -> Result<Response> {
    let request: TokenizeRequest = parse_body(&body)?;
    let tokenized = state
        .service
        .tokenize(
            request.model.as_deref(),
            request.content,
            request.add_special,
            request.with_pieces,
        )
        .await?;
    // Written straight into the body: a long text's tokens are never a
    // JSON value each.
    let body = tokio::task::spawn_blocking(move || tokens_body(&tokenized))
        .await
        .map_err(|_| crate::service::ServiceError::Failed {
            message: "writing the tokens failed".into(),
        })?;
    Ok((
        [(axum::http::header::CONTENT_TYPE, "application/json")],
        body,
    )
        .into_response())
}

/// `{"tokens": [...]}`: ids, or `{"id", "piece"}` objects whose piece is
/// the token's text, or its bytes when it is only part of a character.
fn tokens_body(tokenized: &crate::service::Tokenized) -> Vec<u8> {
    use std::io::Write as _;
    let per_token = if tokenized.pieces.is_some() { 32 } else { 8 };
    let mut out = Vec::with_capacity(16 + tokenized.ids.len() * per_token);
    out.extend_from_slice(b"{\"tokens\":[");
    for (i, id) in tokenized.ids.iter().enumerate() {
        if i > 0 {
            out.push(b',');
        }
        let Some(pieces) = &tokenized.pieces else {
            let _ = write!(out, "{id}");
            continue;
        };
        let _ = write!(out, "{{\"id\":{id},\"piece\":");
        let bytes = pieces.get(i);
        let written = match std::str::from_utf8(bytes) {
            Ok(text) => serde_json::to_writer(&mut out, text),
            Err(_) => serde_json::to_writer(&mut out, bytes),
        };
        if written.is_err() {
            out.extend_from_slice(b"null");
        }
        out.push(b'}');
    }
    out.extend_from_slice(b"]}");
    out
}

#[derive(Debug, Deserialize)]
struct DetokenizeRequest {
    #[serde(default)]
    model: Option<String>,
    tokens: Vec<u32>,
}

/// `POST /detokenize {model?, tokens}` → `{content}`.
async fn detokenize(State(state): State<Arc<AppState>>, body: Bytes) -> Result<Response> {
    let request: DetokenizeRequest = parse_body(&body)?;
    let content = state
        .service
        .detokenize(request.model.as_deref(), request.tokens)
        .await?;
    Ok(Json(json!({"content": content})).into_response())
}

#[derive(Debug, Deserialize)]
struct RerankRequest {
    #[serde(default)]
    model: Option<String>,
    query: String,
    documents: Vec<Value>,
    #[serde(default)]
    top_n: Option<usize>,
    #[serde(default)]
    return_documents: Option<bool>,
}

/// A document's text: a string, or an object with `text` (Jina's and
/// Cohere's shape).
fn document_text(i: usize, document: &Value) -> std::result::Result<String, ServiceError> {
    match document {
        Value::String(text) => Ok(text.clone()),
        Value::Object(o) => o
            .get("text")
            .and_then(Value::as_str)
            .map(str::to_owned)
            .ok_or_else(|| {
                ServiceError::invalid(
                    "documents",
                    format!("`documents[{i}]` is an object without a `text` string"),
                )
            }),
        _ => Err(ServiceError::invalid(
            "documents",
            format!("`documents[{i}]` must be a string or an object with `text`"),
        )),
    }
}

/// `POST /rerank` and `/v1/rerank` `{model, query, documents, top_n?,
/// return_documents?}` → `{model, object, results: [{index,
/// relevance_score, document?}], usage}`, most relevant first.
async fn rerank(State(state): State<Arc<AppState>>, body: Bytes) -> Result<Response> {
    let request: RerankRequest = parse_body(&body)?;
    let texts = request
        .documents
        .iter()
        .enumerate()
        .map(|(i, d)| document_text(i, d))
        .collect::<std::result::Result<Vec<_>, _>>()?;
    let reranked = state
        .service
        .rerank(
            request.model.as_deref(),
            request.query,
            texts.clone(),
            request.top_n,
        )
        .await?;
    let with_documents = request.return_documents.unwrap_or(false);
    let results: Vec<Value> = reranked
        .results
        .iter()
        .map(|r| {
            let mut result = json!({"index": r.index, "relevance_score": r.score});
            if with_documents {
                result["document"] = json!({"text": texts[r.index]});
            }
            result
        })
        .collect();
    let tokens = reranked.prompt_tokens;
    Ok(Json(json!({
        "model": reranked.model, "object": "list", "results": results,
        "usage": {"prompt_tokens": tokens, "total_tokens": tokens},
    }))
    .into_response())
}
