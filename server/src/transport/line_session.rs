//! A line-framed JSON-RPC session over any byte stream (stdio, TCP): the
//! codec of [`super::lines`] (plus [`super::chunked`] frames when asked)
//! in front of a [`Session`].

use std::sync::Arc;
use std::time::{Duration, Instant};

use serde_json::Value;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::sync::mpsc;

use super::chunked::{self, FrameAssembler};
use super::lines::{Framing, LineDecoder, LineEvent, LineOptions, preview};
use super::session::{OUTBOUND_QUEUE, Session};
use super::state::AppState;
use crate::rpc::{RpcError, codes, recover_id};

/// Incomplete framed messages one session may hold.
const MAX_PENDING_FRAMES: usize = 64;
/// A framed message whose chunks stop coming fails after this.
const FRAME_TIMEOUT: Duration = Duration::from_secs(30);

/// Starts a writer task that writes each outgoing message as a line (or
/// as frames, when chunked framing is on and the message is large).
/// Messages already queued are written together, with one write and one
/// flush. Returns the queue to send messages into.
pub fn spawn_writer<W>(
    mut output: W,
    framing: Framing,
) -> (mpsc::Sender<String>, tokio::task::JoinHandle<()>)
where
    W: AsyncWrite + Unpin + Send + 'static,
{
    let (tx, mut rx) = mpsc::channel::<String>(OUTBOUND_QUEUE);
    let task = tokio::spawn(async move {
        let mut next_id: u64 = 1;
        let mut buffer = Vec::new();
        while let Some(message) = rx.recv().await {
            let mut queued = Some(message);
            while let Some(message) = queued {
                match framing {
                    Framing::Chunked if message.len() > chunked::FRAME_THRESHOLD => {
                        next_id += 1;
                        for frame in chunked::encode(&message, next_id) {
                            buffer.extend_from_slice(frame.as_bytes());
                            buffer.push(b'\n');
                        }
                    }
                    _ => {
                        buffer.extend_from_slice(message.as_bytes());
                        buffer.push(b'\n');
                    }
                }
                queued = if buffer.len() < WRITE_BATCH_BYTES {
                    rx.try_recv().ok()
                } else {
                    None
                };
            }
            if output.write_all(&buffer).await.is_err() || output.flush().await.is_err() {
                return;
            }
            buffer.clear();
            buffer.shrink_to(WRITE_BATCH_BYTES);
        }
    });
    (tx, task)
}

/// Bytes of queued messages gathered at most into one write.
const WRITE_BATCH_BYTES: usize = 64 * 1024;

/// Serves one line session until end of input (then lets accepted
/// requests finish for `eof_grace`) or until the server shuts down.
pub async fn serve_lines<R>(
    mut input: R,
    out: mpsc::Sender<String>,
    state: Arc<AppState>,
    options: LineOptions,
) where
    R: AsyncRead + Unpin,
{
    let mut session = Session::new(&state, options.transport, Arc::new(out));
    let mut decoder = LineDecoder::new(options.max_line);
    let mut frames = FrameAssembler::new(options.max_line, MAX_PENDING_FRAMES, FRAME_TIMEOUT);
    let mut buf = vec![0u8; 64 * 1024];
    let mut events = Vec::new();
    let mut ticks = tokio::time::interval(Duration::from_secs(5));
    // A late look for stalled frames runs once; the schedule goes on.
    ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Skip);
    let shutdown = state.shutdown_signal();
    tokio::pin!(shutdown);
    let mut grace = options.eof_grace;
    loop {
        tokio::select! {
            read = input.read(&mut buf) => {
                let n = match read {
                    Ok(n) => n,
                    // A signal (a child process ending) interrupted the
                    // read: the input goes on.
                    Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
                    Err(e) => {
                        tracing::warn!(error = %e, "the input cannot be read: it is treated as ended");
                        0
                    }
                };
                if n == 0 {
                    decoder.finish(&mut events);
                    handle(&mut session, &mut frames, options, &mut events).await;
                    for error in frames.finish() {
                        report_frame_error(&session, &error).await;
                    }
                    break;
                }
                decoder.push(&buf[..n], &mut events);
                handle(&mut session, &mut frames, options, &mut events).await;
            }
            () = session.reap() => {}
            _ = ticks.tick() => {
                for error in frames.expire(Instant::now()) {
                    report_frame_error(&session, &error).await;
                }
            }
            () = &mut shutdown => {
                grace = Duration::from_millis(500);
                break;
            }
        }
    }
    session.finish(grace).await;
}

async fn handle(
    session: &mut Session,
    frames: &mut FrameAssembler,
    options: LineOptions,
    events: &mut Vec<LineEvent>,
) {
    for event in events.drain(..) {
        match event {
            LineEvent::TooLong { preview } => {
                tracing::warn!(%preview, limit = options.max_line, "line over the limit discarded");
                let id = recover_id(&preview).unwrap_or(Value::Null);
                let error = RpcError::new(
                    codes::TOO_LARGE,
                    format!(
                        "message over the limit of {} bytes (limits.max_request_bytes)",
                        options.max_line
                    ),
                );
                session.send_error(&id, &error).await;
            }
            LineEvent::Line(bytes) => {
                let Ok(text) = String::from_utf8(bytes) else {
                    tracing::warn!("a line that is not UTF-8 was refused");
                    session
                        .send_error(
                            &Value::Null,
                            &RpcError::parse_error("the line is not valid UTF-8"),
                        )
                        .await;
                    continue;
                };
                if options.framing == Framing::Chunked && chunked::is_frame(&text) {
                    match frames.push(&text, Instant::now()) {
                        Ok(Some(message)) => session.serve(message).await,
                        Ok(None) => {}
                        Err(error) => {
                            tracing::warn!(preview = %preview(text.as_bytes()), reason = %error.reason, "bad frame");
                            report_frame_error(session, &error).await;
                        }
                    }
                } else {
                    session.serve(text).await;
                }
            }
        }
    }
}

async fn report_frame_error(session: &Session, error: &chunked::FrameError) {
    let mut rpc = RpcError::invalid_request(&error.reason);
    if let Some(id) = &error.message_id {
        rpc = rpc.with_data(serde_json::json!({ "messageId": id }));
    }
    session.send_error(&Value::Null, &rpc).await;
}
