//! How an LMI body reaches a container: the port the LMI provider talks to.

use crate::model::ExtraHeaderEntry;
use crate::providers::{CallContext, ProviderError};
use async_trait::async_trait;
use bytes::Bytes;
use futures::stream::BoxStream;

/// The answer's bytes as they arrive, split anywhere (not on line boundaries); an `Err` item ends it.
pub type ByteStream = BoxStream<'static, Result<Bytes, ProviderError>>;

/// Carries a JSON body to an LMI container and its answer back. A non-2xx answer (or SageMaker's
/// `ModelError`) is a [`ProviderError::Http`] with the container's own status and message.
///
/// `headers` are the request's extra headers (all of them: the transport picks those that apply to
/// its provider). A transport that cannot send free-form headers refuses applicable ones with
/// [`ProviderError::UnsupportedParameter`] naming `extra_headers`.
#[async_trait]
pub trait LmiTransport: Send + Sync + std::fmt::Debug {
    /// POST `body`; the whole answer.
    async fn invoke(
        &self,
        body: Bytes,
        headers: &[ExtraHeaderEntry],
        ctx: CallContext<'_>,
    ) -> Result<Bytes, ProviderError>;
    /// POST `body` (which asks for a stream); the answer's bytes as they come.
    async fn invoke_stream(
        &self,
        body: Bytes,
        headers: &[ExtraHeaderEntry],
        ctx: CallContext<'_>,
    ) -> Result<ByteStream, ProviderError>;

    /// The environment variable holding the key this transport sends, when it is not set.
    fn missing_env_key(&self) -> Option<&str> {
        None
    }
}

/// Opens the transport of a `type = "sagemaker"` provider. The router is given one at start-up
/// (the AWS SDK adapter), so that providers never see SDK types.
pub trait SageMakerConnector: Send + Sync + std::fmt::Debug {
    /// The transport to the endpoint `config` names, for the provider called `provider`.
    fn connect(
        &self,
        provider: &str,
        config: &crate::config::SageMakerProviderConfig,
    ) -> std::sync::Arc<dyn LmiTransport>;
}
