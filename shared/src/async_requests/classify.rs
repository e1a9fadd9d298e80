//! Why a run failed, in Baseten's error codes, and whether it is worth another attempt: a model's
//! failure is retried unless [`Recovery`] calls it final (5xx but 501 and 505, 408, 409, 429 after
//! the wait the provider asked for, timeouts and connection errors are retried); every other
//! failure is final at once.

use super::stored::ErrorEntry;
use crate::inference::InferenceError;
use crate::openai::error::ApiError;
use crate::ports::provider_call::Recovery;
use crate::providers::router::RoutingError;
use crate::providers::ProviderError;
use crate::tensorzero::function_calls::{FailureKind, FunctionError};
use std::time::Duration;

pub(crate) const MODEL_DOES_NOT_EXIST: &str = "MODEL_DOES_NOT_EXIST";
pub(crate) const MODEL_INVALID_INPUT: &str = "MODEL_INVALID_INPUT";
pub(crate) const MODEL_PREDICT_ERROR: &str = "MODEL_PREDICT_ERROR";
pub(crate) const MODEL_UNAVAILABLE: &str = "MODEL_UNAVAILABLE";
pub(crate) const MODEL_PREDICT_TIMEOUT: &str = "MODEL_PREDICT_TIMEOUT";
/// Not started within `max_time_in_queue_seconds`.
pub(crate) const ASYNC_REQUEST_EXPIRED: &str = "ASYNC_REQUEST_EXPIRED";
/// The API key that submitted it was revoked before it ran.
pub(crate) const API_KEY_REVOKED: &str = "API_KEY_REVOKED";
/// Canceled by its caller while queued.
pub(crate) const ASYNC_REQUEST_CANCELED: &str = "ASYNC_REQUEST_CANCELED";

/// A failed run: its error, whether another attempt may succeed, and how long the model asked
/// us to wait first.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct RunFailure {
    pub error: ErrorEntry,
    pub retryable: bool,
    pub retry_after: Option<Duration>,
}

impl RunFailure {
    pub fn new(code: &str, message: impl Into<String>, retryable: bool) -> Self {
        Self {
            error: ErrorEntry {
                code: code.to_owned(),
                message: message.into(),
            },
            retryable,
            retry_after: None,
        }
    }
}

/// Baseten's code for an HTTP status a model answered.
fn code_of_status(status: u16) -> &'static str {
    match status {
        404 => MODEL_DOES_NOT_EXIST,
        409 | 429 | 502 | 503 => MODEL_UNAVAILABLE,
        408 | 504 => MODEL_PREDICT_TIMEOUT,
        400..=499 => MODEL_INVALID_INPUT,
        _ => MODEL_PREDICT_ERROR,
    }
}

/// Baseten's code for the last provider failure of a run.
fn code_of_provider_error(error: &ProviderError) -> &'static str {
    match error {
        ProviderError::Http { status, .. } => code_of_status(*status),
        ProviderError::Timeout { .. } => MODEL_PREDICT_TIMEOUT,
        ProviderError::Connection(_) | ProviderError::KeyUnavailable(_) => MODEL_UNAVAILABLE,
        ProviderError::InvalidResponse(_) => MODEL_PREDICT_ERROR,
        _ => MODEL_INVALID_INPUT,
    }
}

/// A chat or embeddings run that failed in the inference layer.
pub(crate) fn inference_failure(error: InferenceError) -> RunFailure {
    let (code, retryable, retry_after) = match &error {
        InferenceError::InvalidRequest { .. } => (MODEL_INVALID_INPUT, false, None),
        InferenceError::Routing(RoutingError::ModelNotFound(_)) => (MODEL_DOES_NOT_EXIST, false, None),
        InferenceError::Routing(RoutingError::Unsupported { .. }) => (MODEL_INVALID_INPUT, false, None),
        // Retried unless the last failure is final (the one rule of `Recovery`): a timeout too,
        // since the next run has the time again.
        InferenceError::Routing(RoutingError::AllFailed { failures, .. }) => match failures.last().map(|f| &f.error) {
            Some(last) => (
                code_of_provider_error(last),
                last.recovery() != Recovery::Final,
                last.retry_after(),
            ),
            None => (MODEL_PREDICT_ERROR, false, None),
        },
    };
    RunFailure {
        error: ErrorEntry {
            code: code.to_owned(),
            message: ApiError::from(error).message,
        },
        retryable,
        retry_after,
    }
}

/// An `/inference` run that failed in the function layer.
pub(crate) fn function_failure(error: &FunctionError) -> RunFailure {
    let (code, retryable) = match error {
        FunctionError::InvalidRequest(_) => (MODEL_INVALID_INPUT, false),
        FunctionError::UnknownFunction(_) | FunctionError::UnknownVariant { .. } | FunctionError::UnknownModel(_) => {
            (MODEL_DOES_NOT_EXIST, false)
        }
        FunctionError::AllVariantsFailed(_) | FunctionError::PinnedVariantFailed(_) => match error.uniform_failure() {
            Some(FailureKind::Client) => (MODEL_INVALID_INPUT, false),
            Some(FailureKind::Timeout) => (MODEL_PREDICT_TIMEOUT, true),
            _ => (MODEL_UNAVAILABLE, true),
        },
        FunctionError::StreamInterrupted(_) | FunctionError::Storage(_) => (MODEL_PREDICT_ERROR, true),
    };
    RunFailure::new(code, error.to_string(), retryable)
}

/// A request the gateway refused before any model ran (its `model_input` no longer parses).
pub(crate) fn refused(error: ApiError) -> RunFailure {
    RunFailure::new(code_of_status(error.status.as_u16()), error.message, false)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::providers::router::ProviderFailure;

    fn failed(error: ProviderError) -> RunFailure {
        inference_failure(InferenceError::Routing(RoutingError::AllFailed {
            model: "m".into(),
            failures: vec![ProviderFailure {
                provider: "p".into(),
                attempts: 1,
                error,
            }],
        }))
    }

    fn http(status: u16) -> ProviderError {
        ProviderError::Http {
            status,
            message: format!("said {status}"),
            retry_after: Some(Duration::from_secs(7)),
            body: None,
        }
    }

    #[test]
    fn the_router_and_async_runs_share_one_rule() {
        // 408 and 409 are retried by the router; a run that ends on one is retried later too.
        for (status, code) in [
            (408, MODEL_PREDICT_TIMEOUT),
            (409, MODEL_UNAVAILABLE),
            (530, MODEL_PREDICT_ERROR),
        ] {
            let failure = failed(http(status));
            assert!(http(status).is_retryable(), "{status}");
            assert_eq!(
                (failure.error.code.as_str(), failure.retryable),
                (code, true),
                "{status}"
            );
        }
        // 501 is final for both.
        assert!(!http(501).is_retryable());
        assert!(!failed(http(501)).retryable);
    }

    #[test]
    fn only_server_errors_timeouts_and_connection_failures_are_retried() {
        for (status, code, retryable) in [
            (500, MODEL_PREDICT_ERROR, true),
            (502, MODEL_UNAVAILABLE, true),
            (503, MODEL_UNAVAILABLE, true),
            (504, MODEL_PREDICT_TIMEOUT, true),
            (429, MODEL_UNAVAILABLE, true),
            (400, MODEL_INVALID_INPUT, false),
            (422, MODEL_INVALID_INPUT, false),
            (404, MODEL_DOES_NOT_EXIST, false),
            (501, MODEL_PREDICT_ERROR, false),
        ] {
            let failure = failed(http(status));
            assert_eq!(
                (failure.error.code.as_str(), failure.retryable),
                (code, retryable),
                "{status}"
            );
        }
        assert_eq!(failed(http(429)).retry_after, Some(Duration::from_secs(7)));
        let timeout = failed(ProviderError::Timeout {
            after: Duration::from_secs(1),
        });
        assert_eq!(
            (timeout.error.code.as_str(), timeout.retryable),
            (MODEL_PREDICT_TIMEOUT, true)
        );
        let connection = failed(ProviderError::Connection("refused".into()));
        assert!(connection.retryable);
        let missing = inference_failure(InferenceError::Routing(RoutingError::ModelNotFound("x".into())));
        assert_eq!(
            (missing.error.code.as_str(), missing.retryable),
            (MODEL_DOES_NOT_EXIST, false)
        );
    }
}
