//! SageMaker runtime adapter: the transport of `type = "sagemaker"` providers, through the AWS SDK
//! (`InvokeEndpoint`, `InvokeEndpointWithResponseStream`), with `Content-Type` and `Accept`
//! `application/json` and the provider's `target_variant` / `inference_component`.
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
use crate::config::SageMakerProviderConfig;
use crate::providers::lmi::{ByteStream, LmiTransport, SageMakerConnector};
use crate::providers::{CallContext, ProviderError};
use async_trait::async_trait;
use aws_config::SdkConfig;
use aws_sdk_sagemakerruntime::config::retry::RetryConfig;
use aws_sdk_sagemakerruntime::config::{Region, StalledStreamProtectionConfig};
use aws_sdk_sagemakerruntime::primitives::Blob;
use aws_sdk_sagemakerruntime::Client;
use bytes::Bytes;
use std::collections::HashMap;
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
pub struct SageMakerRuntime {
    /// The base SDK configuration: loaded from the environment on first use unless given.
    sdk_config: Arc<OnceCell<SdkConfig>>,
    /// By region override (`None`: the configuration's region).
    clients: Mutex<HashMap<Option<String>, LazyClient>>,
}

impl SageMakerRuntime {
    /// Clients from `sdk_config` instead of the environment.
    pub fn with_sdk_config(sdk_config: SdkConfig) -> Self {
        Self {
            sdk_config: Arc::new(OnceCell::new_with(Some(sdk_config))),
            clients: Mutex::default(),
        }
    }

    fn client_for(&self, region: Option<&str>) -> LazyClient {
        let mut clients = self.clients.lock().unwrap_or_else(PoisonError::into_inner);
        Arc::clone(clients.entry(region.map(str::to_owned)).or_default())
    }
}

impl SageMakerConnector for SageMakerRuntime {
    fn connect(&self, provider: &str, config: &SageMakerProviderConfig) -> Arc<dyn LmiTransport> {
        Arc::new(SageMakerEndpoint {
            provider: provider.to_owned(),
            config: config.clone(),
            sdk_config: Arc::clone(&self.sdk_config),
            client: self.client_for(config.region.as_deref()),
        })
    }
}

/// One SageMaker endpoint.
#[derive(Debug)]
pub struct SageMakerEndpoint {
    provider: String,
    config: SageMakerProviderConfig,
    sdk_config: Arc<OnceCell<SdkConfig>>,
    client: LazyClient,
}

impl SageMakerEndpoint {
    async fn client(&self) -> &Client {
        self.client
            .get_or_init(|| async {
                let base = self.sdk_config.get_or_init(load_sdk_config).await;
                let mut builder = aws_sdk_sagemakerruntime::config::Builder::from(base)
                    .retry_config(RetryConfig::disabled())
                    .stalled_stream_protection(StalledStreamProtectionConfig::disabled());
                if let Some(region) = &self.config.region {
                    builder = builder.region(Region::new(region.clone()));
                }
                tracing::debug!(provider = %self.provider, region = ?self.config.region, "SageMaker runtime client made");
                Client::from_conf(builder.build())
            })
            .await
    }

    fn timeout(&self) -> Duration {
        Duration::from_millis(self.config.timeout_ms)
    }
}

#[async_trait]
impl LmiTransport for SageMakerEndpoint {
    async fn invoke(&self, body: Bytes, _ctx: CallContext<'_>) -> Result<Bytes, ProviderError> {
        let started = Instant::now();
        let timeout = self.timeout();
        let request = self
            .client()
            .await
            .invoke_endpoint()
            .endpoint_name(&self.config.endpoint_name)
            .content_type(JSON)
            .accept(JSON)
            .set_target_variant(self.config.target_variant.clone())
            .set_inference_component_name(self.config.inference_component.clone())
            .body(Blob::new(Vec::from(body)));
        let output = tokio::time::timeout_at(started + timeout, request.send())
            .await
            .map_err(|_| ProviderError::Timeout { after: timeout })?
            .map_err(|err| errors::invoke_error(err, timeout, started))?;
        Ok(output
            .body
            .map(|blob| Bytes::from(blob.into_inner()))
            .unwrap_or_default())
    }

    async fn invoke_stream(&self, body: Bytes, _ctx: CallContext<'_>) -> Result<ByteStream, ProviderError> {
        let started = Instant::now();
        let timeout = self.timeout();
        let request = self
            .client()
            .await
            .invoke_endpoint_with_response_stream()
            .endpoint_name(&self.config.endpoint_name)
            .content_type(JSON)
            .accept(JSON)
            .set_target_variant(self.config.target_variant.clone())
            .set_inference_component_name(self.config.inference_component.clone())
            .body(Blob::new(Vec::from(body)));
        let output = tokio::time::timeout_at(started + timeout, request.send())
            .await
            .map_err(|_| ProviderError::Timeout { after: timeout })?
            .map_err(|err| errors::stream_open_error(err, timeout, started))?;
        let events = stream::SdkStreamEvents {
            receiver: output.body,
            idle_timeout: timeout,
            started,
        };
        Ok(stream::payload_bytes(events, timeout))
    }
}
