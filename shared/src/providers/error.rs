//! What can go wrong when calling a provider.

use crate::model::{ExtraBodyError, ExtraHeaderError};
use std::time::Duration;

#[derive(Debug, Clone, thiserror::Error, PartialEq)]
pub enum ProviderError {
    /// The provider answered with an HTTP error status.
    #[error("provider answered HTTP {status}: {message}")]
    Http {
        status: u16,
        message: String,
        /// From `retry-after-ms` / `retry-after`.
        retry_after: Option<Duration>,
        /// The error body as the provider sent it, when it was JSON (batch error lines keep it).
        body: Option<serde_json::Value>,
    },
    /// No (complete) answer within the configured timeout.
    #[error("provider timed out after {} ms", .after.as_millis())]
    Timeout { after: Duration },
    /// Could not connect, or the connection broke.
    #[error("connection to provider failed: {0}")]
    Connection(String),
    /// The provider answered 2xx with something that is not a valid answer.
    #[error("provider sent an invalid response: {0}")]
    InvalidResponse(String),
    /// A `dynamic::NAME` credential was not supplied with the request.
    #[error("missing dynamic credential `{0}`: pass it in the request body's `credentials` object")]
    MissingCredential(String),
    /// The provider cannot be called as configured (e.g. an `env::` credential is not set, or
    /// an `ssm::` parameter does not exist).
    #[error("{0}")]
    Misconfigured(String),
    /// The provider's key could not be read from the parameter store just now (throttled,
    /// unreachable): retried like a connection failure, and read again on the next request.
    #[error("{0}")]
    KeyUnavailable(String),
    /// An `extra_body` entry sent with the request cannot be applied to this provider's body.
    #[error("{0}")]
    InvalidExtraBody(ExtraBodyError),
    /// An `extra_headers` entry sent with the request is not a valid HTTP header.
    #[error("{0}")]
    InvalidExtraHeader(ExtraHeaderError),
    /// The request asks for something this provider cannot do (e.g. tools on a prompt-only LMI
    /// model, or an OpenAI parameter with no equivalent): the client's to fix, named by `param`.
    #[error("`{param}` is not supported by this provider: {message}")]
    UnsupportedParameter { param: String, message: String },
}

impl ProviderError {
    /// Worth another attempt at the same provider: 408, 409, 429, 5xx, connection failures and a
    /// key the parameter store could not give just now.
    pub fn is_retryable(&self) -> bool {
        match self {
            Self::Http { status, .. } => matches!(status, 408 | 409 | 429) || *status >= 500,
            Self::Connection(_) | Self::KeyUnavailable(_) => true,
            Self::Timeout { .. }
            | Self::InvalidResponse(_)
            | Self::MissingCredential(_)
            | Self::Misconfigured(_)
            | Self::InvalidExtraBody(_)
            | Self::InvalidExtraHeader(_)
            | Self::UnsupportedParameter { .. } => false,
        }
    }

    pub fn retry_after(&self) -> Option<Duration> {
        match self {
            Self::Http { retry_after, .. } => *retry_after,
            _ => None,
        }
    }
}
