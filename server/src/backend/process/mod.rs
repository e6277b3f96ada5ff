//! Models in runner processes: each loaded model lives in a child process
//! (`rkllm-server --runner NAME`) that owns the runtime handle, so a
//! runtime that aborts, crashes or hangs takes only its runner down. The
//! server keeps streams, queues and transports; the engine restarts
//! runners (see `docs/models.md`).
//!
//! [`ProcessBackend`] is the server side, [`serve`] the runner's main
//! loop, and `frame` the compact binary framing on the pipes between them.

mod child;
#[allow(unsafe_code)]
mod death;
mod frame;
mod parent;

use serde::{Deserialize, Serialize};

pub use child::serve;
pub use parent::{ProcessBackend, RunnerSettings};

use super::{BackendSettings, ValidRunRequest};
use crate::model::ModelSpec;

/// The first order to a runner: what to load, with which backend.
#[derive(Debug, Serialize, Deserialize)]
struct LoadOrder {
    backend: BackendSettings,
    model: ModelSpec,
}

/// A run order as the runner reads it.
#[derive(Debug, Deserialize)]
struct RunOrder {
    request: ValidRunRequest,
    /// Stamp tokens with their production time (benchmark mode).
    stamp: bool,
}

/// A run order as the server writes it (same fields, borrowed).
#[derive(Debug, Serialize)]
struct RunOrderRef<'a> {
    request: &'a ValidRunRequest,
    stamp: bool,
}
