//! The HTTP/1.1 accept loop: hyper with a header read timeout (a client
//! that sends its headers byte by byte is cut off) and a body read timeout
//! (likewise for its body, see [`super::body_deadline`]), upgrades for
//! WebSocket, and graceful shutdown of the open connections. Each request
//! carries its client's address (`ConnectInfo`), for the WebSocket cap.
//!
//! Every accept loop of the server (HTTP, `--tcp`, the agent check) takes
//! its connections through [`accept`], which pauses after a failure.

use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use axum::extract::ConnectInfo;
use axum::http::Request;
use axum::response::Response;
use futures_util::future::BoxFuture;
use hyper::body::Incoming;
use hyper_util::rt::{TokioIo, TokioTimer};
use hyper_util::service::TowerToHyperService;
use tokio::net::{TcpListener, TcpStream};

use super::body_deadline::with_deadline;
use super::state::AppState;

/// How long an accept loop waits after a failed accept.
const ACCEPT_PAUSE: Duration = Duration::from_millis(50);

/// Accepts one connection on `listener` (`what` names it in the log). A
/// failure (out of file descriptors, mostly) is logged and followed by a
/// pause, so that the loop around it waits for descriptors to come free
/// instead of spinning; then `None`.
pub async fn accept(listener: &TcpListener, what: &'static str) -> Option<(TcpStream, SocketAddr)> {
    settle(listener.accept().await, what).await
}

async fn settle<T>(accepted: std::io::Result<T>, what: &'static str) -> Option<T> {
    match accepted {
        Ok(accepted) => Some(accepted),
        Err(err) => {
            tracing::warn!(error = %err, listener = what, "accept failed");
            tokio::time::sleep(ACCEPT_PAUSE).await;
            None
        }
    }
}

/// Serves `app` on `listener` until the server shuts down; then every
/// connection finishes its current request and closes. Connections are
/// tracked by [`AppState::track_connection`], so shutdown can wait for them.
pub async fn serve(listener: TcpListener, app: Router, state: Arc<AppState>) {
    let mut http = hyper::server::conn::http1::Builder::new();
    http.timer(TokioTimer::new())
        .header_read_timeout(state.settings.header_read_timeout)
        .keep_alive(true);
    let app = TowerToHyperService::new(app);
    let stop = state.shutdown_signal();
    tokio::pin!(stop);
    loop {
        tokio::select! {
            accepted = accept(&listener, "http") => {
                let Some((socket, peer)) = accepted else { continue };
                let _ = socket.set_nodelay(true);
                let service = ConnectionService {
                    app: app.clone(),
                    peer,
                    body_timeout: state.settings.body_read_timeout,
                };
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

/// One connection's requests into the router: each gets the client's
/// address and a deadline for its body; a request whose body came too
/// slowly is answered 408, whatever the handler made of the failed read.
#[derive(Debug, Clone)]
struct ConnectionService {
    app: TowerToHyperService<Router>,
    peer: SocketAddr,
    body_timeout: Duration,
}

impl hyper::service::Service<Request<Incoming>> for ConnectionService {
    type Response = Response;
    type Error = Infallible;
    type Future = BoxFuture<'static, Result<Response, Infallible>>;

    fn call(&self, request: Request<Incoming>) -> Self::Future {
        let (mut request, _) = with_deadline(request, self.body_timeout);
        request.extensions_mut().insert(ConnectInfo(self.peer));
        let answer = self.app.call(request);
        Box::pin(answer)
    }
}

#[cfg(test)]
mod tests {
    use futures_util::FutureExt;

    use super::*;

    #[tokio::test(start_paused = true)]
    async fn a_failed_accept_pauses_before_the_loop_goes_on() {
        let failed = settle::<()>(
            Err(std::io::Error::from_raw_os_error(24)), // EMFILE
            "test",
        );
        tokio::pin!(failed);
        assert!(failed.as_mut().now_or_never().is_none());
        tokio::time::advance(ACCEPT_PAUSE / 2).await;
        assert!(failed.as_mut().now_or_never().is_none());
        tokio::time::advance(ACCEPT_PAUSE).await;
        assert_eq!(failed.await, None);
        assert_eq!(settle(Ok(7), "test").await, Some(7));
    }
}
