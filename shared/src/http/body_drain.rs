//! Keep-alive connections survive early rejections. A response sent before its request body was
//! read (401, 404, 405, a bad multipart body, 413) would make hyper close the connection without
//! telling the client, and a keep-alive client's next request on it would fail. So: after the
//! handler answers, what is left of the body is read and discarded, up to [`DRAIN_LIMIT_BYTES`]
//! within [`DRAIN_TIME`]. When more is left, the response says `Connection: close`, and the rest
//! is still read and discarded in the background for up to [`LINGER_TIME`], so a client that is
//! still sending finishes and reads the answer (closing on unread bytes would reset the
//! connection under it).

use axum::body::{Body, BodyDataStream, Bytes, HttpBody};
use axum::extract::Request;
use axum::http::header::CONNECTION;
use axum::http::HeaderValue;
use axum::middleware::Next;
use axum::response::Response;
use futures::StreamExt;
use http_body::{Frame, SizeHint};
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;
use tokio::sync::oneshot;

/// The most unread body bytes read and discarded to keep a connection open.
pub(crate) const DRAIN_LIMIT_BYTES: u64 = 1024 * 1024;

/// The longest an unread body is read for before the connection is given up.
pub(crate) const DRAIN_TIME: Duration = Duration::from_secs(2);

/// How long the rest of a body too large to drain is still read (and discarded) after the answer.
pub(crate) const LINGER_TIME: Duration = Duration::from_secs(30);

/// Run the request, then drain what the handler left of its body (or mark the response
/// `Connection: close` when that is too much).
pub(crate) async fn drain_unread_body(request: Request, next: Next) -> Response {
    let (parts, body) = request.into_parts();
    if body.is_end_stream() {
        return next.run(Request::from_parts(parts, body)).await;
    }
    let (unread_tx, mut unread_rx) = oneshot::channel();
    let tracked = Body::new(TrackedBody {
        inner: Some(body),
        unread: Some(unread_tx),
    });
    let mut response = next.run(Request::from_parts(parts, tracked)).await;
    let reusable = match unread_rx.try_recv() {
        // Read to the end (or failed, so the connection is gone anyway).
        Err(oneshot::error::TryRecvError::Closed) => true,
        Ok(unread) => drain(unread).await,
        // Still held by something that outlives the handler: it cannot be drained here.
        Err(oneshot::error::TryRecvError::Empty) => false,
    };
    if !reusable {
        response
            .headers_mut()
            .insert(CONNECTION, HeaderValue::from_static("close"));
    }
    response
}

/// Read and discard `body` to its end: `true` when that took at most [`DRAIN_LIMIT_BYTES`] and
/// [`DRAIN_TIME`]; otherwise the rest lingers in the background and `false` is returned.
async fn drain(body: Body) -> bool {
    let declared_too_large = body.size_hint().lower() > DRAIN_LIMIT_BYTES;
    let mut data = body.into_data_stream();
    let ended = !declared_too_large
        && tokio::time::timeout(DRAIN_TIME, async {
            let mut read: u64 = 0;
            while let Some(chunk) = data.next().await {
                let Ok(chunk) = chunk else { return false };
                read = read.saturating_add(chunk.len() as u64);
                if read > DRAIN_LIMIT_BYTES {
                    return false;
                }
            }
            true
        })
        .await
        .unwrap_or(false);
    if !ended {
        tokio::spawn(linger(data));
    }
    ended
}

/// Discard the rest of a body for a while, then drop it (which closes the connection).
async fn linger(mut data: BodyDataStream) {
    let _ = tokio::time::timeout(LINGER_TIME, async { while let Some(Ok(_)) = data.next().await {} }).await;
}

/// A request body that, when dropped before its end, hands what is left back through `unread`.
struct TrackedBody {
    inner: Option<Body>,
    unread: Option<oneshot::Sender<Body>>,
}

impl HttpBody for TrackedBody {
    type Data = Bytes;
    type Error = axum::Error;

    fn poll_frame(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Result<Frame<Bytes>, axum::Error>>> {
        let Some(inner) = self.inner.as_mut() else {
            return Poll::Ready(None);
        };
        let polled = Pin::new(inner).poll_frame(cx);
        if matches!(polled, Poll::Ready(None) | Poll::Ready(Some(Err(_)))) {
            // Nothing left to drain: closing the channel says so.
            self.unread = None;
        }
        polled
    }

    fn is_end_stream(&self) -> bool {
        self.inner.as_ref().is_none_or(HttpBody::is_end_stream)
    }

    fn size_hint(&self) -> SizeHint {
        self.inner
            .as_ref()
            .map_or_else(|| SizeHint::with_exact(0), HttpBody::size_hint)
    }
}

impl Drop for TrackedBody {
    fn drop(&mut self) {
        if let (Some(inner), Some(unread)) = (self.inner.take(), self.unread.take()) {
            if !inner.is_end_stream() {
                let _ = unread.send(inner);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use axum::routing::post;
    use axum::Router;
    use tower::ServiceExt;

    async fn connection_header(router: Router, body: Body) -> Option<String> {
        let request = axum::http::Request::post("/").body(body).unwrap();
        let response = router.oneshot(request).await.unwrap();
        response
            .headers()
            .get(CONNECTION)
            .map(|v| v.to_str().unwrap().to_owned())
    }

    fn rejecting_router() -> Router {
        Router::new()
            .route("/", post(|| async { axum::http::StatusCode::UNAUTHORIZED }))
            .layer(axum::middleware::from_fn(drain_unread_body))
    }

    fn chunked(chunks: usize, size: usize) -> Body {
        let stream = futures::stream::iter((0..chunks).map(move |_| Ok::<_, std::io::Error>(vec![b'x'; size])));
        Body::from_stream(stream)
    }

    #[tokio::test]
    async fn a_small_unread_body_is_drained_and_the_connection_kept() {
        assert_eq!(connection_header(rejecting_router(), chunked(8, 64 * 1024)).await, None);
        assert_eq!(connection_header(rejecting_router(), Body::from("small")).await, None);
    }

    #[tokio::test]
    async fn a_large_unread_body_closes_the_connection() {
        let header = connection_header(rejecting_router(), chunked(40, 64 * 1024)).await;
        assert_eq!(header.as_deref(), Some("close"));
        let declared_large = Body::from(vec![b'x'; 2 * 1024 * 1024]);
        let header = connection_header(rejecting_router(), declared_large).await;
        assert_eq!(header.as_deref(), Some("close"));
    }

    #[tokio::test]
    async fn a_body_read_by_the_handler_needs_nothing() {
        let router = Router::new()
            .route("/", post(|body: Bytes| async move { body.len().to_string() }))
            .layer(axum::middleware::from_fn(drain_unread_body));
        assert_eq!(connection_header(router, chunked(40, 64 * 1024)).await, None);
    }

    #[tokio::test]
    async fn a_body_that_never_ends_closes_the_connection() {
        let stream = futures::stream::pending::<Result<Vec<u8>, std::io::Error>>();
        tokio::time::pause();
        let header = connection_header(rejecting_router(), Body::from_stream(stream)).await;
        assert_eq!(header.as_deref(), Some("close"));
    }
}
