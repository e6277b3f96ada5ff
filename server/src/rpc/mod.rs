//! JSON-RPC 2.0: message classification, error codes, parameter
//! extraction and the dispatcher every transport shares. Protocol codes
//! are chosen here, from the typed errors of the layers below.

mod connection;
mod context;
mod dispatch;
mod error;
mod generate;
mod mcp;
mod message;
mod methods;
pub mod modern;
mod params;
mod wire;

pub use connection::{Connection, Notifier, Outbox};
pub use context::{RpcLimits, Services};
pub use dispatch::{Dispatcher, Reply};
pub use error::{RpcError, codes, end_error_code};
pub use message::{
    Incoming, PREVIEW_BYTES, classify, error_response, preview, recover_id, success_response,
};
pub use wire::{ChunkJson, chunk_notification};

/// MCP protocol versions spoken, newest first.
pub const PROTOCOL_VERSIONS: [&str; 4] = ["2025-11-25", "2025-06-18", "2025-03-26", "2024-11-05"];
