//! `type = "lmi"`: LMI bodies POSTed over HTTP to a DJL Serving / LMI container.

use super::protocol::error_message;
use super::transport::{ByteStream, LmiTransport};
use crate::config::LmiProviderConfig;
use crate::model::ExtraHeaderEntry;
use crate::providers::api_key::ApiKeySource;
use crate::providers::extras::ConfiguredExtras;
use crate::providers::openai::http_client;
use crate::providers::retry::retry_after_from_headers;
use crate::providers::{CallContext, ProviderError};
use async_trait::async_trait;
use bytes::Bytes;
use futures::StreamExt;
use serde_json::Value;
use std::time::Duration;

/// The largest error body kept as JSON.
const MAX_KEPT_ERROR_BODY: usize = 64 * 1024;

/// The HTTP client could not be made.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("the HTTP client could not be made: {0}")]
pub struct HttpClientError(pub String);

/// POSTs to the container's `endpoint_url` with the bearer key and the extra headers.
#[derive(Debug, Clone)]
pub struct HttpLmiTransport {
    provider: String,
    endpoint_url: String,
    api_key: ApiKeySource,
    timeout: Duration,
    client: reqwest::Client,
    extras: ConfiguredExtras,
}

impl HttpLmiTransport {
    pub fn new(provider: impl Into<String>, config: &LmiProviderConfig) -> Result<Self, HttpClientError> {
        let client = http_client(Duration::from_millis(config.connect_timeout_ms)).map_err(HttpClientError)?;
        Ok(Self {
            provider: provider.into(),
            endpoint_url: config.endpoint_url.clone(),
            api_key: ApiKeySource::new(&config.api_key_location),
            timeout: Duration::from_millis(config.timeout_ms),
            client,
            // The body edits are the provider's (they apply to the mapped body); headers are ours.
            extras: ConfiguredExtras::from_config(&[], &config.extra_headers),
        })
    }

    /// POST `body`; a whole-request timeout unless streaming (the provider times a stream's
    /// start and the gaps between its lines). `headers` are the request's extra headers.
    async fn send(
        &self,
        body: Bytes,
        stream: bool,
        headers: &[ExtraHeaderEntry],
        ctx: CallContext<'_>,
    ) -> Result<reqwest::Response, ProviderError> {
        let mut builder = self
            .client
            .post(&self.endpoint_url)
            .header(http::header::CONTENT_TYPE, "application/json")
            .body(body);
        if !stream {
            builder = builder.timeout(self.timeout);
        }
        if let Some(key) = self.api_key.key(&self.provider, ctx)? {
            builder = builder.bearer_auth(key);
        }
        let mut request = builder.build().map_err(|e| self.transport_error(&e))?;
        self.extras
            .edit_headers(request.headers_mut(), headers, &self.provider)?;
        let response = self
            .client
            .execute(request)
            .await
            .map_err(|e| self.transport_error(&e))?;
        if response.status().is_success() {
            return Ok(response);
        }
        Err(error_from_response(response).await)
    }

    fn transport_error(&self, error: &reqwest::Error) -> ProviderError {
        if error.is_timeout() {
            return ProviderError::Timeout { after: self.timeout };
        }
        let mut message = error.to_string();
        let mut source = std::error::Error::source(error);
        while let Some(inner) = source {
            message.push_str(": ");
            message.push_str(&inner.to_string());
            source = inner.source();
        }
        ProviderError::Connection(message)
    }
}

#[async_trait]
impl LmiTransport for HttpLmiTransport {
    async fn invoke(
        &self,
        body: Bytes,
        headers: &[ExtraHeaderEntry],
        ctx: CallContext<'_>,
    ) -> Result<Bytes, ProviderError> {
        let response = self.send(body, false, headers, ctx).await?;
        response.bytes().await.map_err(|e| self.transport_error(&e))
    }

    async fn invoke_stream(
        &self,
        body: Bytes,
        headers: &[ExtraHeaderEntry],
        ctx: CallContext<'_>,
    ) -> Result<ByteStream, ProviderError> {
        let response = self.send(body, true, headers, ctx).await?;
        let this = self.clone();
        Ok(response
            .bytes_stream()
            .map(move |item| {
                item.map_err(|e| match this.transport_error(&e) {
                    ProviderError::Connection(message) => {
                        ProviderError::Connection(format!("LMI stream broke: {message}"))
                    }
                    other => other,
                })
            })
            .boxed())
    }
}

/// A non-2xx answer as [`ProviderError::Http`] with the container's message: LMI's `error` (or
/// `message`) text, else the body.
async fn error_from_response(response: reqwest::Response) -> ProviderError {
    let status = response.status().as_u16();
    let retry_after = retry_after_from_headers(response.headers());
    let text = response.text().await.unwrap_or_default();
    let body = (text.len() <= MAX_KEPT_ERROR_BODY)
        .then(|| serde_json::from_str::<Value>(&text).ok())
        .flatten();
    let message = body.as_ref().and_then(error_message).unwrap_or_else(|| {
        if text.trim().is_empty() {
            format!("HTTP {status} with an empty body")
        } else {
            text.chars().take(2000).collect()
        }
    });
    ProviderError::Http {
        status,
        message,
        retry_after,
        body,
    }
}
