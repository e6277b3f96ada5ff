//! A request body must arrive in full within `[http]
//! body_read_timeout_secs` of its headers (which have their own timeout),
//! so a client that dribbles its body cannot hold a handler, and the
//! connection, forever. Reading a late body fails; the request is then
//! answered 408 and its connection closed.

use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::task::{Context, Poll, ready};
use std::time::Duration;

use axum::BoxError;
use axum::body::{Bytes, HttpBody};
use axum::http::Request;
use hyper::body::{Frame, SizeHint};
use tokio::time::{Instant, Sleep};

/// Why reading a body failed.
#[derive(Debug, thiserror::Error)]
pub enum BodyError {
    /// The body did not arrive in time.
    #[error("request body not received within {0} s (http.body_read_timeout_secs)")]
    TooSlow(u64),
    /// The connection failed.
    #[error(transparent)]
    Read(BoxError),
}

/// Set once a body's deadline has passed while it was read. The request
/// carries it (an extension), so the shape layer of its API answers 408.
#[derive(Debug, Clone, Default)]
pub struct Expired(Arc<AtomicBool>, Duration);

impl Expired {
    /// Whether the body was cut for being late.
    pub fn is_set(&self) -> bool {
        self.0.load(Ordering::Acquire)
    }

    /// Why the request fails, when it was cut.
    pub fn error(&self) -> Option<BodyError> {
        self.is_set().then(|| BodyError::TooSlow(self.1.as_secs()))
    }
}

/// A body that fails with [`BodyError::TooSlow`] when it is read past its
/// deadline.
#[derive(Debug)]
pub struct DeadlineBody<B> {
    inner: B,
    deadline: Instant,
    timeout: Duration,
    /// Made at the first read that has to wait: most bodies never do.
    timer: Option<Pin<Box<Sleep>>>,
    expired: Expired,
}

/// Puts `request`'s body under a deadline `timeout` from now.
pub fn with_deadline<B>(
    request: Request<B>,
    timeout: Duration,
) -> (Request<DeadlineBody<B>>, Expired) {
    let expired = Expired(Arc::default(), timeout);
    let flag = expired.clone();
    let mut request = request.map(|inner| DeadlineBody {
        inner,
        deadline: Instant::now() + timeout,
        timeout,
        timer: None,
        expired: flag,
    });
    request.extensions_mut().insert(expired.clone());
    (request, expired)
}

impl<B> HttpBody for DeadlineBody<B>
where
    B: HttpBody<Data = Bytes> + Unpin,
    B::Error: Into<BoxError>,
{
    type Data = Bytes;
    type Error = BodyError;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, BodyError>>> {
        let this = self.get_mut();
        if let Poll::Ready(frame) = Pin::new(&mut this.inner).poll_frame(cx) {
            return Poll::Ready(frame.map(|f| f.map_err(|e| BodyError::Read(e.into()))));
        }
        let deadline = this.deadline;
        let timer = this
            .timer
            .get_or_insert_with(|| Box::pin(tokio::time::sleep_until(deadline)));
        ready!(timer.as_mut().poll(cx));
        this.expired.0.store(true, Ordering::Release);
        Poll::Ready(Some(Err(BodyError::TooSlow(this.timeout.as_secs()))))
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.inner.size_hint()
    }
}

#[cfg(test)]
mod tests {
    use tokio::sync::mpsc;

    use super::*;

    /// A body whose bytes come when the test sends them.
    struct Trickle(mpsc::Receiver<Bytes>);

    impl HttpBody for Trickle {
        type Data = Bytes;
        type Error = std::convert::Infallible;

        fn poll_frame(
            mut self: Pin<&mut Self>,
            cx: &mut Context<'_>,
        ) -> Poll<Option<Result<Frame<Bytes>, Self::Error>>> {
            self.0.poll_recv(cx).map(|b| b.map(|b| Ok(Frame::data(b))))
        }
    }

    async fn read_all<B: HttpBody<Data = Bytes, Error = BodyError> + Unpin>(
        mut body: B,
    ) -> Result<Vec<u8>, BodyError> {
        let mut bytes = Vec::new();
        while let Some(frame) = std::future::poll_fn(|cx| Pin::new(&mut body).poll_frame(cx)).await
        {
            bytes.extend_from_slice(frame?.data_ref().unwrap());
        }
        Ok(bytes)
    }

    #[tokio::test(start_paused = true)]
    async fn a_body_that_stops_coming_fails_at_its_deadline() {
        let (tx, rx) = mpsc::channel(4);
        let (request, expired) = with_deadline(Request::new(Trickle(rx)), Duration::from_secs(30));
        tx.send(Bytes::from_static(b"{")).await.unwrap();
        let reading = tokio::spawn(read_all(request.into_body()));
        tokio::time::sleep(Duration::from_secs(29)).await;
        assert!(!reading.is_finished() && !expired.is_set());
        tokio::time::sleep(Duration::from_secs(2)).await;
        let err = reading.await.unwrap().unwrap_err();
        assert!(matches!(err, BodyError::TooSlow(30)), "{err}");
        assert!(err.to_string().contains("http.body_read_timeout_secs"));
        assert!(expired.is_set());
        drop(tx);
    }

    #[tokio::test(start_paused = true)]
    async fn a_body_that_arrives_in_time_is_read_whole() {
        let (tx, rx) = mpsc::channel(4);
        let (request, expired) = with_deadline(Request::new(Trickle(rx)), Duration::from_secs(5));
        let reading = tokio::spawn(read_all(request.into_body()));
        for part in [&b"{}"[..], b" "] {
            tokio::time::sleep(Duration::from_secs(2)).await;
            tx.send(Bytes::from_static(part)).await.unwrap();
        }
        drop(tx);
        assert_eq!(reading.await.unwrap().unwrap(), b"{} ");
        assert!(!expired.is_set());
    }
}
