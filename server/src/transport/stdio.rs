//! `--stdio`: JSON-RPC and MCP over stdin/stdout, one message per line.
//!
//! The protocol output is a private copy of fd 1 (close-on-exec); fd 1
//! itself is then pointed at stderr, so whatever else writes to stdout
//! (the RKLLM runtime's own prints, a stray `println!`) lands on stderr
//! and can never corrupt the protocol stream.

use std::sync::Arc;

use super::line_session::{serve_lines, spawn_writer};
use super::lines::LineOptions;
use super::state::AppState;

/// Takes over fd 1 for the protocol: returns a private copy of it and
/// points fd 1 at stderr.
///
/// # Errors
/// When the descriptors cannot be duplicated.
pub fn claim_stdout() -> std::io::Result<std::fs::File> {
    let private = rustix::io::fcntl_dupfd_cloexec(std::io::stdout(), 3)?;
    rustix::stdio::dup2_stdout(std::io::stderr())?;
    Ok(std::fs::File::from(private))
}

/// Serves stdin/stdout until end of input or shutdown; `output` is the
/// protocol output from [`claim_stdout`].
pub async fn serve_stdio(state: Arc<AppState>, output: std::fs::File, options: LineOptions) {
    let (out, writer) = spawn_writer(tokio::fs::File::from_std(output), options.framing);
    serve_lines(tokio::io::stdin(), out, state, options).await;
    // Every sender is gone once the session ended: the writer flushes the
    // last messages and stops.
    let _ = writer.await;
}
