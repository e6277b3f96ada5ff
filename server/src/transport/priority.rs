//! The `X-Rkllm-Priority` header on every HTTP route: the lane of its
//! model's queue a request asks for (`interactive` or `background`). This
//! layer hands the header, as it came, to the generation service for the
//! duration of the handler, so every API honours it without reading it
//! itself; the service checks the value and names the header when it is
//! wrong.

use axum::extract::Request;
use axum::middleware::Next;
use axum::response::Response;

use crate::service::background;

/// Runs the rest of the request with its `X-Rkllm-Priority` header known
/// to the service.
pub async fn layer(request: Request, next: Next) -> Response {
    let header = request
        .headers()
        .get(background::HEADER)
        .map(|value| String::from_utf8_lossy(value.as_bytes()).into_owned());
    match header {
        None => next.run(request).await,
        Some(value) => background::with_header(Some(value), next.run(request)).await,
    }
}
