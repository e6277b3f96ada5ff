//! The engine: validates requests, queues them per model (bounded FIFO)
//! and runs one generation at a time per model on that model's own OS
//! thread (the NPU's rule). It knows nothing of JSON or transports.

mod backend;
mod cancel;
mod conversation;
mod outcome;
mod request;
mod scheduler;
mod template;

pub use backend::{
    ALL_OVERRIDES, Backend, BackendError, Generation, ModelSettings, ModelSpec, Runner, TokenSink,
};
pub use cancel::CancelToken;
pub use conversation::{ConversationState, Plan, Turn};
pub use outcome::{EndError, EndInfo, FinishReason, Timings, Usage};
pub use request::{RequestLimits, Role, RunRequest, Sampling, ValidRunRequest, ValidationError};
pub use scheduler::{Engine, EngineError, EngineLimits, ModelInfo};
pub use template::{ChatTemplate, CustomTemplate};
