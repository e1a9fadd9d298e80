//! Server-sent events framing for streamed answers (chat completions, `/inference`).

use super::error::ApiError;
use crate::inference::ClientChunkStream;
use axum::body::Body;
use axum::http::header;
use axum::response::{IntoResponse, Response};
use bytes::Bytes;
use futures::stream::BoxStream;
use futures::{Stream, StreamExt};
use serde::Serialize;

/// One `data:` event.
pub fn frame(data: &str) -> Bytes {
    Bytes::from(format!("data: {data}\n\n"))
}

/// The terminating event.
pub const DONE: &[u8] = b"data: [DONE]\n\n";

/// Frame chunks as SSE: each chunk a `data:` event, then `data: [DONE]`. An error becomes a
/// `data: {"error": …}` event (OpenAI's envelope) and ends the stream (no `[DONE]`, so clients
/// see it failed).
pub(crate) fn sse_frames(chunks: ClientChunkStream) -> impl Stream<Item = Bytes> + Send + 'static {
    sse_frames_with(chunks, |err| ApiError::from(err).envelope().to_string())
}

/// [`sse_frames`] for any serializable chunk, with the API surface's own error event.
pub(crate) fn sse_frames_with<T, E, F>(
    chunks: BoxStream<'static, Result<T, E>>,
    error_event: F,
) -> impl Stream<Item = Bytes> + Send + 'static
where
    T: Serialize + Send + 'static,
    E: std::fmt::Display + Send + 'static,
    F: Fn(E) -> String + Send + Sync + 'static,
{
    let error_event = std::sync::Arc::new(error_event);
    futures::stream::unfold((chunks, false), move |(mut chunks, finished)| {
        let error_event = std::sync::Arc::clone(&error_event);
        async move {
            if finished {
                return None;
            }
            match chunks.next().await {
                Some(Ok(chunk)) => {
                    let json = serde_json::to_string(&chunk).unwrap_or_else(|_| "{}".to_owned());
                    Some((frame(&json), (chunks, false)))
                }
                Some(Err(err)) => {
                    tracing::warn!(error = %err, "stream failed mid-way");
                    Some((frame(&error_event(err)), (chunks, true)))
                }
                None => Some((Bytes::from_static(DONE), (chunks, true))),
            }
        }
    })
}

/// The HTTP response carrying the stream.
pub(crate) fn sse_response(chunks: ClientChunkStream) -> Response {
    sse_body_response(sse_frames(chunks))
}

/// An SSE response with `frames` as its body.
pub(crate) fn sse_body_response(frames: impl Stream<Item = Bytes> + Send + 'static) -> Response {
    let body = Body::from_stream(frames.map(Ok::<_, std::convert::Infallible>));
    (
        [
            (header::CONTENT_TYPE, "text/event-stream"),
            (header::CACHE_CONTROL, "no-cache"),
        ],
        body,
    )
        .into_response()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::openai::chat::ChatCompletionChunk;
    use crate::providers::ProviderError;

    fn chunk(id: &str) -> ChatCompletionChunk {
        serde_json::from_value(serde_json::json!({"id": id, "choices": []})).unwrap()
    }

    async fn collect(items: Vec<Result<ChatCompletionChunk, ProviderError>>) -> String {
        let frames: Vec<Bytes> = sse_frames(futures::stream::iter(items).boxed()).collect().await;
        frames.iter().map(|b| String::from_utf8(b.to_vec()).unwrap()).collect()
    }

    #[tokio::test]
    async fn frames_chunks_and_ends_with_done() {
        let text = collect(vec![Ok(chunk("a")), Ok(chunk("b"))]).await;
        let events: Vec<&str> = text.split("\n\n").filter(|e| !e.is_empty()).collect();
        assert_eq!(events.len(), 3);
        assert!(events.iter().all(|e| e.starts_with("data: ")));
        assert!(events[0].contains(r#""id":"a""#));
        assert_eq!(events[2], "data: [DONE]");
    }

    #[tokio::test]
    async fn an_error_becomes_an_error_event_and_ends_the_stream() {
        let text = collect(vec![
            Ok(chunk("a")),
            Err(ProviderError::Connection("reset".into())),
            Ok(chunk("never")),
        ])
        .await;
        assert!(text.contains(r#"data: {"error":"#));
        assert!(!text.contains("never"));
        assert!(!text.contains("[DONE]"));
    }
}
