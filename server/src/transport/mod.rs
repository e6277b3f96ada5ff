//! Transports translate between a wire and the dispatcher; they hold no
//! business logic.

pub mod auth;
pub mod chunked;
pub mod compat;
pub mod health;
pub mod http;
pub mod line_session;
pub mod lines;
pub mod mcp_http;
pub mod ollama;
pub mod openai;
pub mod serve;
pub mod session;
pub mod stdio;
pub mod tcp;
pub mod tools;
pub mod ws;
