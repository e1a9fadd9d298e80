//! `type = "lmi"`: LMI bodies POSTed over HTTP to a DJL Serving / LMI container.

use crate::config::LmiProviderConfig;
use crate::model::ExtraHeaderEntry;
use crate::ports::lmi_transport::{LmiByteStream, LmiTransport};
use crate::ports::ProviderSecrets;
use crate::providers::api_key::ApiKeySource;
use crate::providers::extras::ConfiguredExtras;
use crate::providers::http_upstream::{http_client, HttpClientError, HttpUpstream};
use crate::providers::{CallContext, ProviderError};
use async_trait::async_trait;
use bytes::Bytes;
use futures::StreamExt;
use std::sync::Arc;
use std::time::Duration;

/// POSTs to the container's `endpoint_url` with the bearer key and the extra headers.
#[derive(Debug, Clone)]
pub(crate) struct HttpLmiTransport {
    endpoint_url: String,
    upstream: Arc<HttpUpstream>,
}

impl HttpLmiTransport {
    /// `secrets` reads an `ssm::` key.
    pub fn new(
        provider: impl Into<String>,
        config: &LmiProviderConfig,
        secrets: Arc<dyn ProviderSecrets>,
    ) -> Result<Self, HttpClientError> {
        Ok(Self {
            endpoint_url: config.endpoint_url.clone(),
            upstream: Arc::new(HttpUpstream {
                provider: provider.into(),
                client: http_client(Duration::from_millis(config.connect_timeout_ms))?,
                api_key: ApiKeySource::new(&config.api_key_location, secrets),
                // The body edits are the provider's (they apply to the mapped body); headers are ours.
                extras: ConfiguredExtras::from_config(&[], &config.extra_headers),
                timeout: Duration::from_millis(config.timeout_ms),
            }),
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
        let request = self
            .upstream
            .post_json(&self.endpoint_url, body, !stream, headers, ctx)
            .await?;
        self.upstream.send(request).await
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
        response.bytes().await.map_err(|e| self.upstream.transport_error(&e))
    }

    fn missing_env_key(&self) -> Option<&str> {
        self.upstream.api_key.missing_env_var()
    }

    async fn invoke_stream(
        &self,
        body: Bytes,
        headers: &[ExtraHeaderEntry],
        ctx: CallContext<'_>,
    ) -> Result<LmiByteStream, ProviderError> {
        let response = self.send(body, true, headers, ctx).await?;
        let upstream = Arc::clone(&self.upstream);
        Ok(response
            .bytes_stream()
            .map(move |item| {
                item.map_err(|e| match upstream.transport_error(&e) {
                    ProviderError::Connection(message) => {
                        ProviderError::Connection(format!("LMI stream broke: {message}"))
                    }
                    other => other,
                })
            })
            .boxed())
    }
}
