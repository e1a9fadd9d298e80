//! Reading an upstream SSE stream of chat completion chunks.

use crate::model::ModelChunk;
use crate::openai::chat::ChatCompletionChunk;
use crate::openai::from_model::chunk_to_model;
use crate::providers::http_upstream::upstream_error_message;
use crate::providers::{ChunkStream, ProviderError};
use eventsource_stream::Eventsource;
use futures::StreamExt;
use std::time::Duration;

/// Chunks from an upstream `text/event-stream` response. Ends at `data: [DONE]`; an `error` event
/// or a gap longer than `idle_timeout` ends the stream with an error. With `keep_raw`, each chunk
/// keeps its `data:` payload as received.
pub(super) fn chunk_stream(response: reqwest::Response, idle_timeout: Duration, keep_raw: bool) -> ChunkStream {
    let events = response.bytes_stream().eventsource();
    let stream = futures::stream::unfold(Some(events), move |state| async move {
        let mut events = state?;
        loop {
            let next = match tokio::time::timeout(idle_timeout, events.next()).await {
                Err(_) => return Some((Err(ProviderError::Timeout { after: idle_timeout }), None)),
                Ok(next) => next,
            };
            let event = match next {
                None => return None,
                Some(Err(err)) => {
                    return Some((Err(ProviderError::Connection(format!("stream broke: {err}"))), None));
                }
                Some(Ok(event)) => event,
            };
            let data = event.data.trim();
            if data.is_empty() {
                continue;
            }
            if data == "[DONE]" {
                return None;
            }
            return Some(match parse_chunk(data, keep_raw) {
                Ok(chunk) => (Ok(chunk), Some(events)),
                Err(err) => (Err(err), None),
            });
        }
    });
    stream.boxed()
}

/// One `data:` payload: a chunk (with the payload itself when `keep_raw`), or an error object
/// sent mid-stream.
pub(super) fn parse_chunk(data: &str, keep_raw: bool) -> Result<ModelChunk, ProviderError> {
    let value: serde_json::Value = serde_json::from_str(data)
        .map_err(|e| ProviderError::InvalidResponse(format!("stream chunk is not JSON: {e}")))?;
    if value.get("error").is_some_and(|e| !e.is_null()) {
        return Err(ProviderError::Http {
            status: 502,
            message: upstream_error_message(&value).unwrap_or_else(|| "error in upstream stream".to_owned()),
            retry_after: None,
            body: Some(value),
        });
    }
    let chunk: ChatCompletionChunk =
        serde_json::from_value(value).map_err(|e| ProviderError::InvalidResponse(format!("stream chunk: {e}")))?;
    // The raw chunk is kept only when asked for: copying every chunk costs on the hot path.
    Ok(chunk_to_model(chunk, keep_raw.then(|| data.to_owned())))
}
