//! API keys: when keys are configured, every protected route (`/mcp`,
//! `/ws`, `/metrics`, the OpenAI/Ollama APIs) needs
//! `Authorization: Bearer <key>` (or `x-api-key: <key>`); a missing or
//! wrong key gets 401 before any work is done, in the shape of the API
//! the route belongs to (JSON-RPC -32008 on `/mcp`). Keys are compared in
//! constant time and never logged. An accepted request carries a [`KeyId`]
//! (a digest of its key) as a request extension, so that what a key makes
//! (a kept response) stays that key's.

use std::sync::Arc;

use axum::extract::{Request, State};
use axum::http::{HeaderValue, StatusCode, header};
use axum::middleware::Next;
use axum::response::Response;

use sha2::{Digest, Sha256};

use super::errors::neutral;

/// Which configured key a request carried: the SHA-256 of the key, never
/// the key itself (and never printed). The same key, given twice, is one
/// identity.
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
pub struct KeyId([u8; 32]);

impl KeyId {
    fn of(key: &[u8]) -> Self {
        Self(Sha256::digest(key).into())
    }
}

impl std::fmt::Debug for KeyId {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("KeyId(..)")
    }
}

/// The configured API keys.
pub struct ApiKeys(Vec<(Vec<u8>, KeyId)>);

impl std::fmt::Debug for ApiKeys {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // Never print the keys themselves.
        write!(f, "ApiKeys({} keys)", self.0.len())
    }
}

impl ApiKeys {
    /// The keys; none disables authentication.
    pub fn new(keys: &[String]) -> Self {
        Self(
            keys.iter()
                .map(|k| (k.as_bytes().to_vec(), KeyId::of(k.as_bytes())))
                .collect(),
        )
    }

    /// Whether authentication is on.
    pub fn enabled(&self) -> bool {
        !self.0.is_empty()
    }

    /// Whether `candidate` is one of the keys.
    pub fn accepts(&self, candidate: &[u8]) -> bool {
        self.identify(candidate).is_some()
    }

    /// The identity of `candidate` if it is one of the keys. Every key is
    /// compared, each in time that depends only on the lengths.
    pub fn identify(&self, candidate: &[u8]) -> Option<KeyId> {
        self.0.iter().fold(None, |found, (key, id)| {
            let equal = constant_time_eq(key, candidate);
            found.or(equal.then_some(*id))
        })
    }
}

fn constant_time_eq(a: &[u8], b: &[u8]) -> bool {
    let mut diff = a.len() ^ b.len();
    for i in 0..a.len().max(b.len()) {
        let x = a.get(i).copied().unwrap_or(0);
        let y = b.get(i).copied().unwrap_or(0);
        diff |= usize::from(x ^ y);
    }
    diff == 0
}

/// The bearer token of a request, if any.
pub fn bearer(request: &Request) -> Option<&[u8]> {
    let value = request.headers().get(header::AUTHORIZATION)?.as_bytes();
    let (scheme, token) = value.split_at(value.iter().position(|&b| b == b' ')?);
    scheme
        .eq_ignore_ascii_case(b"bearer")
        .then(|| token.trim_ascii())
}

/// The key of an `x-api-key` header (Anthropic's clients send it).
fn api_key_header(request: &Request) -> Option<&[u8]> {
    Some(request.headers().get("x-api-key")?.as_bytes().trim_ascii())
}

/// Middleware: 401 unless the request carries a configured key. An
/// accepted request goes on with its key's [`KeyId`] among its extensions
/// (none when no keys are configured).
pub async fn require_key(
    State(keys): State<Arc<ApiKeys>>,
    mut request: Request,
    next: Next,
) -> Response {
    if !keys.enabled() {
        return next.run(request).await;
    }
    let identify = |key: Option<&[u8]>| key.and_then(|key| keys.identify(key));
    if let Some(id) = identify(bearer(&request)).or_else(|| identify(api_key_header(&request))) {
        request.extensions_mut().insert(id);
        return next.run(request).await;
    }
    crate::metrics::rejected("unauthorized");
    tracing::info!(path = %request.uri().path(), "request refused: missing or wrong API key");
    let mut response = neutral(
        StatusCode::UNAUTHORIZED,
        "unauthorized: send a valid API key as `Authorization: Bearer <key>` (or `x-api-key: <key>`)",
    );
    response
        .headers_mut()
        .insert(header::WWW_AUTHENTICATE, HeaderValue::from_static("Bearer"));
    response
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_match_exactly_and_only_exactly() {
        let keys = ApiKeys::new(&["s3cret-key".into(), "other".into()]);
        assert!(keys.enabled());
        assert!(keys.accepts(b"s3cret-key"));
        assert!(keys.accepts(b"other"));
        for wrong in [
            &b""[..],
            b"s3cret-ke",
            b"s3cret-key!",
            b"S3CRET-KEY",
            b"othe",
        ] {
            assert!(!keys.accepts(wrong), "{wrong:?}");
        }
        assert!(!ApiKeys::new(&[]).enabled());
        assert_eq!(format!("{keys:?}"), "ApiKeys(2 keys)");
    }

    #[test]
    fn each_key_has_its_own_identity_and_prints_none_of_it() {
        let keys = ApiKeys::new(&["alpha".into(), "beta".into(), "alpha".into()]);
        let alpha = keys.identify(b"alpha").unwrap();
        let beta = keys.identify(b"beta").unwrap();
        assert_ne!(alpha, beta);
        assert_eq!(keys.identify(b"alpha"), Some(alpha));
        assert_eq!(keys.identify(b"gamma"), None);
        assert_eq!(format!("{alpha:?}"), "KeyId(..)");
    }

    #[test]
    fn the_bearer_scheme_is_case_insensitive() {
        let request = |value: &str| {
            Request::builder()
                .header(header::AUTHORIZATION, value)
                .body(axum::body::Body::empty())
                .unwrap()
        };
        assert_eq!(bearer(&request("Bearer abc")), Some(&b"abc"[..]));
        assert_eq!(bearer(&request("bearer  abc ")), Some(&b"abc"[..]));
        assert_eq!(bearer(&request("Basic abc")), None);
        assert_eq!(bearer(&request("Bearer")), None);
    }
}
