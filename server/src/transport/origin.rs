//! The browser guard on every route: a web page must never drive the
//! server, even one without API keys.
//!
//! - **Host** (against DNS rebinding, where a page on `evil.example`
//!   re-resolves its own name to this server): accepted when it is an IP
//!   literal (a rebinding page cannot make its browser send one of ours),
//!   a loopback name (`localhost`, `*.localhost`), this machine's host
//!   name (and `NAME.local`), or listed in `[http] allowed_hosts` (`"*"`:
//!   any). A request without `Host` (HTTP/1.0) is accepted.
//! - **Origin** (against cross-site requests, including the "simple"
//!   text/plain POSTs a page may send without CORS): a request without
//!   `Origin` (curl, SDKs, server-side clients such as Open WebUI, a
//!   same-origin GET) is accepted; one with an `Origin` must be this
//!   server's own (its authority is the request's `Host`: the chat page),
//!   or be listed in `[http] allowed_origins` or `cors_origins` (an entry
//!   without a port matches any port; `"*"`: any).
//!
//! Everything else is 403 before any work, in the shape of the API the
//! route belongs to.

use std::net::{Ipv4Addr, Ipv6Addr};
use std::sync::Arc;

use axum::extract::{Request, State};
use axum::http::{StatusCode, header};
use axum::middleware::Next;
use axum::response::Response;

use super::errors::neutral;
use super::state::{AppState, Settings};

/// The host part of a `Host` value or of an origin's authority (brackets
/// kept for IPv6).
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

/// Whether `host` (no port) is an IP address literal as browsers write
/// them: dotted IPv4 or bracketed IPv6.
fn is_ip_literal(host: &str) -> bool {
    if let Some(inner) = host.strip_prefix('[').and_then(|h| h.strip_suffix(']')) {
        return inner.parse::<Ipv6Addr>().is_ok();
    }
    host.parse::<Ipv4Addr>().is_ok()
}

/// Whether a request's `Host` value names this server.
pub fn host_allowed(settings: &Settings, authority: &str) -> bool {
    let host = host_of(authority).trim_end_matches('.');
    let lower = host.to_ascii_lowercase();
    is_ip_literal(host)
        || lower == "localhost"
        || lower.ends_with(".localhost")
        || settings
            .allowed_hosts
            .iter()
            .any(|h| h == "*" || h.eq_ignore_ascii_case(host))
}

/// `scheme://host:port` of an origin with the scheme's default port made
/// explicit, lower-cased; `None` for an opaque origin (`null`).
fn normalise_origin(origin: &str) -> Option<(String, String, Option<String>)> {
    let (scheme, rest) = origin.split_once("://")?;
    let scheme = scheme.to_ascii_lowercase();
    let authority = rest.trim_end_matches('/').to_ascii_lowercase();
    let host = host_of(&authority).to_owned();
    let port = authority
        .strip_prefix(host.as_str())
        .and_then(|p| p.strip_prefix(':'))
        .map(str::to_owned);
    Some((scheme, host, port))
}

fn default_port(scheme: &str) -> Option<&'static str> {
    match scheme {
        "http" | "ws" => Some("80"),
        "https" | "wss" => Some("443"),
        _ => None,
    }
}

/// Whether `origin` is this server's own page: its host and port are the
/// request's `Host`.
fn same_origin(origin: &str, host_header: Option<&str>) -> bool {
    let (Some((scheme, host, port)), Some(request_host)) = (normalise_origin(origin), host_header)
    else {
        return false;
    };
    let request_host = request_host.to_ascii_lowercase();
    let request_name = host_of(&request_host);
    let request_port = request_host
        .strip_prefix(request_name)
        .and_then(|p| p.strip_prefix(':'));
    let default = default_port(&scheme);
    host == request_name && port.as_deref().or(default) == request_port.or(default)
}

/// Whether `origin` is listed: exactly, or by scheme and host when the
/// entry has no port.
fn origin_listed(list: &[String], origin: &str) -> bool {
    let Some((scheme, host, port)) = normalise_origin(origin) else {
        return list.iter().any(|o| o == "*" || o == origin);
    };
    list.iter().any(|entry| {
        if entry == "*" {
            return true;
        }
        let Some((e_scheme, e_host, e_port)) = normalise_origin(entry) else {
            return false;
        };
        e_scheme == scheme && e_host == host && (e_port.is_none() || e_port == port)
    })
}

/// Whether a request with this `Origin` (and `Host`) may be served.
pub fn origin_allowed(settings: &Settings, origin: &str, host_header: Option<&str>) -> bool {
    same_origin(origin, host_header)
        || origin_listed(&settings.allowed_origins, origin)
        || origin_listed(&settings.cors_origins, origin)
}

/// Middleware on every route: 403 unless `Host` names this server and
/// `Origin`, when present, is allowed.
pub async fn guard(State(state): State<Arc<AppState>>, request: Request, next: Next) -> Response {
    let settings = &state.settings;
    let headers = request.headers();
    let host = headers.get(header::HOST).map(|h| h.to_str().unwrap_or("?"));
    let refusal = if let Some(host) = host.filter(|h| !host_allowed(settings, h)) {
        tracing::warn!(host, path = %request.uri().path(), "request refused: Host is not this server's");
        Some(format!(
            "Host `{host}` is not a name of this server; add it to [http] allowed_hosts \
             (this protects against DNS rebinding)"
        ))
    } else if let Some(origin) = headers
        .get(header::ORIGIN)
        .map(|o| o.to_str().unwrap_or("?"))
        .filter(|o| !origin_allowed(settings, o, host))
    {
        tracing::warn!(origin, path = %request.uri().path(), "request refused: cross-site Origin");
        Some(format!(
            "Origin `{origin}` is not allowed: a web page on another site may not use this \
             server; add the origin to [http] allowed_origins to allow it"
        ))
    } else {
        None
    };
    match refusal {
        Some(message) => {
            crate::metrics::rejected("forbidden");
            neutral(StatusCode::FORBIDDEN, message)
        }
        None => next.run(request).await,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn settings() -> Settings {
        let mut settings = crate::Config::default().transport_settings();
        settings.allowed_hosts = vec!["llm.lan".into()];
        settings.allowed_origins = vec!["http://webui.lan".into(), "https://app.lan:8443".into()];
        settings.cors_origins = vec!["http://cors.lan:3000".into()];
        settings
    }

    #[test]
    fn hosts_are_ip_literals_loopback_names_or_listed() {
        let settings = settings();
        for ok in [
            "localhost",
            "localhost:8080",
            "LOCALHOST",
            "app.localhost:1",
            "127.0.0.1:1",
            "127.0.0.2",
            "192.168.1.5:8080",
            "[::1]:8080",
            "[fe80::1]",
            "llm.lan:8080",
            "LLM.LAN",
        ] {
            assert!(host_allowed(&settings, ok), "{ok}");
        }
        for bad in [
            "evil.example.com",
            "evil.example.com:8080",
            "localhost.evil.com",
            "2130706433",
            "127.1",
            "llm.lan.evil.com",
            "[::1",
        ] {
            assert!(!host_allowed(&settings, bad), "{bad}");
        }
        let open = Settings {
            allowed_hosts: vec!["*".into()],
            ..settings
        };
        assert!(host_allowed(&open, "anything:1"));
    }

    #[test]
    fn origins_are_the_servers_own_or_listed() {
        let settings = settings();
        let allowed = |origin: &str, host: &str| origin_allowed(&settings, origin, Some(host));
        // The server's own page, whatever name it is reached by.
        assert!(allowed("http://127.0.0.1:8080", "127.0.0.1:8080"));
        assert!(allowed("http://board.lan:8080", "board.lan:8080"));
        assert!(allowed("http://localhost", "localhost:80"));
        assert!(allowed("https://localhost", "localhost"));
        assert!(!allowed("http://127.0.0.1:3000", "127.0.0.1:8080"));
        assert!(!allowed("http://localhost:8080", "127.0.0.1:8080"));
        // Listed: any port without one, exactly with one.
        assert!(allowed("http://webui.lan:3000", "127.0.0.1:8080"));
        assert!(allowed("https://app.lan:8443", "127.0.0.1:8080"));
        assert!(!allowed("https://app.lan:9443", "127.0.0.1:8080"));
        assert!(!allowed("https://webui.lan", "127.0.0.1:8080"));
        assert!(allowed("http://cors.lan:3000", "127.0.0.1:8080"));
        for bad in ["http://evil.example", "null", "file://", "garbage"] {
            assert!(!allowed(bad, "127.0.0.1:8080"), "{bad}");
        }
        let open = Settings {
            allowed_origins: vec!["*".into()],
            ..settings.clone()
        };
        assert!(origin_allowed(&open, "null", None));
    }
}
