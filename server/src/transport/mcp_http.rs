//! MCP Streamable HTTP on `/mcp`: sessions, the header checks and the
//! Origin/Host allow-list (PROTOCOL §6).
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

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use axum::extract::{Request, State};
use axum::http::{HeaderMap, StatusCode, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use parking_lot::Mutex;
use rand::Rng;
use serde_json::Value;
use tokio::time::Instant;

use crate::config::McpSection;
use crate::rpc::{Connection, PROTOCOL_VERSIONS, RpcError, error_response};
use crate::state::AppState;

/// The session header.
pub const SESSION_HEADER: &str = "mcp-session-id";
/// The protocol version header.
pub const VERSION_HEADER: &str = "mcp-protocol-version";

/// One MCP session over HTTP.
#[derive(Debug)]
pub struct McpSession {
    /// The session's protocol state.
    pub conn: Arc<Connection>,
    last_seen: Mutex<Instant>,
}

/// Every open MCP session.
#[derive(Debug)]
pub struct McpSessions {
    idle: Duration,
    // Synchronous lock: one map operation per request.
    map: Mutex<HashMap<String, Arc<McpSession>>>,
}

impl McpSessions {
    /// Sessions that end after `idle` without a request.
    pub fn new(idle: Duration) -> Self {
        Self {
            idle,
            map: Mutex::new(HashMap::new()),
        }
    }

    /// Opens a session; returns its id (32 hex digits from a CSPRNG).
    pub fn open(&self, conn: Arc<Connection>) -> String {
        let mut rng = rand::rng();
        let id: String = (0..16)
            .map(|_| format!("{:02x}", rng.random::<u8>()))
            .collect();
        let session = Arc::new(McpSession {
            conn,
            last_seen: Mutex::new(Instant::now()),
        });
        self.map.lock().insert(id.clone(), session);
        id
    }

    /// The live session with this id, marked as used.
    pub fn get(&self, id: &str) -> Option<Arc<McpSession>> {
        let session = self.map.lock().get(id).cloned()?;
        *session.last_seen.lock() = Instant::now();
        Some(session)
    }

    /// Ends a session, cancelling its requests in flight.
    pub fn close(&self, id: &str) -> bool {
        let session = self.map.lock().remove(id);
        session.inspect(|s| s.conn.cancel_all()).is_some()
    }

    /// Ends the sessions idle since before `now - idle`.
    pub fn expire(&self, now: Instant) -> usize {
        let idle = self.idle;
        let expired: Vec<Arc<McpSession>> = {
            let mut map = self.map.lock();
            let ids: Vec<String> = map
                .iter()
                .filter(|(_, s)| now.saturating_duration_since(*s.last_seen.lock()) >= idle)
                .map(|(id, _)| id.clone())
                .collect();
            ids.iter().filter_map(|id| map.remove(id)).collect()
        };
        expired.iter().for_each(|s| s.conn.cancel_all());
        expired.len()
    }

    /// Open sessions.
    pub fn len(&self) -> usize {
        self.map.lock().len()
    }

    /// Whether no session is open.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Runs the idle expiry until the task is aborted.
    pub fn spawn_reaper(state: Arc<AppState>) -> tokio::task::JoinHandle<()> {
        tokio::spawn(async move {
            let period = (state.mcp_sessions.idle / 4)
                .clamp(Duration::from_secs(1), Duration::from_secs(60));
            let mut ticks = tokio::time::interval(period);
            loop {
                ticks.tick().await;
                state.mcp_sessions.expire(Instant::now());
            }
        })
    }
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

fn host_allowed(config: &McpSection, host: &str) -> bool {
    let host = host_of(host);
    config
        .allowed_hosts
        .iter()
        .any(|h| h == "*" || h.eq_ignore_ascii_case(host))
}

fn origin_allowed(config: &McpSection, origin: &str) -> bool {
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
    let config = &state.config.mcp;
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
        let cors = &state.config.http.cors_origins;
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
        let config = McpSection::default();
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
        let open = McpSection {
            allowed_hosts: vec!["*".into()],
            allowed_origins: vec!["*".into()],
            ..McpSection::default()
        };
        assert!(host_allowed(&open, "anything:1") && origin_allowed(&open, "null"));
    }

    #[tokio::test(start_paused = true)]
    async fn idle_sessions_expire_and_unknown_ids_are_not_found() {
        let sessions = McpSessions::new(Duration::from_secs(60));
        let id = sessions.open(Arc::new(Connection::new(false)));
        assert_eq!(id.len(), 32);
        assert!(sessions.get(&id).is_some());
        tokio::time::advance(Duration::from_secs(59)).await;
        assert_eq!(sessions.expire(Instant::now()), 0);
        tokio::time::advance(Duration::from_secs(2)).await;
        assert_eq!(sessions.expire(Instant::now()), 1);
        assert!(sessions.get(&id).is_none());
        assert!(!sessions.close("nope"));
    }
}
