//! Every request body is read under two clocks: an idle timeout (no bytes for
//! [`BodyTimeouts::idle`] while the handler waits for them) and a total deadline
//! ([`BodyTimeouts::total`] from the request's start). One layer wraps the body, so JSON bodies,
//! multipart forms and uploads streamed to blobs all get the same rule: a stalled body ends in
//! an error for whoever reads it, the handler's answer becomes 408 `request_timeout`, and the
//! connection is closed. Time the handler spends not reading (waiting for the memory budget,
//! writing a blob) is not idle time.
//!
//! Lambda gets complete bodies from API Gateway, so there the clocks never run.

use super::error::ApiError;
use axum::body::{Body, Bytes, HttpBody};
use axum::extract::Request;
use axum::http::header::CONNECTION;
use axum::http::{HeaderValue, StatusCode};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use http_body::{Frame, SizeHint};
use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, OnceLock};
use std::task::{Context, Poll};
use std::time::Duration;
use tokio::time::{Instant, Sleep};

/// How long a request body may take. Put one in the request's extensions (an
/// `axum::Extension` layer outside the common layers) to override the defaults.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BodyTimeouts {
    /// The longest wait for the next bytes of a body being read.
    pub idle: Duration,
    /// The longest a body may take in all, from the request's start.
    pub total: Duration,
}

/// No bytes for this long while they are awaited: 408.
pub const DEFAULT_IDLE_TIMEOUT: Duration = Duration::from_secs(10);
/// A body not read to its end within this long: 408 (large files go up in parts). A larger
/// declared body gets longer: its size at [`MIN_BODY_RATE`].
pub const DEFAULT_TOTAL_TIMEOUT: Duration = Duration::from_secs(300);
/// The slowest steady rate (bytes per second) a large declared body is given time for.
pub(crate) const MIN_BODY_RATE: u64 = 256 * 1024;

impl BodyTimeouts {
    /// The total deadline of a body that declares `content_length` bytes: the configured one, or
    /// longer for a body too large to arrive within it at [`MIN_BODY_RATE`].
    pub(crate) fn total_for(&self, content_length: Option<u64>) -> Duration {
        let at_min_rate = Duration::from_secs(content_length.unwrap_or(0) / MIN_BODY_RATE);
        self.total.max(at_min_rate)
    }
}

impl Default for BodyTimeouts {
    fn default() -> Self {
        Self {
            idle: DEFAULT_IDLE_TIMEOUT,
            total: DEFAULT_TOTAL_TIMEOUT,
        }
    }
}

/// Which clock ran out.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub(crate) enum BodyTimeout {
    #[error("no bytes of the request body arrived for {0:?}")]
    Idle(Duration),
    #[error("the request body was not received within {0:?}")]
    Total(Duration),
}

/// Wrap the body in the two clocks; when one ran out while the handler read it, answer 408.
pub(crate) async fn read_bodies_in_time(request: Request, next: Next) -> Response {
    let timeouts = request.extensions().get::<BodyTimeouts>().copied().unwrap_or_default();
    let (parts, body) = request.into_parts();
    if body.is_end_stream() {
        return next.run(Request::from_parts(parts, body)).await;
    }
    let declared = parts
        .headers
        .get(http::header::CONTENT_LENGTH)
        .and_then(|value| value.to_str().ok())
        .and_then(|value| value.parse::<u64>().ok());
    let timeouts = BodyTimeouts {
        total: timeouts.total_for(declared),
        ..timeouts
    };
    let expired = Arc::new(OnceLock::new());
    let timed = Body::new(TimedBody::new(body, timeouts, Arc::clone(&expired)));
    let response = next.run(Request::from_parts(parts, timed)).await;
    match expired.get() {
        // The handler answered although its body ran out of time (it did not need the rest).
        Some(_) if !(response.status().is_client_error() || response.status().is_server_error()) => response,
        Some(timeout) => {
            tracing::info!(%timeout, "request body timed out");
            let mut error =
                ApiError::invalid_request(format!("Request timeout: {timeout}; send the body without pauses."))
                    .with_code("request_timeout");
            error.status = StatusCode::REQUEST_TIMEOUT;
            let mut response = error.into_response();
            response
                .headers_mut()
                .insert(CONNECTION, HeaderValue::from_static("close"));
            response
        }
        None => response,
    }
}

/// A body whose frames must come within the idle timeout and before the deadline.
struct TimedBody {
    inner: Body,
    idle: Duration,
    total: Duration,
    deadline: Instant,
    /// Armed while the reader waits for a frame.
    timer: Pin<Box<Sleep>>,
    waiting: bool,
    expired: Arc<OnceLock<BodyTimeout>>,
    ended: bool,
}

impl TimedBody {
    fn new(inner: Body, timeouts: BodyTimeouts, expired: Arc<OnceLock<BodyTimeout>>) -> Self {
        let deadline = Instant::now() + timeouts.total;
        Self {
            inner,
            idle: timeouts.idle,
            total: timeouts.total,
            deadline,
            timer: Box::pin(tokio::time::sleep_until(deadline)),
            waiting: false,
            expired,
            ended: false,
        }
    }

    fn expire(&mut self, timeout: BodyTimeout) -> Poll<Option<Result<Frame<Bytes>, axum::Error>>> {
        self.ended = true;
        let _ = self.expired.set(timeout);
        Poll::Ready(Some(Err(axum::Error::new(timeout))))
    }
}

impl HttpBody for TimedBody {
    type Data = Bytes;
    type Error = axum::Error;

    fn poll_frame(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Result<Frame<Bytes>, axum::Error>>> {
        let this = &mut *self;
        if this.ended {
            return Poll::Ready(None);
        }
        if Instant::now() >= this.deadline {
            return this.expire(BodyTimeout::Total(this.total));
        }
        match Pin::new(&mut this.inner).poll_frame(cx) {
            Poll::Ready(frame) => {
                this.waiting = false;
                if !matches!(frame, Some(Ok(_))) {
                    this.ended = true;
                }
                Poll::Ready(frame)
            }
            Poll::Pending => {
                if !this.waiting {
                    // The reader starts waiting now: the idle clock starts now too.
                    this.waiting = true;
                    let idle_end = Instant::now() + this.idle;
                    this.timer.as_mut().reset(idle_end.min(this.deadline));
                }
                match this.timer.as_mut().poll(cx) {
                    Poll::Ready(()) if Instant::now() >= this.deadline => this.expire(BodyTimeout::Total(this.total)),
                    Poll::Ready(()) => this.expire(BodyTimeout::Idle(this.idle)),
                    Poll::Pending => Poll::Pending,
                }
            }
        }
    }

    fn is_end_stream(&self) -> bool {
        self.ended || self.inner.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        if self.ended {
            SizeHint::with_exact(0)
        } else {
            self.inner.size_hint()
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use axum::routing::post;
    use axum::Router;
    use futures::StreamExt;
    use tower::ServiceExt;

    fn router(timeouts: BodyTimeouts) -> Router {
        Router::new()
            .route("/", post(|body: Bytes| async move { body.len().to_string() }))
            .layer(axum::middleware::from_fn(read_bodies_in_time))
            .layer(axum::Extension(timeouts))
    }

    fn trickle(chunks: usize, every: Duration) -> Body {
        let stream = futures::stream::iter(0..chunks).then(move |_| async move {
            tokio::time::sleep(every).await;
            Ok::<_, std::io::Error>(vec![b'x'; 10])
        });
        Body::from_stream(stream)
    }

    async fn answer(router: Router, body: Body) -> (StatusCode, Option<HeaderValue>) {
        let response = router
            .oneshot(axum::http::Request::post("/").body(body).unwrap())
            .await
            .unwrap();
        (response.status(), response.headers().get(CONNECTION).cloned())
    }

    const TIMEOUTS: BodyTimeouts = BodyTimeouts {
        idle: Duration::from_secs(2),
        total: Duration::from_secs(10),
    };

    #[tokio::test(start_paused = true)]
    async fn a_stalled_body_is_408_after_the_idle_timeout() {
        let stalled =
            futures::stream::iter([Ok::<_, std::io::Error>(vec![b'{'; 17])]).chain(futures::stream::pending());
        let started = Instant::now();
        let (status, connection) = answer(router(TIMEOUTS), Body::from_stream(stalled)).await;
        assert_eq!(status, StatusCode::REQUEST_TIMEOUT);
        assert_eq!(connection, Some(HeaderValue::from_static("close")));
        assert_eq!(started.elapsed(), TIMEOUTS.idle);
    }

    #[tokio::test(start_paused = true)]
    async fn a_steady_body_passes_and_a_trickle_hits_the_deadline() {
        let (status, _) = answer(router(TIMEOUTS), trickle(5, Duration::from_secs(1))).await;
        assert_eq!(status, StatusCode::OK);
        // Never idle for 2 s, but 15 s in all.
        let started = Instant::now();
        let (status, _) = answer(router(TIMEOUTS), trickle(15, Duration::from_secs(1))).await;
        assert_eq!(status, StatusCode::REQUEST_TIMEOUT);
        assert!(started.elapsed() <= TIMEOUTS.total + Duration::from_secs(1));
    }

    #[tokio::test(start_paused = true)]
    async fn time_spent_not_reading_is_not_idle() {
        // The handler reads nothing for 5 s (say, waiting for the memory budget), then all.
        let slow_reader = Router::new()
            .route(
                "/",
                post(|request: Request| async move {
                    tokio::time::sleep(Duration::from_secs(5)).await;
                    match axum::body::to_bytes(request.into_body(), usize::MAX).await {
                        Ok(bytes) => (StatusCode::OK, bytes.len().to_string()),
                        Err(_) => (StatusCode::BAD_REQUEST, String::new()),
                    }
                }),
            )
            .layer(axum::middleware::from_fn(read_bodies_in_time))
            .layer(axum::Extension(TIMEOUTS));
        let (status, _) = answer(slow_reader, trickle(3, Duration::from_millis(500))).await;
        assert_eq!(status, StatusCode::OK);
    }
}
