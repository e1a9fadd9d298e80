//! How an LMI body reaches a container: the port the LMI provider talks to, over HTTP
//! (`providers::lmi::HttpLmiTransport`) or a SageMaker endpoint (the SDK adapter
//! `adapters::sagemaker_runtime`, opened by a [`SageMakerConnector`]).

use super::provider_call::{CallContext, ProviderError};
use crate::model::ExtraHeaderEntry;
use async_trait::async_trait;
use bytes::Bytes;
use futures::stream::BoxStream;
use std::sync::Arc;
use std::time::Duration;

/// The status reported for a generation LMI ended with `finish_reason: "error"` (on a 200), for an
/// error object without a usable `code`, and for a SageMaker `ModelError` without
/// `OriginalStatusCode`: LMI's own status for a failed invocation.
pub(crate) const MODEL_ERROR_STATUS: u16 = 424;

/// The answer's bytes as they arrive, split anywhere (not on line boundaries); an `Err` item ends it.
pub(crate) type LmiByteStream = BoxStream<'static, Result<Bytes, ProviderError>>;

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
    ) -> Result<LmiByteStream, ProviderError>;

    /// The environment variable holding the key this transport sends, when it is not set.
    fn missing_env_key(&self) -> Option<&str> {
        None
    }
}

/// The SageMaker endpoint a `type = "sagemaker"` provider calls, as its configuration names it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SageMakerEndpoint {
    pub endpoint_name: String,
    /// The endpoint's region, when not the environment's.
    pub region: Option<String>,
    pub target_variant: Option<String>,
    pub inference_component: Option<String>,
    /// The `Accept` of a streamed call: LMI's JSON lines, or TGI's server-sent events.
    pub stream_accept: &'static str,
    /// Bounds a whole call, and each wait between the parts of a stream.
    pub timeout: Duration,
}

/// Opens the transport of a `type = "sagemaker"` provider. The router is given one at start-up
/// (the AWS SDK adapter), so that providers never see SDK types.
pub trait SageMakerConnector: Send + Sync + std::fmt::Debug {
    /// The transport to `endpoint`, for the provider called `provider`.
    fn connect(&self, provider: &str, endpoint: &SageMakerEndpoint) -> Arc<dyn LmiTransport>;
}
