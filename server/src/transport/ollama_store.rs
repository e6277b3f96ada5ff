//! Ollama's model management over the store: `POST /api/pull` (streaming
//! Ollama's progress objects) and `DELETE /api/delete`. Both are behind
//! the API keys like the rest of `/api`, and `[store] api_pull = false`
//! switches them off.

use std::sync::Arc;

use axum::Json;
use axum::body::{Body, Bytes};
use axum::extract::State;
use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};
use serde::Deserialize;
use serde_json::{Value, json};

use super::state::AppState;
use crate::store::{Progress, PullError};

fn error(status: StatusCode, message: impl Into<String>) -> Response {
    (status, Json(json!({"error": message.into()}))).into_response()
}

fn switched_off() -> Response {
    error(
        StatusCode::FORBIDDEN,
        "pulling and deleting models over the API is switched off ([store] api_pull = false); \
         use `rkllm-server pull` on the server",
    )
}

#[derive(Debug, Deserialize)]
struct PullBody {
    model: Option<String>,
    name: Option<String>,
    stream: Option<bool>,
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

/// `POST /api/pull {"model": "owner/repo[:file]", "stream"?}`. URLs are
/// for the command line only.
pub async fn pull(State(state): State<Arc<AppState>>, body: Bytes) -> Response {
    let service = Arc::clone(&state.store);
    if !service.api_pull {
        return switched_off();
    }
    let request: PullBody = match super::ollama::parse(&body) {
        Ok(r) => r,
        Err(response) => return *response,
    };
    let Some(spec) = request
        .model
        .or(request.name)
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
             pull a URL with `rkllm-server pull URL` on the server",
        );
    }
    let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel::<Result<Value, PullError>>();
    let pull_request = service.request(&spec, None, None);
    let worker_state = Arc::clone(&state);
    // The pull goes on if the client leaves: what it downloads is kept.
    tokio::spawn(async move {
        let progress_tx = tx.clone();
        let mut on_progress = move |p: Progress| {
            if let Some(line) = progress_line(&p) {
                let _ = progress_tx.send(Ok(line));
            }
        };
        let store = &worker_state.store;
        let result =
            crate::store::pull::pull(&store.store, &store.hub, &pull_request, &mut on_progress)
                .await;
        let _ = tx.send(match result {
            Ok(manifest) => {
                let spec = store.store.spec(&manifest);
                match worker_state.engine.add_model(spec) {
                    Ok(()) => Ok(json!({"status": "success", "model": manifest.name})),
                    Err(err) => Err(PullError::Io(err.to_string())),
                }
            }
            Err(err) => Err(err),
        });
    });
    if request.stream == Some(false) {
        // One answer at the end.
        let mut last = None;
        while let Some(item) = rx.recv().await {
            match item {
                Ok(line) if line["status"] == "success" => last = Some(line),
                Ok(_) => {}
                Err(err) => {
                    let status = StatusCode::from_u16(err.http_status())
                        .unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
                    return error(status, err.to_string());
                }
            }
        }
        return match last {
            Some(line) => Json(line).into_response(),
            None => error(StatusCode::INTERNAL_SERVER_ERROR, "the pull stopped"),
        };
    }
    let lines = futures_util::stream::unfold(rx, |mut rx| async move {
        let item = rx.recv().await?;
        let value = match item {
            Ok(line) => line,
            Err(err) => json!({"error": err.to_string()}),
        };
        let mut bytes = serde_json::to_vec(&value).unwrap_or_default();
        bytes.push(b'\n');
        Some((Ok::<_, std::convert::Infallible>(Bytes::from(bytes)), rx))
    });
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
    let request: DeleteBody = match super::ollama::parse(&body) {
        Ok(r) => r,
        Err(response) => return *response,
    };
    let Some(given) = request.model.or(request.name) else {
        return error(StatusCode::BAD_REQUEST, "`model` is required");
    };
    let name = given.strip_suffix(":latest").unwrap_or(&given).to_owned();
    let store = &state.store;
    let name = match store.store.get(&name) {
        Ok(Some(m)) => m.name,
        Ok(None) => match store.find_by_source(&given) {
            Some(m) => m.name,
            None if state.engine.models().iter().any(|m| m.name == name) => {
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
    let _ = state.engine.remove_model(&name).await;
    let dir = store.store.clone();
    let removed_name = name.clone();
    match tokio::task::spawn_blocking(move || dir.remove(&removed_name)).await {
        Ok(Ok(_)) => {
            tracing::info!(model = %name, "model deleted from the store");
            StatusCode::OK.into_response()
        }
        Ok(Err(err)) => error(
            StatusCode::INTERNAL_SERVER_ERROR,
            format!("cannot remove '{name}': {err}"),
        ),
        Err(err) => error(StatusCode::INTERNAL_SERVER_ERROR, err.to_string()),
    }
}
