//! Backends: the mock (the default, for development and tests) and, in
//! its own module, the real RKLLM runtime.

pub mod mock;
mod utf8;

pub use mock::{MockBackend, MockConfig};
pub use utf8::Utf8Assembler;
