//! Backends: the mock (the default, for development and tests) and the
//! real RKLLM runtime (`rkllm`, the only module with `unsafe` code).

pub mod mock;
#[allow(unsafe_code)]
pub mod rkllm;
mod utf8;

pub use mock::{MockBackend, MockConfig};
pub use rkllm::RkllmBackend;
pub use utf8::Utf8Assembler;
