//! What a call to a model provider carries besides the model request, and how it fails: the
//! vocabulary shared by the providers and the transports adapters give them (`lmi_transport`).

use crate::model::{ExtraBodyError, ExtraHeaderError};
use serde_json::Value;
use std::collections::HashMap;
use std::time::Duration;

/// Per-call inputs that are not part of the model request.
#[derive(Debug, Clone, Copy)]
pub struct CallContext<'a> {
    /// `dynamic::NAME` credentials supplied with this request.
    pub credentials: &'a HashMap<String, String>,
}

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

/// What a failure says about trying again: the one classification behind every retry of a model
/// call, the router's (the same request, at once, at the same provider) and an async request's (a
/// new run, later).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Recovery {
    /// Another attempt may succeed at once: throttling (429), 408, 409, a server error (5xx but
    /// 501 and 505, which say the request can never work there), a broken connection, a key the
    /// parameter store could not give just now.
    Transient,
    /// The call ran out of the time it was given: another attempt may succeed with the time again,
    /// so not within the budget the first one used up (the router does not retry it; an async
    /// request's next run does).
    TimedOut,
    /// The same request fails again: the client's to fix, or the gateway's configuration.
    Final,
}

impl Recovery {
    /// An upstream's HTTP error status.
    pub(crate) fn of_status(status: u16) -> Self {
        match status {
            408 | 409 | 429 => Self::Transient,
            501 | 505 => Self::Final,
            500..=599 => Self::Transient,
            _ => Self::Final,
        }
    }
}

impl ProviderError {
    /// Whether, and when, another attempt may succeed.
    pub fn recovery(&self) -> Recovery {
        match self {
            Self::Http { status, .. } => Recovery::of_status(*status),
            Self::Connection(_) | Self::KeyUnavailable(_) => Recovery::Transient,
            Self::Timeout { .. } => Recovery::TimedOut,
            Self::InvalidResponse(_)
            | Self::MissingCredential(_)
            | Self::Misconfigured(_)
            | Self::InvalidExtraBody(_)
            | Self::InvalidExtraHeader(_)
            | Self::UnsupportedParameter { .. } => Recovery::Final,
        }
    }

    /// Worth another attempt at the same provider within the same request: [`Recovery::Transient`].
    pub(crate) fn is_retryable(&self) -> bool {
        self.recovery() == Recovery::Transient
    }

    pub fn retry_after(&self) -> Option<Duration> {
        match self {
            Self::Http { retry_after, .. } => *retry_after,
            _ => None,
        }
    }
}

/// The message of an error body: a string `error`, `error.message` (OpenAI's envelope), or a
/// top-level `message` (LMI's dynamic-batch errors).
pub(crate) fn upstream_error_message(body: &Value) -> Option<String> {
    let error = body.get("error");
    error
        .and_then(Value::as_str)
        .or_else(|| error.and_then(|e| e.get("message")).and_then(Value::as_str))
        .or_else(|| body.get("message").and_then(Value::as_str))
        .map(str::to_owned)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn http(status: u16) -> ProviderError {
        ProviderError::Http {
            status,
            message: String::new(),
            retry_after: None,
            body: None,
        }
    }

    #[test]
    fn statuses_are_transient_or_final() {
        for status in [408, 409, 429, 500, 502, 503, 504, 530, 599] {
            assert_eq!(http(status).recovery(), Recovery::Transient, "{status}");
            assert!(http(status).is_retryable(), "{status}");
        }
        for status in [400, 401, 403, 404, 413, 422, 424, 501, 505] {
            assert_eq!(http(status).recovery(), Recovery::Final, "{status}");
            assert!(!http(status).is_retryable(), "{status}");
        }
    }

    #[test]
    fn a_timeout_is_retried_later_never_within_the_request() {
        let timeout = ProviderError::Timeout {
            after: Duration::from_secs(1),
        };
        assert_eq!(timeout.recovery(), Recovery::TimedOut);
        assert!(!timeout.is_retryable());
        assert_eq!(
            ProviderError::Connection("reset".into()).recovery(),
            Recovery::Transient
        );
        assert_eq!(
            ProviderError::KeyUnavailable("throttled".into()).recovery(),
            Recovery::Transient
        );
        assert_eq!(ProviderError::InvalidResponse("x".into()).recovery(), Recovery::Final);
    }

    #[test]
    fn error_messages_are_read_from_every_shape() {
        assert_eq!(upstream_error_message(&json!({"error": "bad"})).as_deref(), Some("bad"));
        assert_eq!(
            upstream_error_message(&json!({"error": {"message": "nested"}})).as_deref(),
            Some("nested")
        );
        assert_eq!(
            upstream_error_message(&json!({"message": "top"})).as_deref(),
            Some("top")
        );
        assert_eq!(upstream_error_message(&json!({"generated_text": "x"})), None);
    }
}
