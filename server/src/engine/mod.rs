//! The engine: validates requests, queues them per model (bounded, FIFO
//! in each of two lanes: interactive before background, up to a
//! background job's ageing bound)
//! and runs one generation at a time per model on that model's own OS
//! thread (the NPU's rule), feeding each request's stream. It knows
//! nothing of JSON or transports; it drives a [`Backend`] and the stream
//! manager, both below it.

mod domains;
mod gates;
mod idle;
mod job;
mod keep_alive;
mod lifecycle;
mod output;
mod priority;
mod profile;
mod request;
mod reuse;
mod scheduler;
mod tokenizers;

pub use crate::backend::{ALL_OVERRIDES, Backend, BackendError, ValidRunRequest};
pub use gates::refusal;
pub use keep_alive::KeepAlive;
pub use lifecycle::{Lifecycle, ModelState};
pub use priority::{Ageing, Priority};
pub use profile::ModelProfile;
pub use request::{
    BYTES_PER_TOKEN, DEFAULT_MAX_RERANK_TOKENS, DEFAULT_MAX_SCHEMA_BYTES, RequestLimits,
    RunRequest, ValidationError, check_context, check_embedding, check_images, check_lora,
    check_overrides, check_seed, prompt_tokens, request_context,
};
pub use scheduler::{
    Engine, EngineError, EngineLimits, ModelInfo, NodeLoad, Readiness, Reservation,
};
pub use tokenizers::{TokenizerInfo, TokenizerOrigin};

#[cfg(test)]
mod tests;
