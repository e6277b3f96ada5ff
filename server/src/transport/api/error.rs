//! A service error as an HTTP response, written once for every API: the
//! rejection counted, the status (the service's table's, unless the API
//! says otherwise) and `Retry-After`. Each API supplies only its body.

use axum::http::{HeaderValue, StatusCode, header};
use axum::response::Response;

use crate::service::ServiceError;

/// How one API writes a service error.
pub trait ErrorShape {
    /// The status of `err`: the service's table's. (Anthropic's busy
    /// server is the one exception: see its `error.rs`.)
    fn status(err: &ServiceError) -> StatusCode {
        StatusCode::from_u16(err.status()).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR)
    }

    /// A response with `status` and the API's body for `err`.
    fn body(err: &ServiceError, status: StatusCode) -> Response;
}

/// `err` answered in `S`'s shape: counted, with its status and its
/// `Retry-After`.
pub fn respond<S: ErrorShape>(err: &ServiceError) -> Response {
    err.record();
    let status = S::status(err);
    let mut response = S::body(err, status);
    if let Some(secs) = err.retry_after_secs()
        && let Ok(value) = HeaderValue::from_str(&secs.to_string())
    {
        response.headers_mut().insert(header::RETRY_AFTER, value);
    }
    response
}
