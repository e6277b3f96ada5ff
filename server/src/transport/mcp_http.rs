//! MCP Streamable HTTP on `/mcp`: the header checks and the Origin/Host
//! allow-list (PROTOCOL §6). The sessions themselves live in
//! `mcp_session`.
//!
//! - `initialize` without a session id opens a session and returns its id
//!   in `Mcp-Session-Id`; later requests carrying the id share the
//!   session's state (negotiated version, in-flight requests for
//!   `notifications/cancelled`). An unknown or expired id gets 404.
//! - A request without a session id is served statelessly, so plain
//!   JSON-RPC clients and curl need no handshake.
//! - `DELETE /mcp` ends a session; sessions idle for longer than
//!   `mcp.session_idle_secs` are ended too.
//! - `Origin` and `Host` must be in the allow-list (loopback names by
//!   default), against DNS rebinding and cross-site WebSocket hijacking.

use std::sync::Arc;

use axum::extract::{Request, State};
use axum::http::{HeaderMap, StatusCode, header};
use axum::middleware::Next;
use axum::response::Response;

use super::errors::failure;
use super::state::{AppState, Settings};
use crate::rpc::{PROTOCOL_VERSIONS, RpcError};

/// The session header.
pub const SESSION_HEADER: &str = "mcp-session-id";
/// The protocol version header.
pub const VERSION_HEADER: &str = "mcp-protocol-version";

/// The host part of a `Host` value or of an origin's authority.
fn host_of(authority: &str) -> &str {
    if let Some(end) = authority.find(']').filter(|_| authority.starts_with('[')) {
        return &authority[..=end];
    }
    authority
        .rsplit_once(':')
        .map_or(authority, |(host, port)| {
            if port.bytes().all(|b| b.is_ascii_digit()) {
                host
            } else {
                authority
            }
        })
}

fn host_allowed(config: &Settings, host: &str) -> bool {
    let host = host_of(host);
    config
        .allowed_hosts
        .iter()
        .any(|h| h == "*" || h.eq_ignore_ascii_case(host))
}

fn origin_allowed(config: &Settings, origin: &str) -> bool {
    let Some((scheme, rest)) = origin.split_once("://") else {
        return config.allowed_origins.iter().any(|o| o == "*");
    };
    let origin = format!("{scheme}://{}", host_of(rest.trim_end_matches('/')));
    config
        .allowed_origins
        .iter()
        .any(|o| o == "*" || o.eq_ignore_ascii_case(&origin))
}

/// Middleware for `/mcp` and `/ws`: 403 unless `Host` and `Origin` (when
/// present) are allowed.
pub async fn guard(State(state): State<Arc<AppState>>, request: Request, next: Next) -> Response {
    let config = &state.settings;
    let headers = request.headers();
    if let Some(host) = headers.get(header::HOST).and_then(|h| h.to_str().ok()) {
        if !host_allowed(config, host) {
            tracing::warn!(host, "request refused: Host not in mcp.allowed_hosts");
            let error = RpcError::invalid_request(format!(
                "Host `{host}` is not allowed (see mcp.allowed_hosts)"
            ));
            return failure(StatusCode::FORBIDDEN, &error);
        }
    }
    if let Some(origin) = headers.get(header::ORIGIN) {
        let origin = origin.to_str().unwrap_or("?");
        let cors = &config.cors_origins;
        if !origin_allowed(config, origin) && !cors.iter().any(|o| o.eq_ignore_ascii_case(origin)) {
            tracing::warn!(origin, "request refused: Origin not in mcp.allowed_origins");
            let error = RpcError::invalid_request(format!(
                "Origin `{origin}` is not allowed (see mcp.allowed_origins)"
            ));
            return failure(StatusCode::FORBIDDEN, &error);
        }
    }
    next.run(request).await
}

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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hosts_and_origins_are_compared_without_ports() {
        let config = crate::Config::default().transport_settings();
        for ok in [
            "localhost",
            "localhost:8080",
            "127.0.0.1:1",
            "[::1]:8080",
            "LOCALHOST",
        ] {
            assert!(host_allowed(&config, ok), "{ok}");
        }
        for bad in [
            "evil.example.com",
            "evil.example.com:8080",
            "127.0.0.2",
            "localhost.evil.com",
        ] {
            assert!(!host_allowed(&config, bad), "{bad}");
        }
        assert!(origin_allowed(&config, "http://localhost:3000"));
        assert!(origin_allowed(&config, "https://[::1]:8443"));
        assert!(!origin_allowed(&config, "http://evil.example.com"));
        assert!(!origin_allowed(&config, "null"));
        let open = Settings {
            allowed_hosts: vec!["*".into()],
            allowed_origins: vec!["*".into()],
            ..config.clone()
        };
        assert!(host_allowed(&open, "anything:1") && origin_allowed(&open, "null"));
    }
}
