//! Transports translate between a wire and the dispatcher (JSON-RPC,
//! MCP) or the generation service (the HTTP APIs, in `api/`); they hold
//! no business logic. HTTP statuses and each API's error shape are chosen
//! here.

pub mod agent;
pub mod api;
pub mod auth;
pub mod body_deadline;
pub mod chunked;
pub mod clock;
pub mod errors;
pub mod health;
pub mod http;
pub mod line_session;
pub mod lines;
pub mod mcp_http;
pub mod mcp_session;
pub mod origin;
pub mod priority;
pub mod serve;
pub mod session;
pub mod state;
pub mod stdio;
pub mod tcp;
pub mod ui;
pub mod ws;
pub mod ws_slots;

pub use state::{AppState, ResponsesSettings, Settings};

/// The response header naming the node that answered (`node_id`).
pub const NODE_HEADER: &str = "x-rkllm-node";
/// The response header naming the stream a `run` with `stream: true`
/// started over HTTP, so a balancer can send the stream's later calls to
/// the node that holds it (`docs/cluster.md`).
pub const STREAM_HEADER: &str = "x-rkllm-stream-id";
