//! `--tcp ADDR`: the stdio line codec over TCP, one session per connection.

use std::sync::Arc;

use tokio::net::TcpListener;

use super::line_session::{serve_lines, spawn_writer};
use super::lines::LineOptions;
use super::serve::accept;
use super::state::AppState;

/// Accepts connections until shutdown (or until `state` drops); each is
/// served like stdio. The returned future holds the state weakly, so that
/// the state can drop; each connection holds it while it is open.
pub fn serve_tcp(
    listener: TcpListener,
    state: &Arc<AppState>,
    options: LineOptions,
) -> impl Future<Output = ()> + Send + 'static {
    let shutdown = state.shutdown_signal();
    let state = Arc::downgrade(state);
    async move {
        tokio::pin!(shutdown);
        loop {
            tokio::select! {
                accepted = accept(&listener, "tcp") => {
                    let Some((socket, peer)) = accepted else { continue };
                    let Some(state) = state.upgrade() else { return };
                    serve_connection(socket, peer, state, options);
                }
                () = &mut shutdown => return,
            }
        }
    }
}

/// Serves one connection on a task of its own, until it ends.
fn serve_connection(
    socket: tokio::net::TcpStream,
    peer: std::net::SocketAddr,
    state: Arc<AppState>,
    options: LineOptions,
) {
    tracing::debug!(%peer, "TCP connection");
    tokio::spawn(async move {
        let _tracked = state.track_connection();
        let _ = socket.set_nodelay(true);
        let (reader, writer) = socket.into_split();
        let (out, writer_task) = spawn_writer(writer, options.framing);
        serve_lines(reader, out, state, options).await;
        let _ = writer_task.await;
    });
}
