//! Request handling for a long-lived connection (WebSocket, stdio, TCP):
//! one task per request, so `ping`, `abort` and `notifications/cancelled`
//! are served while a generation runs; a bound on requests in flight
//! (reading pauses when it is reached, which backpressures the peer); one
//! outbox, bounded, so a slow reader slows the pushers instead of losing
//! messages. Ending the session drops its tasks, which detaches
//! their stream consumers and aborts the generations nobody else reads.

use std::sync::Arc;
use std::time::Duration;

use tokio::sync::Semaphore;
use tokio::task::JoinSet;

use super::state::AppState;
use crate::rpc::{
    Connection, Dispatcher, Notifier, Outbox, RpcError, chunk_notification, error_response,
};
use crate::stream::Consumer;

/// Outgoing messages queued per connection before senders wait.
pub const OUTBOUND_QUEUE: usize = 256;
/// Requests one connection may have in flight before reading pauses.
pub const MAX_IN_FLIGHT: usize = 64;

/// One connection's requests.
#[derive(Debug)]
pub struct Session {
    dispatcher: Dispatcher,
    conn: Arc<Connection>,
    out: Notifier,
    in_flight: Arc<Semaphore>,
    tasks: JoinSet<()>,
}

impl Session {
    /// A session of `transport` (for metrics and logs) writing to `out`.
    pub fn new(state: &AppState, transport: &'static str, out: Notifier) -> Self {
        Self {
            dispatcher: state.dispatcher(),
            conn: Arc::new(Connection::with_notifier(transport, Arc::clone(&out))),
            out,
            in_flight: Arc::new(Semaphore::new(MAX_IN_FLIGHT)),
            tasks: JoinSet::new(),
        }
    }

    /// Serves one message. Waits first for a free in-flight slot.
    pub async fn serve(&mut self, text: String) {
        let Ok(permit) = Arc::clone(&self.in_flight).acquire_owned().await else {
            return;
        };
        let (dispatcher, conn, out) = (
            self.dispatcher.clone(),
            Arc::clone(&self.conn),
            Arc::clone(&self.out),
        );
        self.tasks.spawn(async move {
            let reply = dispatcher.handle_text(&conn, &text).await;
            if let Some(message) = reply.message {
                if !out.send(message).await {
                    return;
                }
            }
            drop(permit);
            for consumer in reply.subscriptions {
                push(consumer, out.as_ref()).await;
            }
        });
    }

    /// Sends an error the transport itself found (bad line, bad frame).
    pub async fn send_error(&self, id: &serde_json::Value, error: &RpcError) -> bool {
        self.out.send(error_response(id, error)).await
    }

    /// Resolves when one of the session's tasks finishes (never while it
    /// has none); for a `select!` loop that keeps the task set small.
    pub async fn reap(&mut self) {
        if self.tasks.join_next().await.is_none() {
            std::future::pending::<()>().await;
        }
    }

    /// Lets the requests already accepted finish for up to `grace`, then
    /// drops the rest (aborting their generations) and cancels what the
    /// connection still had in flight.
    pub async fn finish(mut self, grace: Duration) {
        let _ = tokio::time::timeout(grace, async {
            while self.tasks.join_next().await.is_some() {}
        })
        .await;
        self.conn.cancel_all();
        self.tasks.abort_all();
        while self.tasks.join_next().await.is_some() {}
    }
}

/// Pushes a stream's chunks as `run` notifications until its end chunk, or
/// until the connection goes away. Each batch the stream has ready is
/// written by this task, with one flush: no other task stands between a
/// new chunk and the wire.
pub async fn push(mut consumer: Consumer, out: &dyn Outbox) {
    let stream = Arc::clone(consumer.stream());
    loop {
        let batch = consumer.next_batch().await;
        let Some(last) = batch.last() else {
            return;
        };
        let ended = last.end.is_some();
        let messages = batch
            .iter()
            .map(|chunk| chunk_notification(stream.id(), chunk))
            .collect();
        if !out.send_all(messages).await || ended {
            return;
        }
    }
}
