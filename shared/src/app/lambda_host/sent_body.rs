//! A response counts as unfinished deferred work until its body has been sent. Work deferred while
//! a stream is still being produced, or at its very end, is then awaited with the rest, whenever
//! the Runtime API acknowledges the response upload.

use crate::adapters::DeferredTasks;
use axum::body::Body;
use axum::extract::State;
use axum::response::Response;
use axum::Router;
use bytes::Bytes;
use http_body::{Frame, SizeHint};
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use tokio_util::task::task_tracker::TaskTrackerToken;

/// `router` whose response bodies hold `deferred` open until they are sent (dropped).
pub(crate) fn hold_deferred_work_until_sent(router: Router, deferred: Arc<DeferredTasks>) -> Router {
    router.layer(axum::middleware::map_response_with_state(deferred, hold_until_sent))
}

async fn hold_until_sent(State(deferred): State<Arc<DeferredTasks>>, response: Response) -> Response {
    let hold = deferred.hold();
    response.map(|body| Body::new(HeldUntilSent { body, _hold: hold }))
}

struct HeldUntilSent {
    body: Body,
    _hold: TaskTrackerToken,
}

impl http_body::Body for HeldUntilSent {
    type Data = Bytes;
    type Error = axum::Error;

    fn poll_frame(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Result<Frame<Bytes>, axum::Error>>> {
        Pin::new(&mut self.body).poll_frame(cx)
    }

    fn is_end_stream(&self) -> bool {
        self.body.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.body.size_hint()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use axum::routing::get;
    use futures::StreamExt;
    use std::time::Duration;
    use tower::ServiceExt;

    #[tokio::test(start_paused = true)]
    async fn settling_waits_until_the_response_body_has_been_sent() {
        let deferred = Arc::new(DeferredTasks::new());
        let router = Router::new().route(
            "/",
            get(|| async {
                Body::from_stream(futures::stream::iter(["a", "b"]).then(|chunk| async move {
                    tokio::time::sleep(Duration::from_millis(100)).await;
                    Ok::<_, std::convert::Infallible>(chunk)
                }))
            }),
        );
        let router = hold_deferred_work_until_sent(router, Arc::clone(&deferred));
        let response = router
            .oneshot(axum::http::Request::get("/").body(Body::empty()).unwrap())
            .await
            .unwrap();
        assert_eq!(
            deferred.settle_within(Duration::from_millis(50)).await,
            1,
            "the body is not sent yet"
        );
        let body = axum::body::to_bytes(response.into_body(), 1024).await.unwrap();
        assert_eq!(&body[..], b"ab");
        assert_eq!(deferred.pending(), 0);
        tokio::time::timeout(Duration::from_millis(1), deferred.settle())
            .await
            .unwrap();
    }
}
