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

use axum::http::{HeaderMap, StatusCode, header};
use axum::response::Response;

use super::errors::failure;
use crate::rpc::{PROTOCOL_VERSIONS, RpcError};

/// The session header.
pub const SESSION_HEADER: &str = "mcp-session-id";
/// The protocol version header.
pub const VERSION_HEADER: &str = "mcp-protocol-version";

/// Checks `Content-Type`, `Accept` and `MCP-Protocol-Version` of a POST;
/// returns the refusal when one is wrong.
pub fn check_post_headers(headers: &HeaderMap) -> Option<Response> {
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
            return Some(failure(StatusCode::UNSUPPORTED_MEDIA_TYPE, &error));
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
            return Some(failure(StatusCode::NOT_ACCEPTABLE, &error));
        }
    }
    if let Some(version) = headers.get(VERSION_HEADER) {
        let version = version.to_str().unwrap_or("?");
        if !PROTOCOL_VERSIONS.contains(&version) {
            let error = RpcError::invalid_request(format!(
                "unsupported MCP-Protocol-Version `{version}`; supported: {}",
                PROTOCOL_VERSIONS.join(", ")
            ));
            return Some(failure(StatusCode::BAD_REQUEST, &error));
        }
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
