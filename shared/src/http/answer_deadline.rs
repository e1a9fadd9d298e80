//! A front that cuts requests after a fixed time (API Gateway's HTTP API: 30 s per integration)
//! answers a long non-streamed completion with its own bare 504. The host that knows a request came
//! through such a front puts an [`AnswerDeadline`] on it; this layer then answers a clean 504
//! (in the route's surface shape, see `tensorzero_surface`) that advises streaming, before the
//! front's cut. Only the time until the response starts counts, and a handler that answers with
//! a stream says so ([`StreamAnswer`]): streams are never cut by it. Requests without the
//! extension (the local server, the function URL) have no deadline.

use super::error::ApiError;
use axum::extract::{FromRequestParts, Request};
use axum::http::request::Parts;
use axum::http::StatusCode;
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use std::convert::Infallible;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
#[cfg(feature = "aws")]
use std::time::Duration;
use tokio::time::Instant;

/// When the answer must have started, set per request by the host.
#[derive(Debug, Clone)]
pub(crate) struct AnswerDeadline {
    pub at: Instant,
    /// Set by the handler when it answers with a stream (exempt).
    streaming: Arc<AtomicBool>,
}

impl PartialEq for AnswerDeadline {
    fn eq(&self, other: &Self) -> bool {
        self.at == other.at
    }
}

/// The deadline of a request that reached the front `elapsed` ago (the front counts from when it
/// received it), under the host's `limit`: `None` without a limit (0).
#[cfg(feature = "aws")]
pub(crate) fn answer_deadline(limit: Duration, elapsed: Duration, now: Instant) -> Option<AnswerDeadline> {
    if limit.is_zero() {
        return None;
    }
    Some(AnswerDeadline {
        at: now + limit.saturating_sub(elapsed),
        streaming: Arc::default(),
    })
}

/// A handler's word that it answers with a stream: call [`StreamAnswer::streaming`] before
/// waiting for the stream's first chunk, and the deadline no longer applies.
pub(crate) struct StreamAnswer(Option<Arc<AtomicBool>>);

impl StreamAnswer {
    pub(crate) fn streaming(&self) {
        if let Some(flag) = &self.0 {
            flag.store(true, Ordering::SeqCst);
        }
    }
}

impl<S: Send + Sync> FromRequestParts<S> for StreamAnswer {
    type Rejection = Infallible;

    async fn from_request_parts(parts: &mut Parts, _state: &S) -> Result<Self, Self::Rejection> {
        let flag = parts
            .extensions
            .get::<AnswerDeadline>()
            .map(|deadline| Arc::clone(&deadline.streaming));
        Ok(Self(flag))
    }
}

/// The 504 answered at the deadline.
pub(crate) fn answer_too_slow() -> ApiError {
    ApiError::new(
        StatusCode::GATEWAY_TIMEOUT,
        "timeout",
        "The answer did not start within the time this endpoint allows a response that is not streamed \
         (API Gateway's HTTP API cuts requests at 30 seconds). Send long generations with \"stream\": true \
         through the streaming URL (the stack's InferenceStreamingUrl, up to 5 minutes), or use the async \
         or batch APIs.",
    )
    .with_code("timeout")
}

/// Answer [`answer_too_slow`] when the response has not started by the request's
/// [`AnswerDeadline`], unless its handler answers with a stream.
pub(crate) async fn answer_in_time(request: Request, next: Next) -> Response {
    let Some(deadline) = request.extensions().get::<AnswerDeadline>().cloned() else {
        return next.run(request).await;
    };
    let answer = next.run(request);
    tokio::pin!(answer);
    match tokio::time::timeout_at(deadline.at, &mut answer).await {
        Ok(response) => response,
        Err(_) if deadline.streaming.load(Ordering::SeqCst) => answer.await,
        Err(_) => {
            tracing::warn!("the response had not started by the front's deadline: answered 504");
            answer_too_slow().into_response()
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_deadline_counts_from_when_the_front_received_the_request() {
        let now = Instant::now();
        let limit = Duration::from_secs(28);
        let at = |elapsed| answer_deadline(limit, elapsed, now).map(|deadline| deadline.at);
        assert_eq!(at(Duration::ZERO), Some(now + limit));
        assert_eq!(at(Duration::from_secs(3)), Some(now + Duration::from_secs(25)));
        // A request that waited past the limit (a long cold start) is already late.
        assert_eq!(at(Duration::from_secs(40)), Some(now));
        assert_eq!(answer_deadline(Duration::ZERO, Duration::ZERO, now), None);
    }

    #[test]
    fn the_answer_is_a_504_that_advises_streaming() {
        let error = answer_too_slow();
        assert_eq!(error.status, StatusCode::GATEWAY_TIMEOUT);
        assert!(error.message.contains("\"stream\": true"), "{}", error.message);
        assert_eq!(error.envelope()["error"]["type"], "timeout");
    }
}
