//! Backends: what runs a model. The interface the engine drives
//! ([`Backend`], [`Runner`], [`TokenSink`]), the requests it accepts, chat
//! templates and conversation reuse, and two implementations: the mock
//! (the default, for development and tests) and the real RKLLM runtime
//! (`rkllm`, the only module with `unsafe` code besides the fork hook of
//! `process`).
//!
//! Below the engine: it knows nothing of streams, queues or transports.

mod api;
pub mod constraint;
mod conversation;
pub mod image;
mod jinja;
pub mod mock;
pub mod process;
pub mod reasoning;
mod request;
#[allow(unsafe_code)]
pub mod rkllm;
mod sink;
mod template;
mod utf8;

pub use api::{
    ALL_OVERRIDES, Backend, BackendError, BackendSettings, EmbeddingSpec, Generation, HistoryReuse,
    LoraAdapter, ModelSettings, ModelSpec, Pooling, PromptCacheSpec, Runner, SnapshotReport,
    VISION_FAMILIES, VisionSpec,
};
pub use conversation::{ConversationState, Plan, Turn};
pub use image::{IMAGE_TAG, ImageData, ImageLimits};
pub use jinja::{
    JinjaTemplate, MAX_RENDERED_BYTES, RenderJob, RenderOptions, TemplateCall, TemplateMessage,
};
pub use mock::{MockBackend, MockConfig};
pub use request::{Constrained, Role, Sampling, ValidRunRequest};
pub use rkllm::{InitSettings, RkllmBackend, RkllmSettings, SamplingValues, SnapshotSettings};
pub use sink::{TokenOutput, TokenSink};
pub use template::{ChatTemplate, CustomTemplate};
pub use utf8::Utf8Assembler;
