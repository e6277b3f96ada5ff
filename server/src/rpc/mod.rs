//! JSON-RPC 2.0: message classification, error codes, parameter
//! extraction and the dispatcher every transport shares.

mod dispatch;
mod error;
mod mcp;
mod message;
mod methods;
mod params;
mod wire;

pub use dispatch::{Connection, Dispatcher, Notifier, Reply};
pub use error::{RpcError, codes};
pub use message::{
    Incoming, PREVIEW_BYTES, classify, error_response, preview, recover_id, success_response,
};
pub use wire::{ChunkJson, chunk_notification};

/// MCP protocol versions spoken, newest first.
pub const PROTOCOL_VERSIONS: [&str; 4] = ["2025-11-25", "2025-06-18", "2025-03-26", "2024-11-05"];
