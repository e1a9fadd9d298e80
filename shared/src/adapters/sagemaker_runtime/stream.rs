//! The response stream's `PayloadPart`s as the transport's byte stream: each part's bytes as they
//! come, not reassembled (parts split lines anywhere; the LMI provider rebuilds the lines).

use super::errors::stream_event_error;
use crate::ports::lmi_transport::LmiByteStream;
use crate::ports::provider_call::ProviderError;
use async_trait::async_trait;
use aws_sdk_sagemakerruntime::primitives::event_stream::EventReceiver;
use aws_sdk_sagemakerruntime::types::error::ResponseStreamError;
use aws_sdk_sagemakerruntime::types::ResponseStream;
use bytes::Bytes;
use futures::StreamExt;
use std::time::Duration;
use tokio::time::Instant;

/// The events of one response stream, failures already mapped.
#[async_trait]
pub(super) trait StreamEvents: Send + 'static {
    /// The next event; `None` at the stream's end.
    async fn next_event(&mut self) -> Result<Option<ResponseStream>, ProviderError>;
}

/// The SDK's event receiver.
pub(super) struct SdkStreamEvents {
    pub(super) receiver: EventReceiver<ResponseStream, ResponseStreamError>,
    pub(super) idle_timeout: Duration,
    /// When the invocation began.
    pub(super) started: Instant,
}

#[async_trait]
impl StreamEvents for SdkStreamEvents {
    async fn next_event(&mut self) -> Result<Option<ResponseStream>, ProviderError> {
        self.receiver
            .recv()
            .await
            .map_err(|err| stream_event_error(err, self.idle_timeout, self.started))
    }
}

/// The payload bytes of `events`. A failure, or no event within `idle_timeout`, is the last item.
/// Empty parts and event kinds this SDK does not know are skipped.
pub(super) fn payload_bytes(events: impl StreamEvents, idle_timeout: Duration) -> LmiByteStream {
    futures::stream::unfold(Some(events), move |state| async move {
        let mut events = state?;
        loop {
            let event = match tokio::time::timeout(idle_timeout, events.next_event()).await {
                Err(_) => return Some((Err(ProviderError::Timeout { after: idle_timeout }), None)),
                Ok(Err(err)) => return Some((Err(err), None)),
                Ok(Ok(None)) => return None,
                Ok(Ok(Some(event))) => event,
            };
            let ResponseStream::PayloadPart(part) = event else {
                continue;
            };
            let bytes = part.bytes.map(|blob| blob.into_inner()).unwrap_or_default();
            if !bytes.is_empty() {
                return Some((Ok(Bytes::from(bytes)), Some(events)));
            }
        }
    })
    .boxed()
}

#[cfg(test)]
mod tests {
    use super::*;
    use aws_sdk_sagemakerruntime::primitives::Blob;
    use aws_sdk_sagemakerruntime::types::PayloadPart;
    use std::collections::VecDeque;

    /// Scripted events; past the script's end, no event ever comes (or the stream ends).
    struct Script {
        events: VecDeque<Result<Option<ResponseStream>, ProviderError>>,
        then_silence: bool,
    }

    #[async_trait]
    impl StreamEvents for Script {
        async fn next_event(&mut self) -> Result<Option<ResponseStream>, ProviderError> {
            match self.events.pop_front() {
                Some(event) => event,
                None if self.then_silence => futures::future::pending().await,
                None => Ok(None),
            }
        }
    }

    fn part(bytes: &[u8]) -> Result<Option<ResponseStream>, ProviderError> {
        Ok(Some(ResponseStream::PayloadPart(
            PayloadPart::builder().bytes(Blob::new(bytes)).build(),
        )))
    }

    fn script(events: Vec<Result<Option<ResponseStream>, ProviderError>>, then_silence: bool) -> Script {
        Script {
            events: events.into(),
            then_silence,
        }
    }

    async fn collect(events: Script, idle: Duration) -> Vec<Result<Bytes, ProviderError>> {
        payload_bytes(events, idle).collect().await
    }

    #[tokio::test]
    async fn parts_pass_through_as_they_come_split_anywhere() {
        let events = script(
            vec![
                part(b"{\"token\": {\"te"),
                part(b"xt\": \"Hi\"}}\n{\"tok"),
                part(b""),
                Ok(Some(ResponseStream::PayloadPart(PayloadPart::builder().build()))),
                part(b"en\": {}}\n"),
            ],
            false,
        );
        let items = collect(events, Duration::from_secs(5)).await;
        let bytes: Vec<Bytes> = items.into_iter().map(Result::unwrap).collect();
        assert_eq!(
            bytes,
            [
                Bytes::from_static(b"{\"token\": {\"te"),
                Bytes::from_static(b"xt\": \"Hi\"}}\n{\"tok"),
                Bytes::from_static(b"en\": {}}\n"),
            ]
        );
    }

    #[tokio::test]
    async fn a_failure_is_the_last_item() {
        let events = script(
            vec![
                part(b"{\"token\": {}}\n"),
                Err(ProviderError::Connection("stream broke".into())),
                part(b"never read"),
            ],
            false,
        );
        let items = collect(events, Duration::from_secs(5)).await;
        assert_eq!(items.len(), 2);
        assert_eq!(items[0].as_ref().unwrap(), &Bytes::from_static(b"{\"token\": {}}\n"));
        assert!(matches!(&items[1], Err(ProviderError::Connection(m)) if m == "stream broke"));
    }

    #[tokio::test]
    async fn silence_longer_than_the_idle_timeout_ends_the_stream_with_a_timeout() {
        let idle = Duration::from_millis(50);
        let events = script(vec![part(b"{\"token\": {}}\n")], true);
        let items = tokio::time::timeout(Duration::from_secs(10), collect(events, idle))
            .await
            .unwrap();
        assert_eq!(items.len(), 2);
        assert!(items[0].is_ok());
        assert!(matches!(items[1], Err(ProviderError::Timeout { after }) if after == idle));
    }
}
