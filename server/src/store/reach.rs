//! Why a hub could not be reached, in words a user can act on: a host name
//! that does not resolve (DNS), a connection refused or never answered, a
//! TLS handshake that failed, or a proxy in the way; each names the host
//! and the setting that fits (`HF_ENDPOINT` for a mirror, `HTTPS_PROXY`,
//! the board's clock for certificates).

use std::error::Error as _;
use std::io;

use super::error::PullError;

/// The proxy reqwest takes from the environment for `scheme`, if any.
fn proxy_from_env(scheme: &str) -> Option<(&'static str, String)> {
    let names: &[&'static str] = if scheme == "https" {
        &["HTTPS_PROXY", "https_proxy", "ALL_PROXY", "all_proxy"]
    } else {
        &["HTTP_PROXY", "http_proxy", "ALL_PROXY", "all_proxy"]
    };
    names.iter().find_map(|name| {
        std::env::var(name)
            .ok()
            .filter(|v| !v.is_empty())
            .map(|v| (*name, v))
    })
}

/// The host (and port, when not the scheme's own) of `url`.
fn host_of(url: &str) -> String {
    reqwest::Url::parse(url).map_or_else(
        |_| url.to_owned(),
        |u| {
            let host = u.host_str().unwrap_or("?").to_owned();
            match u.port() {
                Some(port) => format!("{host}:{port}"),
                None => host,
            }
        },
    )
}

/// What failed, found along the error's chain of causes.
#[derive(Debug, PartialEq, Eq)]
enum Cause {
    Dns,
    Refused,
    Tls,
    Tunnel,
    Timeout,
    Other,
}

fn cause_of(err: &reqwest::Error) -> (Cause, String) {
    let mut words = Vec::new();
    let mut refused = false;
    let mut source = err.source();
    while let Some(e) = source {
        words.push(e.to_string());
        if let Some(io) = e.downcast_ref::<io::Error>()
            && io.kind() == io::ErrorKind::ConnectionRefused
        {
            refused = true;
        }
        source = e.source();
    }
    let text = words.join(": ").to_lowercase();
    let detail = words.last().cloned().unwrap_or_else(|| err.to_string());
    let cause = if text.contains("dns error") || text.contains("lookup address") {
        Cause::Dns
    } else if refused || text.contains("connection refused") {
        Cause::Refused
    } else if text.contains("tunnel") || text.contains("proxy") {
        Cause::Tunnel
    } else if text.contains("certificate")
        || text.contains("tls")
        || text.contains("handshake")
        || text.contains("peer")
    {
        Cause::Tls
    } else if err.is_timeout() || text.contains("timed out") {
        Cause::Timeout
    } else {
        Cause::Other
    };
    (cause, detail)
}

/// The error for a request to `url` (under `endpoint`) that got no answer.
pub(super) fn unreachable(url: &str, endpoint: &str, err: &reqwest::Error) -> PullError {
    let host = host_of(url);
    let scheme = url.split("://").next().unwrap_or("https");
    let proxy = proxy_from_env(scheme);
    let (cause, detail) = cause_of(err);
    let mirror = format!(
        "set HF_ENDPOINT to a mirror you can reach (now {endpoint}), or HTTPS_PROXY to this \
         network's proxy"
    );
    let (what, hint) = match (&cause, &proxy) {
        (Cause::Tunnel | Cause::Refused | Cause::Dns | Cause::Timeout, Some((name, value))) => (
            format!(
                "the proxy {value} (from {name}) did not take the request to {host} ({detail})"
            ),
            format!("check {name}, or unset it if this network needs no proxy"),
        ),
        (Cause::Dns, None) => (
            format!("the host name {host} does not resolve (DNS: {detail})"),
            format!(
                "check the network and DNS (`getent hosts {}`), or {mirror}",
                host.split(':').next().unwrap_or(&host)
            ),
        ),
        (Cause::Refused, None) => (
            format!("{host} refused the connection"),
            format!("check the address, or {mirror}"),
        ),
        (Cause::Timeout, None) => (
            format!("{host} did not answer in time"),
            format!("the network may block it: {mirror}"),
        ),
        (Cause::Tls, _) => (
            format!("the TLS handshake with {host} failed ({detail})"),
            "check the board's clock (`date`: certificates fail on a clock in the past) and \
             whether a proxy intercepts TLS (then set HTTPS_PROXY, or HF_ENDPOINT to a mirror)"
                .to_owned(),
        ),
        (Cause::Tunnel, None) | (Cause::Other, _) => (
            format!("no connection to {host} ({detail})"),
            format!("check the network, or {mirror}"),
        ),
    };
    PullError::Unreachable { what, hint }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_host_keeps_a_port_that_is_not_the_schemes_own() {
        assert_eq!(host_of("https://huggingface.co/a/b"), "huggingface.co");
        assert_eq!(host_of("http://127.0.0.1:9/x"), "127.0.0.1:9");
    }
}
