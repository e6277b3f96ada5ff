//! Ollama's model management over the store: `POST /api/pull` (streaming
//! Ollama's progress objects) and `DELETE /api/delete`. Both are behind
//! the API keys like the rest of `/api`, and `[store] api_pull = false`
//! switches them off.
//!
//! A pull runs in a task tied to its answer: a client that leaves (the
//! answer dropped) cancels it, which releases the model's lock and keeps
//! what arrived for a later pull to resume. An error before the download
//! begins is answered with its HTTP status; once progress lines have gone
//! out, it comes as the stream's last line.

use std::sync::Arc;

use axum::Json;
use axum::body::{Body, Bytes};
use axum::extract::State;
use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};
use serde::Deserialize;
use serde_json::{Value, json};
use tokio::sync::mpsc;

use super::super::super::state::AppState;
use super::error::shape;
use crate::store::{Progress, PullError, PullRequest, TokenizerSetting, check_repo_path};

/// Progress lines a pull may be ahead of its client. When the buffer is
/// full a progress line is dropped (a later one carries newer figures);
/// the last line, success or error, always goes.
const PROGRESS_BUFFER: usize = 64;

fn error(status: StatusCode, message: impl Into<String>) -> Response {
    shape(status, &message.into())
}

fn switched_off() -> Response {
    error(
        StatusCode::FORBIDDEN,
        "pulling and deleting models over the API is switched off ([store] api_pull = false); \
         use `rkllm-server pull --local` on the server",
    )
}

#[derive(Debug, Deserialize)]
struct PullBody {
    model: Option<String>,
    name: Option<String>,
    stream: Option<bool>,
    /// Store the model even if this server cannot run it.
    #[serde(default)]
    store_only: bool,
    /// The name to store it under (the command line's `--name`; Ollama's
    /// `name` is the model, so this one has a name of its own).
    store_name: Option<String>,
    /// Branch, tag or commit (the command line's `--revision`).
    revision: Option<String>,
    /// The tokenizer's repository, `owner/repo[:path]` (`--tokenizer`).
    tokenizer: Option<String>,
}

impl PullBody {
    /// The pull it asks for, or a 400 naming the field that is wrong.
    fn request(
        &self,
        service: &crate::store::Service,
        spec: &str,
    ) -> Result<PullRequest, Box<Response>> {
        let bad = |message: String| Box::new(error(StatusCode::BAD_REQUEST, message));
        if let Some(revision) = &self.revision {
            check_repo_path(revision).map_err(|m| bad(format!("`revision`: {m}")))?;
        }
        let mut request = service.request(
            spec,
            self.store_name.clone(),
            self.revision.clone(),
            self.store_only,
        );
        if let Some(tokenizer) = &self.tokenizer {
            match TokenizerSetting::parse(tokenizer) {
                Ok(TokenizerSetting::Hub(hub)) => request.tokenizer = Some(hub),
                Ok(TokenizerSetting::File(_)) => {
                    return Err(bad(format!(
                        "`tokenizer` {tokenizer:?} must be a Hugging Face repository, \
                         owner/repo or owner/repo:path"
                    )));
                }
                Err(err) => return Err(bad(format!("`tokenizer`: {err}"))),
            }
        }
        Ok(request)
    }
}

/// What a pull's task tells the handler.
enum Event {
    /// A progress line; `begun`: the download has begun (or the pull
    /// waits for another of the same model), so the answer starts.
    Line { line: Value, begun: bool },
    /// The end: the success line, or why it failed.
    End(Result<Value, PullError>),
}

/// Cancels a pull's task when its answer is dropped before the end (the
/// client left): the task's file lock goes with it, and what arrived
/// stays in `.partial/` to resume.
struct CancelOnDrop {
    task: tokio::task::AbortHandle,
    spec: String,
    ended: bool,
}

impl Drop for CancelOnDrop {
    fn drop(&mut self) {
        if !self.ended && !self.task.is_finished() {
            self.task.abort();
            tracing::info!(
                model = %self.spec,
                "pull cancelled: the client left (what arrived is kept, to resume)"
            );
        }
    }
}

/// Runs one pull, telling `events` what happens, then adds the model to
/// the engine.
async fn run_pull(state: Arc<AppState>, request: PullRequest, events: mpsc::Sender<Event>) {
    let progress_events = events.clone();
    let mut on_progress = move |p: Progress| {
        let begun = matches!(p, Progress::Downloading { .. } | Progress::Waiting);
        if let Some(line) = progress_line(&p) {
            // Full (see PROGRESS_BUFFER) or the client gone: this line is dropped.
            if progress_events
                .try_send(Event::Line { line, begun })
                .is_err()
            {
                tracing::trace!("a pull progress line dropped");
            }
        }
    };
    let store = &state.store;
    let result = store.pull(&request, &mut on_progress).await;
    let end = match result {
        Ok((manifest, spec)) => match state.service.add_model(spec) {
            // `manifest` and `path` are this server's own keys: the
            // command line prints what was pulled from them.
            Ok(()) => Ok(json!({"status": "success", "model": manifest.name,
                                "path": store.model_dir(&manifest.name),
                                "manifest": manifest})),
            Err(err) => Err(PullError::Io(err.to_string())),
        },
        Err(err) => Err(err),
    };
    if events.send(Event::End(end)).await.is_err() {
        tracing::debug!(model = %request.spec, "the pull ended after its client left");
    }
}

/// The HTTP status of a failed pull.
fn pull_status(err: &PullError) -> StatusCode {
    match err {
        PullError::BadSource(_)
        | PullError::BadName(_)
        | PullError::Insecure(_)
        | PullError::Ambiguous { .. } => StatusCode::BAD_REQUEST,
        PullError::NotFound(_) | PullError::NoModelFile(_) => StatusCode::NOT_FOUND,
        PullError::Denied { .. } | PullError::BadToken { .. } => StatusCode::FORBIDDEN,
        PullError::NeedsVisionRuntime { .. } => StatusCode::CONFLICT,
        PullError::BadContent(_) => StatusCode::UNPROCESSABLE_ENTITY,
        PullError::DiskFull { .. } | PullError::LowSpace { .. } | PullError::TooLarge { .. } => {
            StatusCode::INSUFFICIENT_STORAGE
        }
        PullError::Transfer(_)
        | PullError::Unreachable { .. }
        | PullError::Cut { .. }
        | PullError::Checksum { .. }
        | PullError::Oversize { .. }
        | PullError::BadListing(_) => StatusCode::BAD_GATEWAY,
        PullError::TooSlow { .. } | PullError::TimedOut(_) => StatusCode::GATEWAY_TIMEOUT,
        PullError::Io(_) => StatusCode::INTERNAL_SERVER_ERROR,
    }
}

/// Ollama's error answer for a failed pull.
fn pull_error(err: &PullError) -> Response {
    error(pull_status(err), err.to_string())
}

/// One NDJSON line.
fn ndjson(value: &Value) -> Result<Bytes, std::convert::Infallible> {
    let mut bytes = serde_json::to_vec(value).unwrap_or_default();
    bytes.push(b'\n');
    Ok(Bytes::from(bytes))
}

/// One progress report as Ollama's clients read it.
fn progress_line(progress: &Progress) -> Option<Value> {
    Some(match progress {
        Progress::Resolving => json!({"status": "pulling manifest"}),
        Progress::Waiting => json!({"status": "waiting for another pull of this model"}),
        Progress::Downloading {
            file,
            sha256,
            completed,
            total,
        } => {
            let digest = sha256
                .as_ref()
                .map_or_else(String::new, |s| format!("sha256:{s}"));
            let mut line = json!({"status": format!("pulling {file}"), "digest": digest,
                                  "completed": completed});
            if let Some(total) = total {
                line["total"] = json!(total);
            }
            line
        }
        Progress::Verifying => json!({"status": "verifying sha256 digest"}),
        Progress::Writing => json!({"status": "writing manifest"}),
        Progress::Done { .. } => return None,
    })
}

/// `POST /api/pull {"model": "owner/repo[:file]", "stream"?}`, with this
/// server's own `store_only`, `store_name`, `revision` and `tokenizer`
/// (the command line's flags). URLs are for the command line only.
pub async fn pull(State(state): State<Arc<AppState>>, body: Bytes) -> Response {
    let service = Arc::clone(&state.store);
    if !service.api_pull {
        return switched_off();
    }
    let request: PullBody = match super::parse(&body) {
        Ok(r) => r,
        Err(response) => return *response,
    };
    let Some(spec) = request
        .model
        .clone()
        .or_else(|| request.name.clone())
        .filter(|s| !s.trim().is_empty())
    else {
        return error(
            StatusCode::BAD_REQUEST,
            "`model` is required: owner/repo, owner/repo:file.rkllm or an https:// URL",
        );
    };
    if spec.contains("://") {
        // A URL would let any API client make the server fetch any address.
        return error(
            StatusCode::BAD_REQUEST,
            "the API pulls from the model endpoint only (owner/repo or owner/repo:file.rkllm); \
             pull a URL with `rkllm-server pull --local URL` on the server",
        );
    }
    let streamed = request.stream != Some(false);
    let pull_request = match request.request(&service, &spec) {
        Ok(r) => r,
        Err(response) => return *response,
    };
    let (tx, mut rx) = mpsc::channel(PROGRESS_BUFFER);
    let task = tokio::spawn(run_pull(Arc::clone(&state), pull_request, tx));
    let mut guard = CancelOnDrop {
        task: task.abort_handle(),
        spec,
        ended: false,
    };
    // Until the download begins, an error is answered with its status.
    let mut early = Vec::new();
    loop {
        match rx.recv().await {
            Some(Event::Line { line, begun }) => {
                if streamed {
                    early.push(line);
                    if begun {
                        break;
                    }
                }
            }
            Some(Event::End(Ok(line))) => {
                guard.ended = true;
                if !streamed {
                    return Json(line).into_response();
                }
                early.push(line);
                break;
            }
            Some(Event::End(Err(err))) => {
                guard.ended = true;
                return pull_error(&err);
            }
            None => {
                guard.ended = true;
                return error(StatusCode::INTERNAL_SERVER_ERROR, "the pull stopped");
            }
        }
    }
    // The rest streams; the guard lives as long as the answer.
    let lines = futures_util::stream::unfold(
        (rx, guard, early.into_iter()),
        |(mut rx, mut guard, mut early)| async move {
            if let Some(line) = early.next() {
                return Some((ndjson(&line), (rx, guard, early)));
            }
            let line = match rx.recv().await? {
                Event::Line { line, .. } => line,
                Event::End(end) => {
                    guard.ended = true;
                    end.unwrap_or_else(|err| json!({"error": err.to_string()}))
                }
            };
            Some((ndjson(&line), (rx, guard, early)))
        },
    );
    (
        [(header::CONTENT_TYPE, "application/x-ndjson")],
        Body::from_stream(lines),
    )
        .into_response()
}

#[derive(Debug, Deserialize)]
struct DeleteBody {
    model: Option<String>,
    name: Option<String>,
}

/// `DELETE /api/delete {"model": NAME}`: removes a stored model (after
/// ending what it is doing). A model from the configuration file is not
/// the API's to delete.
pub async fn delete(State(state): State<Arc<AppState>>, body: Bytes) -> Response {
    if !state.store.api_pull {
        return switched_off();
    }
    let request: DeleteBody = match super::parse(&body) {
        Ok(r) => r,
        Err(response) => return *response,
    };
    let Some(given) = request.model.or(request.name) else {
        return error(StatusCode::BAD_REQUEST, "`model` is required");
    };
    let name = given.strip_suffix(":latest").unwrap_or(&given).to_owned();
    let store = &state.store;
    let name = match store.stored(&name).await {
        Ok(Some(m)) => m.name,
        Ok(None) => match store.find_by_source(&given) {
            Some(m) => m.name,
            None if state.service.models().iter().any(|m| m.name == name) => {
                return error(
                    StatusCode::BAD_REQUEST,
                    format!(
                        "model '{name}' comes from the configuration file, not the store; remove \
                         it there"
                    ),
                );
            }
            None => return error(StatusCode::NOT_FOUND, format!("model '{given}' not found")),
        },
        Err(err) => return error(StatusCode::BAD_REQUEST, err.to_string()),
    };
    let _ = state.service.remove_model(&name).await;
    match store.remove(&name).await {
        Ok(_) => {
            tracing::info!(model = %name, "model deleted from the store");
            StatusCode::OK.into_response()
        }
        Err(err) => error(
            StatusCode::INTERNAL_SERVER_ERROR,
            format!("cannot remove '{name}': {err}"),
        ),
    }
}
