//! A client for rkllm-server: JSON-RPC and MCP over stdio (spawning the
//! server as a child process), WebSocket and HTTP.
//!
//! [`Client::request`] sends a request and waits for the response with its
//! id, handing every notification met on the way (stream chunks, MCP
//! progress) to the caller. Over stdio, [`Client::close`] shuts the child
//! down gracefully: close its stdin, wait 2 s, SIGTERM, wait 2 s, SIGKILL.

mod transport;

use std::time::Duration;

use serde_json::{Value, json};

pub use transport::CloseStage;
use transport::Transport;

/// The MCP version the client offers.
pub const PROTOCOL_VERSION: &str = "2025-11-25";
/// How long [`Client::close`] waits after closing stdin, and after SIGTERM.
pub const CLOSE_WAIT: Duration = Duration::from_secs(2);

/// What went wrong.
#[derive(Debug, thiserror::Error)]
pub enum ClientError {
    /// The server answered with a JSON-RPC error.
    #[error("server error {code}: {message}")]
    Rpc {
        /// The error code.
        code: i64,
        /// The message.
        message: String,
        /// Extra data.
        data: Option<Value>,
    },
    /// The transport failed or closed.
    #[error("transport: {0}")]
    Transport(String),
    /// The server sent something that is not JSON-RPC.
    #[error("protocol: {0}")]
    Protocol(String),
}

impl ClientError {
    /// A transport failure, with every cause in the error's chain (a
    /// refused connection shows as such, not as "error sending request").
    pub(crate) fn transport(err: impl std::fmt::Display) -> Self {
        Self::Transport(err.to_string())
    }

    pub(crate) fn transport_chain(err: &(dyn std::error::Error + 'static)) -> Self {
        let mut text = err.to_string();
        let mut source = err.source();
        while let Some(cause) = source {
            let cause_text = cause.to_string();
            if !text.contains(&cause_text) {
                text.push_str(": ");
                text.push_str(&cause_text);
            }
            source = cause.source();
        }
        Self::Transport(text)
    }

    /// Whether the server refused the request for want of a valid API key.
    pub fn is_unauthorized(&self) -> bool {
        match self {
            Self::Rpc { code, .. } => *code == -32008,
            Self::Transport(text) => text.contains("401"),
            Self::Protocol(_) => false,
        }
    }

    /// Whether nothing listens at the address.
    pub fn is_connection_refused(&self) -> bool {
        matches!(self, Self::Transport(text) if text.to_ascii_lowercase().contains("connection refused"))
    }
}

/// A connection to a server.
#[derive(Debug)]
pub struct Client {
    transport: Transport,
    next_id: i64,
}

impl Client {
    /// Spawns `program args…` with extra environment `env`, speaking JSON-RPC
    /// on its stdin/stdout (its stderr is passed through).
    ///
    /// # Errors
    /// When the program cannot be started.
    pub fn spawn(
        program: &str,
        args: &[String],
        env: &[(String, String)],
    ) -> Result<Self, ClientError> {
        Ok(Self::with(Transport::spawn(program, args, env, false)?))
    }

    /// Like [`spawn`](Self::spawn), but the child's stderr (its logs) is
    /// kept aside instead of mixed into the terminal: its last lines are
    /// available from [`stderr_tail`](Self::stderr_tail), for an error.
    ///
    /// # Errors
    /// When the program cannot be started.
    pub fn spawn_quiet(
        program: &str,
        args: &[String],
        env: &[(String, String)],
    ) -> Result<Self, ClientError> {
        Ok(Self::with(Transport::spawn(program, args, env, true)?))
    }

    /// The last lines a child started with [`spawn_quiet`](Self::spawn_quiet)
    /// wrote on its stderr (empty for other transports).
    pub fn stderr_tail(&self) -> Vec<String> {
        self.transport.stderr_tail()
    }

    /// Connects to a server's WebSocket endpoint (`ws://host:port/ws`).
    ///
    /// # Errors
    /// When the connection fails.
    pub async fn connect_ws(url: &str) -> Result<Self, ClientError> {
        Self::connect_ws_with_key(url, None).await
    }

    /// Connects to a server's WebSocket endpoint, sending `api_key` as
    /// `Authorization: Bearer`.
    ///
    /// # Errors
    /// When the connection fails or the key is refused.
    pub async fn connect_ws_with_key(
        url: &str,
        api_key: Option<&str>,
    ) -> Result<Self, ClientError> {
        Ok(Self::with(Transport::connect_ws(url, api_key).await?))
    }

    /// Talks to a server's HTTP endpoint (`http://host:port/mcp`).
    pub fn http(url: &str) -> Self {
        Self::http_with_key(url, None)
    }

    /// Talks to a server's HTTP endpoint, sending `api_key` as
    /// `Authorization: Bearer` with every request.
    pub fn http_with_key(url: &str, api_key: Option<&str>) -> Self {
        Self::with(Transport::http(url, api_key))
    }

    fn with(transport: Transport) -> Self {
        Self {
            transport,
            next_id: 1,
        }
    }

    /// The MCP handshake: `initialize`, then `notifications/initialized`.
    /// Returns the server's initialize result.
    ///
    /// # Errors
    /// Transport failures or a refused handshake.
    pub async fn initialize(&mut self) -> Result<Value, ClientError> {
        let params = json!({
            "protocolVersion": PROTOCOL_VERSION,
            "capabilities": {},
            "clientInfo": {"name": "rkllm-client", "version": env!("CARGO_PKG_VERSION")}
        });
        let result = self.request("initialize", params, |_| {}).await?;
        self.notify("notifications/initialized", json!({})).await?;
        Ok(result)
    }

    /// Sends a request and waits for its response, giving every
    /// notification that arrives meanwhile to `on_notification`.
    ///
    /// # Errors
    /// A JSON-RPC error from the server, or a transport failure.
    pub async fn request(
        &mut self,
        method: &str,
        params: Value,
        mut on_notification: impl FnMut(&Value) + Send,
    ) -> Result<Value, ClientError> {
        let id = self.next_id;
        self.next_id += 1;
        let message = json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params});
        let response = self
            .transport
            .exchange(&message, &mut on_notification)
            .await?;
        // An error the server could not tie to the request (a refused key,
        // an oversized body over HTTP) comes without an id (or a null one).
        let unattributed_error = matches!(response.get("id"), None | Some(Value::Null))
            && response.get("error").is_some();
        if response.get("id") != Some(&json!(id)) && !unattributed_error {
            return Err(ClientError::Protocol(format!(
                "expected the response to {id}, got {response}"
            )));
        }
        match (response.get("result"), response.get("error")) {
            (Some(result), None) => Ok(result.clone()),
            (None, Some(error)) => Err(ClientError::Rpc {
                code: error.get("code").and_then(Value::as_i64).unwrap_or(0),
                message: error
                    .get("message")
                    .and_then(Value::as_str)
                    .unwrap_or_default()
                    .to_owned(),
                data: error.get("data").cloned(),
            }),
            _ => Err(ClientError::Protocol(format!("not a response: {response}"))),
        }
    }

    /// Sends a notification.
    ///
    /// # Errors
    /// A transport failure.
    pub async fn notify(&mut self, method: &str, params: Value) -> Result<(), ClientError> {
        let message = json!({"jsonrpc": "2.0", "method": method, "params": params});
        self.transport.send_notification(&message).await
    }

    /// The next message the server pushes (stdio and WebSocket only), or
    /// `None` when the connection closed.
    ///
    /// # Errors
    /// A transport failure, or a transport that cannot push (HTTP).
    pub async fn next_message(&mut self) -> Result<Option<Value>, ClientError> {
        self.transport.next_message().await
    }

    /// Whether the server (child process or connection) is still there.
    pub fn is_alive(&mut self) -> bool {
        self.transport.is_alive()
    }

    /// Closes the connection. For a child: close stdin, wait
    /// [`CLOSE_WAIT`], SIGTERM, wait [`CLOSE_WAIT`], SIGKILL. Returns how
    /// the child ended (`None` for network transports).
    ///
    /// # Errors
    /// When the child cannot be waited for.
    pub async fn close(
        self,
    ) -> Result<Option<(CloseStage, std::process::ExitStatus)>, ClientError> {
        self.transport.close().await
    }

    /// [`close`](Self::close), and the last lines a child started with
    /// [`spawn_quiet`](Self::spawn_quiet) wrote on its stderr, read to its
    /// end (those it wrote as it failed included; empty for other
    /// transports).
    pub async fn close_with_stderr_tail(
        self,
    ) -> (
        Result<Option<(CloseStage, std::process::ExitStatus)>, ClientError>,
        Vec<String>,
    ) {
        self.transport.close_with_tail().await
    }
}
