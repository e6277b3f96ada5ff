//! Backends: what runs a model. The interface the engine drives
//! ([`Backend`], [`Runner`], [`TokenSink`]), the requests it accepts, the
//! reuse of a runtime's chat history, the vocabularies runners load, and
//! two implementations: the mock (the default, for development and tests)
//! and the real RKLLM runtime (`rkllm`, the only module with `unsafe` code
//! besides the fork hook of `process`). What a model *is* (its templates,
//! tokenizer, messages, sampling) is `crate::model`'s: a runner is handed
//! a finished prompt and renders nothing.
//!
//! Below the engine: it knows nothing of streams, queues or transports.

mod aligned;
mod api;
pub mod image;
pub mod mock;
pub mod process;
mod request;
pub mod rkllm;
mod sink;
mod utf8;
pub mod vocabularies;

pub use api::{
    ALL_OVERRIDES, Backend, BackendError, BackendSettings, Generation, PromptReuse, Runner,
    SnapshotReport, files_present,
};
pub use mock::{MockBackend, MockConfig};
pub use request::{Constrained, ProbeOrder, ValidRunRequest};
pub use rkllm::{
    InitSettings, ProbeSettings, RkllmBackend, RkllmSettings, SamplingValues, SnapshotSettings,
};
pub use sink::{TokenOutput, TokenSink};
pub use utf8::Utf8Assembler;
