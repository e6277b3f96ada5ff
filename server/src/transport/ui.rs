//! The chat page: `GET /` and its files under `/ui/`, compiled into the
//! binary from `server/ui/` (plain HTML, CSS and JavaScript modules; no
//! build step, nothing fetched from elsewhere). The page talks to the
//! OpenAI API, `/ready` and `/metrics` of the same server.
//!
//! Every file is sent with a Content-Security-Policy that allows scripts,
//! styles and connections to this origin only (no inline script), forbids
//! framing, and with an ETag so a browser revalidates cheaply. `[ui]
//! enabled = false` leaves the routes out: `/` is then 404.

use std::sync::Arc;

use axum::Router;
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::get;

use super::state::AppState;

/// The page's policy: its own scripts, styles and API only; pictures from
/// itself or attached by the user (`data:`/`blob:` previews); no framing,
/// no forms posted anywhere, no `<base>`.
pub const CONTENT_SECURITY_POLICY: &str = "default-src 'none'; script-src 'self'; \
     style-src 'self'; img-src 'self' data: blob:; connect-src 'self'; base-uri 'none'; \
     form-action 'none'; frame-ancestors 'none'";

/// One embedded file.
struct Asset {
    body: &'static [u8],
    content_type: &'static str,
    etag: &'static str,
}

/// FNV-1a (64 bit), at compile time: the ETag of an embedded file.
const fn fnv(bytes: &[u8]) -> u64 {
    let mut hash = 0xcbf2_9ce4_8422_2325_u64;
    let mut i = 0;
    while i < bytes.len() {
        hash ^= bytes[i] as u64;
        hash = hash.wrapping_mul(0x0000_0100_0000_01b3);
        i += 1;
    }
    hash
}

/// The ETag text (`"` + 16 hex digits + `"`) of a hash, at compile time.
const fn etag_of(hash: u64) -> [u8; 18] {
    const HEX: &[u8; 16] = b"0123456789abcdef";
    let mut out = [b'"'; 18];
    let mut i = 0;
    while i < 16 {
        out[1 + i] = HEX[((hash >> (60 - 4 * i)) & 0xf) as usize];
        i += 1;
    }
    out
}

macro_rules! asset {
    ($file:literal, $type:literal) => {{
        const BODY: &[u8] = include_bytes!(concat!("../../ui/", $file));
        const TAG: [u8; 18] = etag_of(fnv(BODY));
        Asset {
            body: BODY,
            content_type: $type,
            etag: match std::str::from_utf8(&TAG) {
                Ok(tag) => tag,
                Err(_) => panic!("an ETag is ASCII"),
            },
        }
    }};
}

static INDEX: Asset = asset!("index.html", "text/html; charset=utf-8");
static APP_JS: Asset = asset!("app.js", "text/javascript; charset=utf-8");
static MARKDOWN_JS: Asset = asset!("markdown.js", "text/javascript; charset=utf-8");
static STYLE: Asset = asset!("app.css", "text/css; charset=utf-8");
static ICON: Asset = asset!("icon.svg", "image/svg+xml");

/// The page's routes, when the page is enabled.
pub fn routes() -> Router<Arc<AppState>> {
    [
        ("/", &INDEX),
        ("/ui/app.js", &APP_JS),
        ("/ui/markdown.js", &MARKDOWN_JS),
        ("/ui/app.css", &STYLE),
        ("/ui/icon.svg", &ICON),
    ]
    .into_iter()
    .fold(Router::new(), |router, (path, asset)| {
        router.route(
            path,
            get(move |headers: HeaderMap| async move { serve(asset, &headers) }),
        )
    })
}

/// The file, or 304 when the browser's copy is current; with the security
/// headers either way.
fn serve(asset: &Asset, request: &HeaderMap) -> Response {
    let current = request
        .get(header::IF_NONE_MATCH)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|tags| tags.split(',').any(|t| t.trim() == asset.etag));
    let mut response = if current {
        StatusCode::NOT_MODIFIED.into_response()
    } else {
        (
            [(
                header::CONTENT_TYPE,
                HeaderValue::from_static(asset.content_type),
            )],
            asset.body,
        )
            .into_response()
    };
    let headers = response.headers_mut();
    for (name, value) in [
        (header::CONTENT_SECURITY_POLICY, CONTENT_SECURITY_POLICY),
        (header::X_FRAME_OPTIONS, "DENY"),
        (header::X_CONTENT_TYPE_OPTIONS, "nosniff"),
        (header::REFERRER_POLICY, "no-referrer"),
        (header::CACHE_CONTROL, "no-cache"),
        (header::ETAG, asset.etag),
    ] {
        headers.insert(name, HeaderValue::from_static(value));
    }
    headers.insert(
        "cross-origin-opener-policy",
        HeaderValue::from_static("same-origin"),
    );
    headers.insert(
        "permissions-policy",
        HeaderValue::from_static("camera=(), microphone=(), geolocation=()"),
    );
    response
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn etags_are_quoted_hex_of_the_content() {
        assert_eq!(&etag_of(0x0123_4567_89ab_cdef), b"\"0123456789abcdef\"");
        assert_ne!(INDEX.etag, APP_JS.etag);
        assert_eq!(INDEX.etag.len(), 18);
    }

    #[test]
    fn the_page_loads_only_files_it_embeds() {
        let page = std::str::from_utf8(INDEX.body).unwrap();
        for file in ["/ui/app.js", "/ui/app.css", "/ui/icon.svg"] {
            assert!(page.contains(file), "{file}");
        }
        // No inline script or style, which the policy would block anyway.
        assert!(!page.contains("<script>") && !page.contains("style="));
        assert!(!page.contains("http://") && !page.contains("https://"));
        let total: usize = [&INDEX, &APP_JS, &MARKDOWN_JS, &STYLE, &ICON]
            .iter()
            .map(|a| a.body.len())
            .sum();
        assert!(total < 100 * 1024, "the page weighs {total} bytes");
    }
}
