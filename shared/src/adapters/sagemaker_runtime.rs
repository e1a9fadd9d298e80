//! SageMaker runtime adapter: the transport of `type = "sagemaker"` providers, through the AWS SDK
//! (`InvokeEndpoint`, `InvokeEndpointWithResponseStream`).

use crate::config::SageMakerProviderConfig;
use crate::providers::lmi::{ByteStream, LmiTransport, SageMakerConnector};
use crate::providers::{CallContext, ProviderError};
use async_trait::async_trait;
use bytes::Bytes;
use std::sync::Arc;

/// Opens SageMaker endpoint transports.
#[derive(Debug, Default)]
pub struct SageMakerRuntime {}

impl SageMakerConnector for SageMakerRuntime {
    fn connect(&self, provider: &str, config: &SageMakerProviderConfig) -> Arc<dyn LmiTransport> {
        Arc::new(SageMakerEndpoint {
            provider: provider.to_owned(),
            config: config.clone(),
        })
    }
}

/// One SageMaker endpoint.
#[derive(Debug)]
pub struct SageMakerEndpoint {
    provider: String,
    config: SageMakerProviderConfig,
}

#[async_trait]
impl LmiTransport for SageMakerEndpoint {
    async fn invoke(&self, _body: Bytes, _ctx: CallContext<'_>) -> Result<Bytes, ProviderError> {
        Err(ProviderError::Misconfigured(format!(
            "provider `{}`: endpoint `{}` is not reachable yet",
            self.provider, self.config.endpoint_name
        )))
    }

    async fn invoke_stream(&self, _body: Bytes, _ctx: CallContext<'_>) -> Result<ByteStream, ProviderError> {
        Err(ProviderError::Misconfigured(format!(
            "provider `{}`: endpoint `{}` is not reachable yet",
            self.provider, self.config.endpoint_name
        )))
    }
}
