//! Error responses in each API's own shape: JSON-RPC errors on `/mcp`
//! and the guards; OpenAI's `{"error": {message, type, param, code}}`
//! under `/v1/`; Ollama's `{"error": "..."}` under `/api/`. Whatever
//! answered (a handler, the API-key check, the body limit, an unknown
//! route), a client of an API gets that API's shape for every status.

use axum::body::Body;
use axum::extract::{Request, State};
use axum::http::{HeaderValue, Method, StatusCode, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use serde_json::{Value, json};

use crate::rpc::{RpcError, error_response};

/// The API a path belongs to, by its prefix.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Api {
    /// `/v1/…`: OpenAI.
    OpenAi,
    /// `/api/…`: Ollama.
    Ollama,
    /// Everything else: JSON-RPC (`/mcp`, `/ws`) and the plain endpoints.
    JsonRpc,
}

impl Api {
    /// The API of `path`.
    pub fn of(path: &str) -> Self {
        if path.starts_with("/v1/") {
            Self::OpenAi
        } else if path.starts_with("/api/") {
            Self::Ollama
        } else {
            Self::JsonRpc
        }
    }
}

/// An error of `api` with `status` and `message`, in that API's shape.
pub fn api_error(api: Api, status: StatusCode, message: &str) -> Response {
    let body = match api {
        Api::OpenAi => {
            let (kind, code) = match status {
                StatusCode::UNAUTHORIZED => ("authentication_error", Some("invalid_api_key")),
                StatusCode::NOT_FOUND => ("invalid_request_error", Some("not_found")),
                StatusCode::TOO_MANY_REQUESTS | StatusCode::SERVICE_UNAVAILABLE => {
                    ("server_error", Some("server_busy"))
                }
                s if s.is_server_error() => ("server_error", None),
                _ => ("invalid_request_error", None),
            };
            json!({"error": {"message": message, "type": kind, "param": null, "code": code}})
        }
        Api::Ollama => json!({"error": message}),
        Api::JsonRpc => {
            let code = match status {
                StatusCode::UNAUTHORIZED => crate::rpc::codes::UNAUTHORIZED,
                StatusCode::PAYLOAD_TOO_LARGE => crate::rpc::codes::TOO_LARGE,
                StatusCode::NOT_FOUND => crate::rpc::codes::METHOD_NOT_FOUND,
                _ => crate::rpc::codes::INVALID_REQUEST,
            };
            return failure(status, &RpcError::new(code, message));
        }
    };
    (
        status,
        [(
            header::CONTENT_TYPE,
            HeaderValue::from_static("application/json"),
        )],
        body.to_string(),
    )
        .into_response()
}

/// Middleware for the OpenAI and Ollama routes: an error response that is
/// not JSON (the body limit's 413, a method not allowed, an extractor's
/// refusal) is answered again in the API's shape, with the text it had
/// (for 413, the limit of `max_request_bytes` and its key).
pub async fn api_shapes(
    State(max_request_bytes): State<usize>,
    request: Request,
    next: Next,
) -> Response {
    let api = Api::of(request.uri().path());
    let response = next.run(request).await;
    if api == Api::JsonRpc
        || !(response.status().is_client_error() || response.status().is_server_error())
    {
        return response;
    }
    let is_json = response
        .headers()
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.starts_with("application/json"));
    if is_json {
        return response;
    }
    let (parts, body) = response.into_parts();
    let text = axum::body::to_bytes(body, 4096).await.unwrap_or_default();
    let text = String::from_utf8_lossy(&text);
    let message = if parts.status == StatusCode::PAYLOAD_TOO_LARGE {
        format!(
            "request body over the limit of {max_request_bytes} bytes (limits.max_request_bytes)"
        )
    } else if text.trim().is_empty() {
        parts
            .status
            .canonical_reason()
            .unwrap_or("request failed")
            .to_owned()
    } else {
        text.trim().to_owned()
    };
    let mut shaped = api_error(api, parts.status, &message);
    for name in [header::RETRY_AFTER, header::ALLOW, header::WWW_AUTHENTICATE] {
        if let Some(value) = parts.headers.get(&name) {
            shaped.headers_mut().insert(name, value.clone());
        }
    }
    shaped
}

/// Ollama endpoints this server does not offer yet, with what to do instead.
const OLLAMA_UNSUPPORTED: &[(&str, &str)] = &[
    (
        "/api/push",
        "rkllm-server does not push models to a registry",
    ),
    (
        "/api/create",
        "rkllm-server does not create models: convert one with Rockchip's rkllm-toolkit and add \
         the .rkllm file to [[models]] in the configuration",
    ),
    (
        "/api/copy",
        "rkllm-server does not copy models: add another [[models]] entry with the same path",
    ),
];

/// The answer to a path no route serves: 404 in the shape of the API the
/// path belongs to, saying what to do instead where there is something.
pub async fn not_found(method: Method, request: Request<Body>) -> Response {
    let path = request.uri().path().to_owned();
    let api = Api::of(&path);
    let message = match OLLAMA_UNSUPPORTED.iter().find(|(p, _)| *p == path) {
        Some((_, advice)) => format!("{path} is not supported: {advice}"),
        None => format!(
            "no endpoint {method} {path}: the OpenAI API is under /v1 (models, chat/completions, \
             completions, embeddings), the Ollama API under /api (version, tags, ps, show, generate, chat, embed), \
             JSON-RPC and MCP at /mcp and /ws; see docs/openai-ollama.md"
        ),
    };
    api_error(api, StatusCode::NOT_FOUND, &message)
}

/// A JSON-RPC error in a non-200 response.
pub fn failure(status: StatusCode, error: &RpcError) -> Response {
    (
        status,
        [(header::CONTENT_TYPE, "application/json")],
        error_response(&Value::Null, error),
    )
        .into_response()
}
