//! An open stream ends when its API key is revoked: before passing on a frame, at most every
//! [`CHECK_EVERY`], it asks whether the key was revoked (the authenticator's versioned check: one
//! read), and if so sends an error event (`api_key_revoked`) instead and ends. Every
//! `text/event-stream` response of a request authenticated with a key gets this (open-server
//! requests carry no key and are not checked).

use crate::auth::Authenticator;
use axum::body::Body;
use axum::http::header;
use axum::response::Response;
use bytes::Bytes;
use futures::StreamExt;
use std::sync::Arc;
use std::time::Duration;
use tokio::time::Instant;

/// How often an open stream checks its key.
pub(super) const CHECK_EVERY: Duration = Duration::from_secs(5);

/// The event a stream ends with when its key was revoked (OpenAI's error envelope).
pub(super) const REVOKED_EVENT: &str = "data: {\"error\":{\"message\":\"The API key of this stream was revoked.\",\"type\":\"invalid_request_error\",\"param\":null,\"code\":\"api_key_revoked\"}}\n\n";

/// `response` with its body ended by a revocation of `key_id`, if it is an event stream.
pub(super) fn end_on_revocation(
    response: Response,
    auth: Arc<Authenticator>,
    key_id: String,
    every: Duration,
) -> Response {
    let is_stream = response
        .headers()
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.starts_with("text/event-stream"));
    if !is_stream {
        return response;
    }
    let (parts, body) = response.into_parts();
    let frames = body.into_data_stream();
    let checked = futures::stream::unfold(
        (frames, Instant::now(), false),
        move |(mut frames, mut checked_at, ended)| {
            let (auth, key_id) = (Arc::clone(&auth), key_id.clone());
            async move {
                if ended {
                    return None;
                }
                let frame = frames.next().await?;
                if frame.is_ok() && checked_at.elapsed() >= every {
                    checked_at = Instant::now();
                    match auth.key_revoked(&key_id).await {
                        Ok(true) => {
                            tracing::info!(key_id, "stream ended: its API key was revoked");
                            return Some((
                                Ok(Bytes::from_static(REVOKED_EVENT.as_bytes())),
                                (frames, checked_at, true),
                            ));
                        }
                        Ok(false) => {}
                        // A failed check does not cut a stream: the next one may tell.
                        Err(err) => tracing::warn!(key_id, error = %err, "could not check a stream's API key"),
                    }
                }
                Some((frame, (frames, checked_at, false)))
            }
        },
    );
    Response::from_parts(parts, Body::from_stream(checked))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::adapters::embedded::SqliteStateStore;
    use crate::auth::{ApiKeyService, AuthMode};
    use crate::http::sse::sse_body_response;
    use crate::ports::{ProjectId, SystemClock, UuidV7Ids};

    #[tokio::test]
    async fn a_stream_ends_with_an_error_event_once_its_key_is_revoked() {
        let state = Arc::new(SqliteStateStore::in_memory().unwrap());
        let keys = ApiKeyService::new(state.clone(), Arc::new(SystemClock), Arc::new(UuidV7Ids));
        // The stream's process and the one that revokes share only the store.
        let admin = ApiKeyService::new(state, Arc::new(SystemClock), Arc::new(UuidV7Ids));
        let auth = Arc::new(Authenticator::new(
            keys.clone(),
            AuthMode::Required,
            Duration::from_secs(3600),
        ));
        let key = keys.create(&ProjectId::new("p1"), None).await.unwrap().info.key_id;
        let (sender, receiver) = tokio::sync::mpsc::unbounded_channel::<Bytes>();
        let frames = tokio_stream::wrappers::UnboundedReceiverStream::new(receiver);
        let response = end_on_revocation(
            sse_body_response(frames),
            Arc::clone(&auth),
            key.clone(),
            Duration::ZERO,
        );
        let mut body = response.into_body().into_data_stream();
        sender.send(Bytes::from_static(b"data: 1\n\n")).unwrap();
        assert_eq!(body.next().await.unwrap().unwrap(), "data: 1\n\n");
        admin.revoke(&key).await.unwrap();
        sender.send(Bytes::from_static(b"data: 2\n\n")).unwrap();
        assert_eq!(body.next().await.unwrap().unwrap(), REVOKED_EVENT);
        sender.send(Bytes::from_static(b"data: 3\n\n")).unwrap();
        assert!(body.next().await.is_none(), "nothing after the error event");
    }

    #[tokio::test]
    async fn other_responses_pass_untouched() {
        let keys = ApiKeyService::new(
            Arc::new(SqliteStateStore::in_memory().unwrap()),
            Arc::new(SystemClock),
            Arc::new(UuidV7Ids),
        );
        let auth = Arc::new(Authenticator::new(keys, AuthMode::Required, Duration::from_secs(3600)));
        let response = Response::new(Body::from("plain"));
        let response = end_on_revocation(response, auth, "0".repeat(32), Duration::ZERO);
        let bytes = axum::body::to_bytes(response.into_body(), 100).await.unwrap();
        assert_eq!(bytes, "plain");
    }
}
