//! `--tcp ADDR`: the stdio line codec over TCP, one session per connection.

use std::sync::Arc;

use tokio::net::TcpListener;

use super::line_session::{serve_lines, spawn_writer};
use super::lines::LineOptions;
use super::serve::accept;
use super::state::AppState;

/// Accepts connections until shutdown; each is served like stdio.
pub async fn serve_tcp(listener: TcpListener, state: Arc<AppState>, options: LineOptions) {
    let shutdown = state.shutdown_signal();
    tokio::pin!(shutdown);
    loop {
        tokio::select! {
            accepted = accept(&listener, "tcp") => {
                let Some((socket, peer)) = accepted else { continue };
                tracing::debug!(%peer, "TCP connection");
                let state = Arc::clone(&state);
                tokio::spawn(async move {
                    let _tracked = state.track_connection();
                    let _ = socket.set_nodelay(true);
                    let (reader, writer) = socket.into_split();
                    let (out, writer_task) = spawn_writer(writer, options.framing);
                    serve_lines(reader, out, state, options).await;
                    let _ = writer_task.await;
                });
            }
            () = &mut shutdown => return,
        }
    }
}
