//! The `X-Rkllm-Priority` header on every HTTP route: the lane of its
//! model's queue a request asks for (`interactive` or `background`). This
//! layer hands the header, as it came, to the generation service for the
//! duration of the handler, so every API honours it without reading it
//! itself; the service checks the value and names the header when it is
//! wrong. The headers that name a client's session (see
//! `service::conversation`) are handed over the same way.

use axum::extract::Request;
use axum::middleware::Next;
use axum::response::Response;

use crate::service::{background, conversation};

/// Runs the rest of the request with its `X-Rkllm-Priority` header and its
/// session's headers known to the service.
pub async fn layer(request: Request, next: Next) -> Response {
    let headers = request.headers();
    let header = headers
        .get(background::HEADER)
        .map(|value| String::from_utf8_lossy(value.as_bytes()).into_owned());
    let text = |name: &str| {
        headers
            .get(name)
            .and_then(|v| v.to_str().ok())
            .map(str::to_owned)
    };
    let session = conversation::Headers {
        session: conversation::SESSION_HEADERS
            .iter()
            .find_map(|name| text(name).as_deref().and_then(conversation::bounded)),
        echoed: text(conversation::HEADER)
            .as_deref()
            .and_then(conversation::echoed),
        ..conversation::Headers::default()
    };
    let found = std::sync::Arc::clone(&session.found);
    let run = conversation::with_headers(session, next.run(request));
    let mut response = match header {
        None => run.await,
        Some(value) => background::with_header(Some(value), run).await,
    };
    // A generation's conversation, for a balancer to keep its next turn on
    // this board and for the client to send back.
    let key = found.lock().take();
    if let Some(value) = key.and_then(|k| axum::http::HeaderValue::from_str(&k).ok()) {
        response.headers_mut().insert(conversation::HEADER, value);
    }
    response
}
