//! The HTTP APIs, one folder each: its wire types, its routes, its stream
//! framing and its error shape. Each only translates between its wire and
//! the generation service ([`crate::service`]); none holds generation
//! logic of its own.

pub mod anthropic;
mod drive;
mod error;
mod logprobs;
pub mod ollama;
pub mod openai;
pub mod responses;
pub mod text;

use std::sync::Arc;

use axum::Router;
use axum::extract::DefaultBodyLimit;
use axum::http::{HeaderValue, header};
use axum::response::{IntoResponse, Response};

use super::errors::{Shape, Shaping};
use super::state::AppState;

/// An API's routes with the layers every API route has, from the inside
/// out: the API keys (when `keys`; not on the fallback), the browser
/// guard, the body limit, and outermost the API's shape layer, which
/// writes every error the others give in this API's shape.
pub fn with_layers(
    router: Router<Arc<AppState>>,
    state: &Arc<AppState>,
    shape: Shape,
    keys: bool,
) -> Router<Arc<AppState>> {
    let router = if keys {
        router.route_layer(axum::middleware::from_fn_with_state(
            Arc::clone(&state.api_keys),
            super::auth::require_key,
        ))
    } else {
        router
    };
    let max_request_bytes = state.settings.max_request_bytes;
    router
        .layer(axum::middleware::from_fn_with_state(
            Arc::clone(state),
            super::origin::guard,
        ))
        .layer(DefaultBodyLimit::max(max_request_bytes))
        .layer(axum::middleware::from_fn_with_state(
            Shaping {
                shape,
                max_request_bytes,
            },
            super::errors::shape,
        ))
}

/// A streamed response's headers: no caching, no proxy buffering.
pub fn streaming(mut response: Response) -> Response {
    let headers = response.headers_mut();
    headers.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-cache"));
    headers.insert("x-accel-buffering", HeaderValue::from_static("no"));
    response
}

/// A JSON body with its content type.
pub fn json_body(status: axum::http::StatusCode, body: String) -> Response {
    (status, [(header::CONTENT_TYPE, "application/json")], body).into_response()
}
