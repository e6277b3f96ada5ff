//! The HTTP/1.1 accept loop: hyper with a header read timeout (a client
//! that sends its headers byte by byte is cut off), upgrades for
//! WebSocket, and graceful shutdown of the open connections.

use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use hyper_util::rt::{TokioIo, TokioTimer};
use hyper_util::service::TowerToHyperService;
use tokio::net::TcpListener;

use super::state::AppState;

/// Serves `app` on `listener` until the server shuts down; then every
/// connection finishes its current request and closes. Connections are
/// tracked by [`AppState::track_connection`], so shutdown can wait for them.
pub async fn serve(listener: TcpListener, app: Router, state: Arc<AppState>) {
    let mut http = hyper::server::conn::http1::Builder::new();
    http.timer(TokioTimer::new())
        .header_read_timeout(state.settings.header_read_timeout)
        .keep_alive(true);
    let stop = state.shutdown_signal();
    tokio::pin!(stop);
    loop {
        tokio::select! {
            accepted = listener.accept() => {
                let (socket, _) = match accepted {
                    Ok(accepted) => accepted,
                    Err(err) => {
                        // Out of descriptors and the like: wait, don't spin.
                        tracing::warn!(error = %err, "accept failed");
                        tokio::time::sleep(Duration::from_millis(50)).await;
                        continue;
                    }
                };
                let _ = socket.set_nodelay(true);
                let service = TowerToHyperService::new(app.clone());
                let connection = http.serve_connection(TokioIo::new(socket), service).with_upgrades();
                let tracked = state.track_connection();
                let stop = state.shutdown_signal();
                tokio::spawn(async move {
                    let _tracked = tracked;
                    tokio::pin!(connection);
                    let result = tokio::select! {
                        result = connection.as_mut() => result,
                        () = stop => {
                            connection.as_mut().graceful_shutdown();
                            connection.await
                        }
                    };
                    if let Err(err) = result {
                        tracing::debug!(error = %err, "HTTP connection ended with an error");
                    }
                });
            }
            () = &mut stop => return,
        }
    }
}
