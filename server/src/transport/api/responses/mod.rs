//! The OpenAI Responses API (what Codex CLI and the OpenAI Agents SDK
//! speak): `POST /v1/responses`, streamed (SSE events) or not, and
//! `POST /v1/responses/input_tokens`. Each request's input items become
//! the service's conversation (`wire.rs`), the generation's events become
//! output items and stream events (`stream.rs`), and a finished response
//! is kept for `previous_response_id` in a bounded store (`store.rs`),
//! found again only with the API key that made it. The store is these
//! routes' own (an `Extension` layered on them), not the shared state's.
//! Bodies may come compressed with zstd (`body.rs`). Errors are OpenAI's
//! `{"error": {…}}`; once a stream has started, a failure is its
//! `response.failed` event, and a prompt too large for the model's context
//! is one too (`context_length_exceeded`), which is what Codex reads.
//! `GET /v1/responses` (Codex's WebSocket attempt) is refused at once with
//! 405 and `Allow: POST`.

mod body;
pub mod store;
mod stream;
mod wire;

use std::sync::Arc;
use std::time::Duration;

use axum::Extension;
use axum::Json;
use axum::Router;
use axum::body::Bytes;
use axum::extract::State;
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::sse::{Event as SseEvent, KeepAlive};
use axum::response::{IntoResponse, Response};
use axum::routing::post;
use serde_json::json;

pub use store::{
    DEFAULT_STORE_MAX_BYTES, DEFAULT_STORE_MAX_ENTRIES, DEFAULT_STORE_TTL_SECS, Owner,
    ResponseStore, StoreSettings,
};

use super::drive::{self, Framer, SseFrame};
use super::openai::{OpenAiError, shape};
use crate::service::streams::new_stream_id;
use crate::service::{Batch, Input, Message, Running, ServiceError, parse_body};
use body::BodyError;
use stream::{Frame, Output, Status};
use wire::Translated;

use super::super::auth::KeyId;
use super::super::clock::unix_now;
use super::super::state::AppState;

type Result<T> = std::result::Result<T, OpenAiError>;

/// The routes (under `/v1`, before the OpenAI API's catch-all), with
/// their own store of finished responses, kept as `settings` say for as
/// long as the routes live.
pub fn routes(settings: StoreSettings) -> Router<Arc<AppState>> {
    let store = Arc::new(ResponseStore::new(settings));
    Router::new()
        .route("/v1/responses", post(create).get(websocket_refused))
        .route("/v1/responses/input_tokens", post(input_tokens))
        .layer(Extension(store))
}

/// `GET /v1/responses`: Codex tries the Responses API over a WebSocket
/// first; the answer is an immediate 405, after which it posts.
async fn websocket_refused() -> Response {
    crate::metrics::rejected("unsupported");
    let mut response = shape(
        StatusCode::METHOD_NOT_ALLOWED,
        "the Responses API is served over HTTP only (no WebSocket): POST /v1/responses",
    );
    response
        .headers_mut()
        .insert(header::ALLOW, HeaderValue::from_static("POST"));
    response
}

/// Why a request was refused before it reached the service.
#[derive(Debug)]
enum Refusal {
    /// Its body could not be read.
    Body(BodyError),
    /// The service's (or this API's) refusal.
    Service(ServiceError),
}

impl From<ServiceError> for Refusal {
    fn from(err: ServiceError) -> Self {
        Self::Service(err)
    }
}

impl IntoResponse for Refusal {
    fn into_response(self) -> Response {
        let err = match self {
            Self::Service(err) => return OpenAiError(err).into_response(),
            Self::Body(err) => err,
        };
        match err {
            BodyError::Encoding(_) => {
                crate::metrics::rejected("unsupported");
                shape(StatusCode::UNSUPPORTED_MEDIA_TYPE, &err.to_string())
            }
            BodyError::TooLarge { .. } => {
                crate::metrics::rejected("too_large");
                shape(StatusCode::PAYLOAD_TOO_LARGE, &err.to_string())
            }
            BodyError::TooManyParts { .. } | BodyError::Corrupt(_) => {
                OpenAiError(ServiceError::invalid("body", err.to_string())).into_response()
            }
        }
    }
}

/// The service's errors under this API's names: the conversation is
/// `input`, the token cap `max_output_tokens`.
fn renamed(err: ServiceError) -> ServiceError {
    match err {
        ServiceError::Invalid { field, message } if field == "max_tokens" => {
            ServiceError::Invalid {
                field: "max_output_tokens".into(),
                message: message.replace("`max_tokens`", "`max_output_tokens`"),
            }
        }
        ServiceError::Invalid { field, message } if field == "messages" => ServiceError::Invalid {
            field: "input".into(),
            message: message.replace("`messages`", "`input`"),
        },
        ServiceError::Invalid { field, message } if field == "logprobs" => ServiceError::Invalid {
            field: "include".into(),
            message: message.replace("`logprobs`", "`include` \"message.output_text.logprobs\""),
        },
        other => other.renamed("prompt", "input"),
    }
}

/// A request read, translated and given its earlier conversation: what
/// to send, and what to keep of it.
struct Prepared {
    translated: Translated,
    kept: Vec<Message>,
}

/// Reads the body (decoded from zstd when it came so, on the blocking
/// pool), translates it and puts the earlier conversation (`owner`'s)
/// before its input.
async fn prepare(
    state: &AppState,
    store: &ResponseStore,
    owner: Owner,
    headers: &HeaderMap,
    body: Bytes,
) -> std::result::Result<Prepared, Refusal> {
    let json = body::read(headers, body, state.settings.max_request_bytes)
        .await
        .map_err(Refusal::Body)?;
    let request: wire::Request = parse_body(&json)?;
    let mut translated = request.translate()?;
    let earlier = match translated.previous.as_deref() {
        None => None,
        Some(id) => Some(earlier(store, id, owner)?),
    };
    let (sent, kept) = translated.conversation(earlier.as_deref().unwrap_or_default());
    if sent.is_empty() {
        return Err(ServiceError::invalid("input", "`input` is required").into());
    }
    translated.generate.input = Input::Chat(sent);
    if translated.truncate {
        let dropped = state.service.fit_context(&mut translated.generate).await?;
        if dropped > 0 {
            tracing::info!(
                dropped,
                "truncation \"auto\": the oldest messages were left out to fit the model's context"
            );
        }
    }
    Ok(Prepared { translated, kept })
}

/// The conversation of `previous_response_id`, or why it cannot be had.
/// Another key's response is refused exactly as an unknown id is.
fn earlier(
    store: &ResponseStore,
    id: &str,
    owner: Owner,
) -> std::result::Result<Arc<[Message]>, ServiceError> {
    if !store.enabled() {
        return Err(ServiceError::invalid(
            "previous_response_id",
            "`previous_response_id` cannot be used: this server keeps no responses \
             ([responses] store_max_entries = 0); send the whole conversation in `input`",
        ));
    }
    store.get(id, owner).ok_or_else(|| {
        let settings = store.settings();
        ServiceError::invalid(
            "previous_response_id",
            format!(
                "no response {id:?} is kept here: responses are kept for {} s, the latest {} (up \
                 to {} bytes), and not when the request said `store: false` or before a restart; \
                 send the whole conversation in `input`",
                settings.ttl.as_secs(),
                settings.max_entries,
                settings.max_bytes
            ),
        )
    })
}

/// What a finished response keeps, when its request asked for it.
struct Keep {
    store: Arc<ResponseStore>,
    owner: Owner,
    conversation: Vec<Message>,
}

impl Keep {
    /// Keeps the conversation with `output`'s answer, if it completed or
    /// was cut at its token limit.
    fn keep(self, output: &Output) {
        if matches!(
            output.status(),
            Some(Status::Completed | Status::Incomplete)
        ) {
            let mut conversation = self.conversation;
            conversation.push(output.assistant_turn());
            self.store
                .keep(output.id().to_owned(), self.owner, conversation);
        }
    }
}

/// Whose responses a request may keep and continue: its API key's.
fn owner(key: Option<Extension<KeyId>>) -> Owner {
    key.map(|Extension(id)| id)
}

/// `POST /v1/responses`.
async fn create(
    State(state): State<Arc<AppState>>,
    Extension(responses): Extension<Arc<ResponseStore>>,
    key: Option<Extension<KeyId>>,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    crate::metrics::api_request("responses");
    let owner = owner(key);
    let prepared = prepare(&state, &responses, owner, &headers, body).await;
    let Prepared { translated, kept } = match prepared {
        Ok(prepared) => prepared,
        Err(refusal) => return refusal.into_response(),
    };
    let Translated {
        generate,
        store,
        stream,
        logprobs,
        mut echo,
        ..
    } = translated;
    let requested_model = generate.model.clone().unwrap_or_default();
    let id = format!("resp_{}", new_stream_id());
    echo.insert("created_at".into(), json!(unix_now()));
    let keep = (store && responses.enabled()).then(|| Keep {
        store: Arc::clone(&responses),
        owner,
        conversation: kept,
    });
    let running = match state.service.start(generate).await.map_err(renamed) {
        Ok(running) => running,
        Err(err @ ServiceError::TooLarge { .. }) if stream && err.field() == Some("input") => {
            // A prompt over the context, told the way streaming clients
            // read it.
            err.record();
            echo.insert("model".into(), json!(requested_model));
            let mut output = Output::new(id, echo, true);
            let mut frames = Vec::new();
            output.start(&mut frames);
            output.refuse("context_length_exceeded", &err.to_string(), &mut frames);
            return sse(futures_util::stream::iter(frames));
        }
        Err(err) => return OpenAiError(err).into_response(),
    };
    echo.insert("model".into(), json!(running.model()));
    if stream {
        let output = Output::new(id, echo, true).with_logprobs(logprobs);
        return stream_response(running, output, keep);
    }
    let output = Output::new(id, echo, false).with_logprobs(logprobs);
    match whole_response(running, output, keep).await {
        Ok(response) => response,
        Err(err) => err.into_response(),
    }
}

/// The whole response: the generation collected, its events read into
/// the output without framing them.
async fn whole_response(
    running: Running,
    mut output: Output,
    keep: Option<Keep>,
) -> Result<Response> {
    let done = running
        .collect_with(|batch| {
            output.batch(batch, &mut Vec::new());
            std::future::ready(Ok::<_, ServiceError>(()))
        })
        .await?
        .ok()?;
    if output.status() == Some(Status::Failed) {
        return Err(ServiceError::Failed {
            message: "the generation was stopped before its end (the server is shutting down)"
                .into(),
        }
        .into());
    }
    if let Some(keep) = keep {
        keep.keep(&output);
    }
    Ok(output.finished_response(&done.ending))
}

/// Frames as an SSE response, with keep-alive comments during a long
/// prefill.
fn sse<T: SseFrame>(frames: impl futures_util::Stream<Item = T> + Send + 'static) -> Response {
    let keep_alive = KeepAlive::new()
        .interval(Duration::from_secs(15))
        .text("keep-alive");
    drive::sse(frames, keep_alive)
}

impl SseFrame for Frame {
    fn event(self) -> SseEvent {
        SseEvent::default().event(self.kind).data(self.data)
    }
}

/// A response's events as they stream: `response.created` and
/// `response.in_progress`, then each batch's; the finished response is
/// kept when its request asked for it.
struct Events {
    output: Output,
    keep: Option<Keep>,
}

impl Framer for Events {
    type Frame = Frame;

    fn start(&mut self, out: &mut Vec<Frame>) {
        self.output.start(out);
    }

    fn batch(&mut self, batch: &Batch, out: &mut Vec<Frame>) {
        self.output.batch(batch, out);
        if batch.end.is_some()
            && let Some(keep) = self.keep.take()
        {
            keep.keep(&self.output);
        }
    }
}

/// Streams the generation as events (see [`drive`](super::drive)).
fn stream_response(running: Running, output: Output, keep: Option<Keep>) -> Response {
    sse(drive::frames(running, Events { output, keep }))
}

/// `POST /v1/responses/input_tokens`: the tokens a request's input would
/// take (estimated as the engine does when it checks a prompt against a
/// model's context).
async fn input_tokens(
    State(state): State<Arc<AppState>>,
    Extension(responses): Extension<Arc<ResponseStore>>,
    key: Option<Extension<KeyId>>,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    let prepared = prepare(&state, &responses, owner(key), &headers, body).await;
    let Prepared { translated, .. } = match prepared {
        Ok(prepared) => prepared,
        Err(refusal) => return refusal.into_response(),
    };
    match state.service.count_tokens(&translated.generate).await {
        Ok(tokens) => {
            Json(json!({"object": "response.input_tokens", "input_tokens": tokens})).into_response()
        }
        Err(err) => OpenAiError(renamed(err)).into_response(),
    }
}

#[cfg(test)]
mod tests {
    use axum::body::Body;
    use axum::http::Request;
    use serde_json::Value;
    use tower::ServiceExt;

    use super::*;

    /// A mock server's state, with an empty model store.
    fn state() -> Arc<AppState> {
        let mut config = crate::Config::default();
        config.mock.tokens_per_second = 0.0;
        config.mock.prefill_ms = 0;
        config.store.models_dir = Some(std::env::temp_dir().join(format!(
            "rkllm-server-responses-routes-{}",
            std::process::id()
        )));
        crate::startup::build(&config).expect("the mock backend starts")
    }

    /// `POST /v1/responses` with `body`: the status and the JSON answer.
    async fn create(router: &axum::Router, body: &Value) -> (StatusCode, Value) {
        let request = Request::post("/v1/responses")
            .header(header::CONTENT_TYPE, "application/json")
            .body(Body::from(body.to_string()))
            .unwrap();
        let response = router.clone().oneshot(request).await.unwrap();
        let status = response.status();
        let bytes = axum::body::to_bytes(response.into_body(), usize::MAX)
            .await
            .unwrap();
        (status, serde_json::from_slice(&bytes).unwrap())
    }

    #[tokio::test]
    async fn the_routes_keep_responses_in_their_own_store_and_continue_them() {
        let state = state();
        let router = crate::app(Arc::clone(&state));
        let (status, first) = create(&router, &json!({"model": "mock", "input": "hello"})).await;
        assert_eq!(status, StatusCode::OK, "{first}");
        let id = first["id"].as_str().expect("an id").to_owned();

        let next = json!({"model": "mock", "input": "and then?", "previous_response_id": id});
        let (status, second) = create(&router, &next).await;
        assert_eq!(status, StatusCode::OK, "{second}");

        // Another router over the same state has a store of its own.
        let other = crate::app(Arc::clone(&state));
        let (status, refused) = create(&other, &next).await;
        assert_eq!(status, StatusCode::BAD_REQUEST, "{refused}");
        assert_eq!(refused["error"]["param"], "previous_response_id");
    }
}
