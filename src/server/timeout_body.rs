//! A request body that fails when the client stops sending it.
//!
//! Owns: [`TimeoutBody`] (an idle deadline between frames of a body, reset by each frame) and
//! [`BodyTimedOut`], the error it fails with, which `body.rs` turns into a 408. Installed on
//! every route by [`super::router`], so a client that sends `Content-Length: 100` and 4 bytes
//! holds its connection for [`super::BODY_TIMEOUT`], not forever.
//!
//! Counterpart: tower-http's `TimeoutBody` (`RequestBodyTimeoutLayer`).

use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;

use axum::body::{Body, Bytes};
use http_body::Frame;

/// The body stopped arriving: nothing for the body timeout.
#[derive(Debug, thiserror::Error)]
#[error("the request body stopped arriving")]
pub struct BodyTimedOut;

/// `inner`, failing with [`BodyTimedOut`] when no frame comes for `timeout`.
pub struct TimeoutBody {
    inner: Body,
    timeout: Duration,
    sleep: Pin<Box<tokio::time::Sleep>>,
}

impl TimeoutBody {
    pub fn new(inner: Body, timeout: Duration) -> Self {
        Self {
            inner,
            timeout,
            sleep: Box::pin(tokio::time::sleep(timeout)),
        }
    }
}

impl http_body::Body for TimeoutBody {
    type Data = Bytes;
    type Error = axum::BoxError;

    fn poll_frame(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Result<Frame<Bytes>, Self::Error>>> {
        let this = &mut *self;
        match Pin::new(&mut this.inner).poll_frame(cx) {
            Poll::Ready(frame) => {
                let deadline = tokio::time::Instant::now() + this.timeout;
                this.sleep.as_mut().reset(deadline);
                Poll::Ready(frame.map(|f| f.map_err(Into::into)))
            }
            Poll::Pending => match this.sleep.as_mut().poll(cx) {
                Poll::Ready(()) => Poll::Ready(Some(Err(Box::new(BodyTimedOut)))),
                Poll::Pending => Poll::Pending,
            },
        }
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> http_body::SizeHint {
        self.inner.size_hint()
    }
}

/// Whether `e` (or an error it wraps) is [`BodyTimedOut`].
pub fn timed_out(e: &(dyn std::error::Error + 'static)) -> bool {
    let mut cur = Some(e);
    while let Some(e) = cur {
        if e.is::<BodyTimedOut>() {
            return true;
        }
        cur = e.source();
    }
    false
}

#[cfg(test)]
mod tests {
    use super::*;
    use http_body_util::BodyExt;

    #[tokio::test]
    async fn a_body_that_stops_fails_after_the_timeout() {
        let (mut tx, rx) = futures_channel_like();
        let body = TimeoutBody::new(Body::from_stream(rx), Duration::from_millis(50));
        tx.push(Bytes::from_static(b"{\"a\""));
        let err = body.collect().await.expect_err("a body that stops must fail");
        assert!(timed_out(&*err), "{err}");
        drop(tx);
    }

    /// A stream that yields what was pushed, then waits forever.
    fn futures_channel_like() -> (Pusher, impl futures_util::Stream<Item = Result<Bytes, std::io::Error>>) {
        let (tx, rx) = tokio::sync::mpsc::unbounded_channel::<Bytes>();
        let stream = futures_util::stream::unfold(rx, |mut rx| async move { rx.recv().await.map(|b| (Ok(b), rx)) });
        (Pusher(tx), stream)
    }

    struct Pusher(tokio::sync::mpsc::UnboundedSender<Bytes>);
    impl Pusher {
        fn push(&mut self, b: Bytes) {
            let _ = self.0.send(b);
        }
    }
}
