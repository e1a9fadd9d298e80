//! SageMaker runtime adapter: the transport of `type = "sagemaker"` providers, through the AWS SDK
//! (`InvokeEndpoint`, `InvokeEndpointWithResponseStream`), with `Content-Type` `application/json`,
//! `Accept` `application/json` (streams: `application/jsonlines`, `text/event-stream` for
//! `tgi_compat`) and the provider's `target_variant` / `inference_component`. SageMaker carries no
//! free-form headers: a request's extra headers for the provider are refused.
//!
//! The router opens transports synchronously at start-up, so SDK clients are made on the first
//! call: the SDK configuration is loaded once (region, credentials, endpoint URL from the
//! environment, including `AWS_ENDPOINT_URL_SAGEMAKER_RUNTIME`), then one client per region (the
//! provider's `region`, else the configuration's), shared by the endpoints in it. The SDK's own
//! retries are off (the gateway retries and falls back per provider) and so is its stalled-stream
//! protection (`timeout_ms` bounds the wait between stream parts instead).

mod errors;
mod stream;

use crate::adapters::aws::load_sdk_config;
use crate::model::{entries_for, ExtraHeaderEntry, ExtraPlacement};
use crate::ports::lmi_transport::{LmiByteStream, LmiTransport, SageMakerConnector, SageMakerEndpoint};
use crate::ports::provider_call::{CallContext, ProviderError};
use async_trait::async_trait;
use aws_config::SdkConfig;
use aws_sdk_sagemakerruntime::config::retry::RetryConfig;
use aws_sdk_sagemakerruntime::config::{Region, StalledStreamProtectionConfig};
use aws_sdk_sagemakerruntime::primitives::Blob;
use aws_sdk_sagemakerruntime::Client;
use bytes::Bytes;
use std::collections::HashMap;
use std::future::Future;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;
use tokio::sync::OnceCell;
use tokio::time::Instant;

/// The content type of LMI bodies, both ways.
const JSON: &str = "application/json";

/// A client made on first use.
type LazyClient = Arc<OnceCell<Client>>;

/// Opens SageMaker endpoint transports.
#[derive(Debug, Default)]
pub(crate) struct SageMakerRuntime {
    /// The base SDK configuration: loaded from the environment on first use unless given.
    sdk_config: Arc<OnceCell<SdkConfig>>,
    /// By region override (`None`: the configuration's region).
    clients: Mutex<HashMap<Option<String>, LazyClient>>,
}

impl SageMakerRuntime {
    fn client_for(&self, region: Option<&str>) -> LazyClient {
        let mut clients = self.clients.lock().unwrap_or_else(PoisonError::into_inner);
        Arc::clone(clients.entry(region.map(str::to_owned)).or_default())
    }
}

impl SageMakerConnector for SageMakerRuntime {
    fn connect(&self, provider: &str, endpoint: &SageMakerEndpoint) -> Arc<dyn LmiTransport> {
        Arc::new(EndpointTransport {
            provider: provider.to_owned(),
            endpoint: endpoint.clone(),
            sdk_config: Arc::clone(&self.sdk_config),
            client: self.client_for(endpoint.region.as_deref()),
        })
    }
}

/// The transport to one SageMaker endpoint.
#[derive(Debug)]
pub(crate) struct EndpointTransport {
    provider: String,
    endpoint: SageMakerEndpoint,
    sdk_config: Arc<OnceCell<SdkConfig>>,
    client: LazyClient,
}

impl EndpointTransport {
    async fn client(&self) -> &Client {
        self.client
            .get_or_init(|| async {
                let base = self.sdk_config.get_or_init(load_sdk_config).await;
                let mut builder = aws_sdk_sagemakerruntime::config::Builder::from(base)
                    .retry_config(RetryConfig::disabled())
                    .stalled_stream_protection(StalledStreamProtectionConfig::disabled());
                if let Some(region) = &self.endpoint.region {
                    builder = builder.region(Region::new(region.clone()));
                }
                tracing::debug!(provider = %self.provider, region = ?self.endpoint.region, "SageMaker runtime client made");
                Client::from_conf(builder.build())
            })
            .await
    }

    fn timeout(&self) -> Duration {
        self.endpoint.timeout
    }

    /// SageMaker sends no free-form headers: refuse a request's extra headers for this provider.
    fn refuse_headers(&self, headers: &[ExtraHeaderEntry]) -> Result<(), ProviderError> {
        let applies = [
            ExtraPlacement::BeforeProviderConfig,
            ExtraPlacement::AfterProviderConfig,
        ]
        .into_iter()
        .any(|placement| entries_for(headers, &self.provider, placement).next().is_some());
        if applies {
            return Err(ProviderError::UnsupportedParameter {
                param: "extra_headers".to_owned(),
                message: "a SageMaker endpoint is called without free-form headers".to_owned(),
            });
        }
        Ok(())
    }
}

/// Awaits `send` until `timeout` after `started`; its failure is read by `on_error`.
async fn send_within<T, E>(
    started: Instant,
    timeout: Duration,
    send: impl Future<Output = Result<T, E>>,
    on_error: fn(E, Duration, Instant) -> ProviderError,
) -> Result<T, ProviderError> {
    tokio::time::timeout_at(started + timeout, send)
        .await
        .map_err(|_| ProviderError::Timeout { after: timeout })?
        .map_err(|err| on_error(err, timeout, started))
}

#[async_trait]
impl LmiTransport for EndpointTransport {
    async fn invoke(
        &self,
        body: Bytes,
        headers: &[ExtraHeaderEntry],
        _ctx: CallContext<'_>,
    ) -> Result<Bytes, ProviderError> {
        self.refuse_headers(headers)?;
        let started = Instant::now();
        let timeout = self.timeout();
        let request = self
            .client()
            .await
            .invoke_endpoint()
            .endpoint_name(&self.endpoint.endpoint_name)
            .content_type(JSON)
            .accept(JSON)
            .set_target_variant(self.endpoint.target_variant.clone())
            .set_inference_component_name(self.endpoint.inference_component.clone())
            .body(Blob::new(Vec::from(body)));
        let output = send_within(started, timeout, request.send(), errors::invoke_error).await?;
        Ok(output
            .body
            .map(|blob| Bytes::from(blob.into_inner()))
            .unwrap_or_default())
    }

    async fn invoke_stream(
        &self,
        body: Bytes,
        headers: &[ExtraHeaderEntry],
        _ctx: CallContext<'_>,
    ) -> Result<LmiByteStream, ProviderError> {
        self.refuse_headers(headers)?;
        let started = Instant::now();
        let timeout = self.timeout();
        let request = self
            .client()
            .await
            .invoke_endpoint_with_response_stream()
            .endpoint_name(&self.endpoint.endpoint_name)
            .content_type(JSON)
            .accept(self.endpoint.stream_accept)
            .set_target_variant(self.endpoint.target_variant.clone())
            .set_inference_component_name(self.endpoint.inference_component.clone())
            .body(Blob::new(Vec::from(body)));
        let output = send_within(started, timeout, request.send(), errors::stream_open_error).await?;
        let events = stream::SdkStreamEvents {
            receiver: output.body,
            idle_timeout: timeout,
            started,
        };
        Ok(stream::payload_bytes(events, timeout))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn endpoint() -> EndpointTransport {
        EndpointTransport {
            provider: "sm".into(),
            endpoint: SageMakerEndpoint {
                endpoint_name: "rolling-batch".into(),
                region: None,
                target_variant: None,
                inference_component: None,
                stream_accept: "application/jsonlines",
                timeout: Duration::from_secs(120),
            },
            sdk_config: Arc::default(),
            client: Arc::default(),
        }
    }

    #[tokio::test]
    async fn extra_headers_for_the_provider_are_refused_before_any_call() {
        let header = ExtraHeaderEntry::set("x-a", "1");
        let ctx = CallContext {
            credentials: &std::collections::HashMap::new(),
        };
        let err = endpoint()
            .invoke(Bytes::from_static(b"{}"), std::slice::from_ref(&header), ctx)
            .await
            .unwrap_err();
        assert!(
            matches!(&err, ProviderError::UnsupportedParameter { param, .. } if param == "extra_headers"),
            "{err:?}"
        );
    }
}
