//! The one loop under every streaming API: a generation's batches
//! ([`Running::next`]) handed to the API's [`Framer`], which turns each
//! into its wire's frames (SSE events, NDJSON lines), yielded as they are
//! made. The loop is read by the response body itself: the connection's
//! task waits on the stream and writes the frames, with no task in
//! between, and a client that disconnects drops the body, which drops the
//! generation and aborts it.

use std::convert::Infallible;

use axum::body::{Body, Bytes};
use axum::http::header;
use axum::response::sse::{Event as SseEvent, KeepAlive, Sse};
use axum::response::{IntoResponse, Response};
use futures_util::future::Either;
use futures_util::{Stream, StreamExt};

use crate::service::{Batch, Running, Step};

/// What one API makes of a generation: its frames before the first batch,
/// and those of each batch (the last batch carries the end).
pub trait Framer: Send + 'static {
    /// One unit of the wire (an SSE event's data, a named event, lines).
    type Frame: Send + 'static;

    /// The frames that go out before the generation's first batch (none
    /// unless the API opens its stream with something of its own).
    fn start(&mut self, _out: &mut Vec<Self::Frame>) {}

    /// The frames of one batch, in order.
    fn batch(&mut self, batch: &Batch, out: &mut Vec<Self::Frame>);
}

/// What goes out: an API's frame, or how far a long prompt's prefill in
/// chunks has come (an SSE comment; nothing on NDJSON, whose lines a
/// client reads as the API's objects).
#[derive(Debug)]
pub enum Piece<T> {
    /// One of the API's frames.
    Frame(T),
    /// `tokens` of the prompt's `of` are prefilled.
    Prefill {
        /// Prompt tokens prefilled.
        tokens: u32,
        /// Of all the prompt's tokens.
        of: u32,
    },
}

/// The frames of `running` as `framer` makes them: its start, then each
/// batch's as soon as the batch is read, until the end, with the prefill's
/// steps while nothing else happens.
pub fn frames<F: Framer>(
    running: Running,
    framer: F,
) -> impl Stream<Item = Piece<F::Frame>> + Send {
    struct Driven<F> {
        running: Running,
        framer: F,
        started: bool,
    }
    let driven = Driven {
        running,
        framer,
        started: false,
    };
    futures_util::stream::unfold(driven, |mut driven| async move {
        let mut out = Vec::new();
        if !driven.started {
            driven.started = true;
            driven.framer.start(&mut out);
            if !out.is_empty() {
                return Some((frames_of(out), driven));
            }
        }
        match driven.running.next_step().await? {
            Step::Batch(batch) => driven.framer.batch(&batch, &mut out),
            Step::Prefill { tokens, of } => {
                let step = std::iter::once(Piece::Prefill { tokens, of });
                return Some((Either::Right(futures_util::stream::iter(step)), driven));
            }
        }
        Some((frames_of(out), driven))
    })
    .flatten()
}

/// What one read gives out: an API's frames, or a prefill step.
type Pieces<T> = Either<
    futures_util::stream::Iter<std::iter::Map<std::vec::IntoIter<T>, fn(T) -> Piece<T>>>,
    futures_util::stream::Iter<std::iter::Once<Piece<T>>>,
>;

fn frames_of<T>(frames: Vec<T>) -> Pieces<T> {
    let frame: fn(T) -> Piece<T> = Piece::Frame;
    Either::Left(futures_util::stream::iter(frames.into_iter().map(frame)))
}

/// A frame that is one server-sent event.
pub trait SseFrame: Send + 'static {
    /// The event.
    fn event(self) -> SseEvent;
}

/// An unnamed event: the data alone (OpenAI's chunks).
impl SseFrame for String {
    fn event(self) -> SseEvent {
        SseEvent::default().data(self)
    }
}

/// A named event: its name and its data.
impl SseFrame for (&'static str, String) {
    fn event(self) -> SseEvent {
        SseEvent::default().event(self.0).data(self.1)
    }
}

/// A prefill step is a comment, `: prefill <tokens>/<of>`, which SSE
/// readers skip.
impl<T: SseFrame> SseFrame for Piece<T> {
    fn event(self) -> SseEvent {
        match self {
            Self::Frame(frame) => frame.event(),
            Self::Prefill { tokens, of } => {
                SseEvent::default().comment(format!("prefill {tokens}/{of}"))
            }
        }
    }
}

/// `frames` as an SSE response, with `keep_alive` while nothing else goes
/// out (a long prefill) and the streaming headers.
pub fn sse<T: SseFrame>(
    frames: impl Stream<Item = T> + Send + 'static,
    keep_alive: KeepAlive,
) -> Response {
    let events = frames.map(|frame| Ok::<_, Infallible>(frame.event()));
    let response = Sse::new(events).keep_alive(keep_alive).into_response();
    super::streaming(response)
}

/// `frames` (each a run of whole lines) as an NDJSON response body, one
/// body chunk per frame; prefill steps are not told.
pub fn ndjson(frames: impl Stream<Item = Piece<Bytes>> + Send + 'static) -> Response {
    let lines = frames.filter_map(|piece| {
        std::future::ready(match piece {
            Piece::Frame(lines) => Some(Ok::<_, Infallible>(lines)),
            Piece::Prefill { .. } => None,
        })
    });
    let body = Body::from_stream(lines);
    ([(header::CONTENT_TYPE, "application/x-ndjson")], body).into_response()
}
