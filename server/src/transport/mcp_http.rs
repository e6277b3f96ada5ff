//! MCP Streamable HTTP on `/mcp`: the header checks (PROTOCOL §6). The
//! sessions themselves live in `mcp_session`.
//!
//! - `initialize` without a session id opens a session and returns its id
//!   in `Mcp-Session-Id`; later requests carrying the id share the
//!   session's state (negotiated version, in-flight requests for
//!   `notifications/cancelled`). An unknown or expired id gets 404.
//! - A request without a session id is served statelessly, so plain
//!   JSON-RPC clients and curl need no handshake.
//! - `DELETE /mcp` ends a session; sessions idle for longer than
//!   `mcp.session_idle_secs` are ended too.
//! - `Origin` and `Host` are checked on every route (`origin`), against
//!   DNS rebinding and cross-site WebSocket hijacking.
//! - A request of the stateless revision (2026-07-28: `MCP-Protocol-Version`
//!   says so, or its `_meta`) has no session: its headers must say what its
//!   body says ([`check_modern_headers`]), and the status follows the
//!   JSON-RPC error ([`modern_status`]).
//!
//! Errors name the request's id when it could be read, and carry none
//! when it could not.

use axum::http::{HeaderMap, StatusCode, header};
use axum::response::Response;
use base64::Engine as _;
use serde_json::Value;

use super::errors::failure_for;
use crate::rpc::modern::{self, MODERN};
use crate::rpc::{PROTOCOL_VERSIONS, RpcError, codes};

/// The session header.
pub const SESSION_HEADER: &str = "mcp-session-id";
/// The protocol version header.
pub const VERSION_HEADER: &str = "mcp-protocol-version";
/// The stateless revision's header that repeats the body's method.
const METHOD_HEADER: &str = "mcp-method";
/// The stateless revision's header that repeats the body's tool, prompt
/// or resource.
const NAME_HEADER: &str = "mcp-name";

/// Whether a request is of the stateless revision: its version header, or
/// its `_meta`, names one (a version the server does not speak is refused
/// as that revision refuses it).
pub fn is_modern(headers: &HeaderMap, body: &Value) -> bool {
    version_header_is_modern(headers) || modern::requested_version(body.get("params")).is_some()
}

/// Whether `MCP-Protocol-Version` names the stateless revision.
pub fn version_header_is_modern(headers: &HeaderMap) -> bool {
    header_text(headers, VERSION_HEADER).as_deref() == Some(MODERN)
}

/// A header's value, its surrounding white space removed.
fn header_text(headers: &HeaderMap, name: &str) -> Option<String> {
    headers
        .get(name)
        .map(|v| String::from_utf8_lossy(v.as_bytes()).trim().to_owned())
}

/// A header value as the stateless revision encodes it: as is, or
/// `=?base64?…?=` for a value that is not ASCII.
fn decoded(value: &str) -> Result<String, String> {
    let Some(encoded) = value
        .strip_prefix("=?base64?")
        .and_then(|v| v.strip_suffix("?="))
    else {
        return Ok(value.to_owned());
    };
    let bytes = base64::engine::general_purpose::STANDARD
        .decode(encoded)
        .map_err(|e| format!("not valid base64 ({e})"))?;
    String::from_utf8(bytes).map_err(|_| "not UTF-8 once decoded".to_owned())
}

/// Checks a stateless request against its headers: its `_meta` carries a
/// version and the client's capabilities (-32602), the version header says
/// the same version (-32020), which is this revision (-32022), and the
/// method (`Mcp-Method`) and, for a call of a tool, a prompt or a resource,
/// its name or URI (`Mcp-Name`) are those of the body (-32020). Returns
/// the refusal, with HTTP 400.
pub fn check_modern_headers(headers: &HeaderMap, body: &Value) -> Option<Response> {
    let id = request_id(body);
    let refuse = |error: RpcError| Some(failure_for(StatusCode::BAD_REQUEST, id.as_ref(), &error));
    let mismatch = |what: String| {
        RpcError::new(
            modern::codes::HEADER_MISMATCH,
            format!("header mismatch: {what}"),
        )
    };
    let params = body.get("params");
    let request = body.get("id").is_some();
    if request && let Err(error) = modern::check_meta_shape(params) {
        return refuse(error);
    }
    let version = header_text(headers, VERSION_HEADER);
    let in_body = modern::requested_version(params);
    if version.as_deref() != in_body {
        return refuse(mismatch(format!(
            "MCP-Protocol-Version is {version:?}, the request's _meta says {in_body:?}"
        )));
    }
    if let Some(version) = in_body
        && version != MODERN
    {
        return refuse(modern::unsupported_version(version));
    }
    let method = body.get("method").and_then(Value::as_str);
    if let Some(method) = method {
        let header = header_text(headers, METHOD_HEADER);
        if header.as_deref() != Some(method) {
            return refuse(mismatch(format!(
                "Mcp-Method is {header:?}, the request's method is {method:?}"
            )));
        }
    }
    let named = match method {
        Some("tools/call" | "prompts/get") => params.and_then(|p| p.get("name")),
        Some("resources/read") => params.and_then(|p| p.get("uri")),
        _ => None,
    };
    if let Some(name) = named.and_then(Value::as_str) {
        let header = match header_text(headers, NAME_HEADER).map(|v| decoded(&v)) {
            Some(Ok(value)) => Some(value),
            Some(Err(why)) => return refuse(mismatch(format!("Mcp-Name is {why}"))),
            None => None,
        };
        if header.as_deref() != Some(name) {
            return refuse(mismatch(format!(
                "Mcp-Name is {header:?}, the request names {name:?}"
            )));
        }
    }
    None
}

/// The HTTP status of a stateless request's answer: 404 for an unknown
/// method, 400 for a request that is malformed or refused by the
/// revision's rules, 200 otherwise (a failure of the work itself).
pub fn modern_status(code: Option<i64>) -> StatusCode {
    match code {
        Some(codes::METHOD_NOT_FOUND) => StatusCode::NOT_FOUND,
        Some(
            codes::PARSE_ERROR
            | codes::INVALID_REQUEST
            | codes::INVALID_PARAMS
            | modern::codes::HEADER_MISMATCH
            | modern::codes::MISSING_CAPABILITY
            | modern::codes::UNSUPPORTED_VERSION,
        ) => StatusCode::BAD_REQUEST,
        _ => StatusCode::OK,
    }
}

/// The id of a request body, when it has one MCP allows (a string or an
/// integer).
pub fn request_id(body: &Value) -> Option<Value> {
    body.get("id")
        .filter(|id| id.is_string() || id.is_i64() || id.is_u64())
        .cloned()
}

/// Checks `Content-Type`, `Accept` and `MCP-Protocol-Version` of a POST
/// whose request has `id` (when it could be read); returns the refusal
/// when one is wrong.
pub fn check_post_headers(headers: &HeaderMap, id: Option<&Value>) -> Option<Response> {
    if let Some(content_type) = headers
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
    {
        let media = content_type
            .split(';')
            .next()
            .unwrap_or_default()
            .trim()
            .to_ascii_lowercase();
        // curl's `-d` sends form-urlencoded by default: accepted, the body
        // is parsed as JSON all the same.
        if !matches!(
            media.as_str(),
            "application/json" | "application/x-www-form-urlencoded" | ""
        ) {
            let error = RpcError::invalid_request(format!(
                "Content-Type must be application/json, got `{media}`"
            ));
            return Some(failure_for(StatusCode::UNSUPPORTED_MEDIA_TYPE, id, &error));
        }
    }
    if let Some(accept) = headers.get(header::ACCEPT).and_then(|v| v.to_str().ok()) {
        let acceptable = accept.split(',').any(|part| {
            let media = part
                .split(';')
                .next()
                .unwrap_or_default()
                .trim()
                .to_ascii_lowercase();
            matches!(
                media.as_str(),
                "application/json" | "text/event-stream" | "*/*" | "application/*" | "text/*"
            )
        });
        if !acceptable {
            let error = RpcError::invalid_request(
                "Accept must allow application/json or text/event-stream",
            );
            return Some(failure_for(StatusCode::NOT_ACCEPTABLE, id, &error));
        }
    }
    if let Some(version) = header_text(headers, VERSION_HEADER)
        && version != MODERN
        && !PROTOCOL_VERSIONS.contains(&version.as_str())
    {
        let error = modern::unsupported_version(&version);
        return Some(failure_for(StatusCode::BAD_REQUEST, id, &error));
    }
    None
}

/// Whether the client accepts an SSE answer.
pub fn accepts_sse(headers: &HeaderMap) -> bool {
    headers
        .get_all(header::ACCEPT)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .any(|v| v.to_ascii_lowercase().contains("text/event-stream"))
}
