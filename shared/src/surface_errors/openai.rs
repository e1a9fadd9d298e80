//! The inference domain's errors in OpenAI's envelope: API keys, the inference layer, the function
//! layer, routing and providers. The HTTP routes answer with these, and the batch and async lines
//! written in OpenAI's format carry them, so they sit below both.

use crate::auth::AuthError;
use crate::inference::InferenceError;
use crate::openai::error::ApiError;
use crate::providers::router::{ProviderFailure, RoutingError};
use crate::providers::ProviderError;
use crate::tensorzero::function_calls::{FailureKind, FunctionError};
use crate::user_text::excerpt;
use http::StatusCode;

impl From<AuthError> for ApiError {
    fn from(err: AuthError) -> Self {
        match err {
            AuthError::Missing => Self::new(StatusCode::UNAUTHORIZED, "invalid_request_error", err.to_string())
                .with_code("missing_api_key"),
            AuthError::Invalid => Self::new(StatusCode::UNAUTHORIZED, "invalid_request_error", err.to_string())
                .with_code("invalid_api_key"),
            AuthError::Backend(message) => {
                tracing::error!(%message, "authentication backend failed");
                Self::new(
                    StatusCode::SERVICE_UNAVAILABLE,
                    "server_error",
                    "Authentication is unavailable; try again.",
                )
            }
        }
    }
}

impl From<InferenceError> for ApiError {
    fn from(err: InferenceError) -> Self {
        match err {
            InferenceError::InvalidRequest { message, param, code } => {
                let mut error = Self::invalid_request(message);
                error.param = param;
                error.code = code.map(str::to_owned);
                error
            }
            InferenceError::Routing(routing) => routing.into(),
        }
    }
}

/// TensorZero's OpenAI-compatible routes: the function layer's errors in OpenAI's envelope, with
/// the statuses `/inference` uses.
impl From<FunctionError> for ApiError {
    fn from(err: FunctionError) -> Self {
        let status = function_error_status(&err);
        let kind = match status.as_u16() {
            400 => "invalid_request_error",
            404 => "not_found_error",
            _ => "api_error",
        };
        let error = Self::new(status, kind, err.to_string());
        match err {
            FunctionError::UnknownFunction(_) | FunctionError::UnknownModel(_) => error.with_param("model"),
            _ => error,
        }
    }
}

/// TensorZero's statuses for the function layer (`/inference` and its OpenAI-compatible routes):
/// 400 bad input (an unknown `model_name` too, and when every variant failed for the client's
/// reason, e.g. a missing dynamic credential), 404 unknown functions and variants, 408 when every
/// variant timed out, 502 when they failed otherwise. A pinned variant's failure is the model's
/// error: 400, 408, or 500 for failed providers.
pub(crate) fn function_error_status(error: &FunctionError) -> StatusCode {
    match error {
        FunctionError::InvalidRequest(_) | FunctionError::UnknownModel(_) => StatusCode::BAD_REQUEST,
        FunctionError::UnknownFunction(_) | FunctionError::UnknownVariant { .. } => StatusCode::NOT_FOUND,
        FunctionError::PinnedVariantFailed(failure) => match failure.kind {
            FailureKind::Client => StatusCode::BAD_REQUEST,
            FailureKind::Timeout => StatusCode::REQUEST_TIMEOUT,
            FailureKind::Provider => StatusCode::INTERNAL_SERVER_ERROR,
        },
        FunctionError::AllVariantsFailed(_) => match error.uniform_failure() {
            Some(FailureKind::Client) => StatusCode::BAD_REQUEST,
            Some(FailureKind::Timeout) => StatusCode::REQUEST_TIMEOUT,
            _ => StatusCode::BAD_GATEWAY,
        },
        FunctionError::StreamInterrupted(_) => StatusCode::BAD_GATEWAY,
        FunctionError::Storage(_) => StatusCode::SERVICE_UNAVAILABLE,
    }
}

impl From<RoutingError> for ApiError {
    fn from(err: RoutingError) -> Self {
        match err {
            RoutingError::ModelNotFound(model) => Self::not_found(format!(
                "The model `{}` does not exist or you do not have access to it.",
                excerpt(&model)
            ))
            .with_param("model")
            .with_code("model_not_found"),
            RoutingError::Unsupported { model, capability } => Self::invalid_request(format!(
                "The model `{}` does not support {capability}.",
                excerpt(&model)
            ))
            .with_param("model")
            .with_code("model_not_supported"),
            RoutingError::AllFailed { model, failures } => from_failures(&model, &failures),
        }
    }
}

/// The status that best describes why every provider failed.
fn from_failures(model: &str, failures: &[ProviderFailure]) -> ApiError {
    let detail = failures
        .iter()
        .map(|f| {
            format!(
                "{} ({} attempt{}): {}",
                f.provider,
                f.attempts,
                if f.attempts == 1 { "" } else { "s" },
                f.error
            )
        })
        .collect::<Vec<_>>()
        .join("; ");
    if let Some(name) = failures.iter().find_map(|f| match &f.error {
        ProviderError::MissingCredential(name) => Some(name.clone()),
        _ => None,
    }) {
        let (name, model) = (excerpt(&name), excerpt(model));
        return ApiError::invalid_request(format!(
            "Missing credential `{name}` for model `{model}`: pass it in the request body as `credentials: {{\"{name}\": \"...\"}}`."
        ))
        .with_param("credentials")
        .with_code("missing_credential");
    }
    // An edit the client sent that a provider could not apply: the client's to fix.
    if let Some((param, problem)) = failures.iter().find_map(|f| match &f.error {
        ProviderError::InvalidExtraBody(e) => Some(("extra_body", e.to_string())),
        ProviderError::InvalidExtraHeader(e) => Some(("extra_headers", e.to_string())),
        _ => None,
    }) {
        return ApiError::invalid_request(format!("Invalid '{param}' for model `{}`: {problem}.", excerpt(model)))
            .with_param(param)
            .with_code(format!("invalid_{param}"));
    }
    // Something the request asks that the model's providers cannot do: the client's to fix.
    if failures
        .iter()
        .all(|f| matches!(f.error, ProviderError::UnsupportedParameter { .. }))
    {
        if let Some(ProviderError::UnsupportedParameter { param, message }) = failures.first().map(|f| &f.error) {
            return ApiError::invalid_request(format!(
                "Model `{}` does not support `{param}`: {message}",
                excerpt(model)
            ))
            .with_param(param.clone())
            .with_code("unsupported_parameter");
        }
    }
    let last = failures.last().map(|f| &f.error);
    // A request the provider called invalid is the client's to fix.
    if let Some(ProviderError::Http { status, message, .. }) = last {
        if matches!(status, 400 | 413 | 422) {
            let status = StatusCode::from_u16(*status).unwrap_or(StatusCode::BAD_REQUEST);
            return ApiError::new(status, "invalid_request_error", message.clone());
        }
    }
    let all_timeouts = !failures.is_empty()
        && failures
            .iter()
            .all(|f| matches!(f.error, ProviderError::Timeout { .. }));
    let (status, code) = if all_timeouts {
        (StatusCode::GATEWAY_TIMEOUT, "provider_timeout")
    } else {
        (StatusCode::BAD_GATEWAY, "provider_error")
    };
    let mut error = ApiError::new(
        status,
        "server_error",
        format!("All providers for model `{}` failed: {detail}", excerpt(model)),
    )
    .with_code(code);
    error.no_client_retry = true;
    error
}

impl From<ProviderError> for ApiError {
    /// An error in the middle of a stream.
    fn from(err: ProviderError) -> Self {
        let status = match err {
            ProviderError::Timeout { .. } => StatusCode::GATEWAY_TIMEOUT,
            _ => StatusCode::BAD_GATEWAY,
        };
        ApiError::new(status, "server_error", err.to_string()).with_code("provider_error")
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    fn failure(error: ProviderError) -> ProviderFailure {
        ProviderFailure {
            provider: "p".into(),
            attempts: 3,
            error,
        }
    }

    #[test]
    fn routing_errors_map_to_statuses() {
        let cases = [
            (RoutingError::ModelNotFound("m".into()), StatusCode::NOT_FOUND),
            (
                RoutingError::Unsupported {
                    model: "m".into(),
                    capability: "embeddings",
                },
                StatusCode::BAD_REQUEST,
            ),
            (
                RoutingError::AllFailed {
                    model: "m".into(),
                    failures: vec![failure(ProviderError::Http {
                        status: 500,
                        message: "boom".into(),
                        retry_after: None,
                        body: None,
                    })],
                },
                StatusCode::BAD_GATEWAY,
            ),
            (
                RoutingError::AllFailed {
                    model: "m".into(),
                    failures: vec![failure(ProviderError::Timeout {
                        after: Duration::from_secs(1),
                    })],
                },
                StatusCode::GATEWAY_TIMEOUT,
            ),
            (
                RoutingError::AllFailed {
                    model: "m".into(),
                    failures: vec![failure(ProviderError::Http {
                        status: 422,
                        message: "bad arg".into(),
                        retry_after: None,
                        body: None,
                    })],
                },
                StatusCode::UNPROCESSABLE_ENTITY,
            ),
            (
                RoutingError::AllFailed {
                    model: "m".into(),
                    failures: vec![failure(ProviderError::MissingCredential("k".into()))],
                },
                StatusCode::BAD_REQUEST,
            ),
        ];
        for (err, status) in cases {
            assert_eq!(ApiError::from(err.clone()).status, status, "{err:?}");
        }
    }

    #[test]
    fn an_extra_body_edit_that_cannot_apply_is_a_400_naming_extra_body() {
        use crate::model::{ExtraBodyError, ExtraHeaderError};
        let err = ApiError::from(RoutingError::AllFailed {
            model: "m".into(),
            failures: vec![
                failure(ProviderError::Http {
                    status: 503,
                    message: "down".into(),
                    retry_after: None,
                    body: None,
                }),
                failure(ProviderError::InvalidExtraBody(ExtraBodyError::NotAContainer(
                    "/messages/x".into(),
                ))),
            ],
        });
        assert_eq!(err.status, StatusCode::BAD_REQUEST);
        assert_eq!(err.param.as_deref(), Some("extra_body"));
        assert_eq!(err.code.as_deref(), Some("invalid_extra_body"));
        assert!(err.message.contains("/messages/x"), "{}", err.message);
        let err = ApiError::from(RoutingError::AllFailed {
            model: "m".into(),
            failures: vec![failure(ProviderError::InvalidExtraHeader(
                ExtraHeaderError::InvalidName("a b".into()),
            ))],
        });
        assert_eq!(err.status, StatusCode::BAD_REQUEST);
        assert_eq!(err.param.as_deref(), Some("extra_headers"));
    }

    #[test]
    fn provider_failures_keep_the_provider_message_and_stop_sdk_retries() {
        let err = ApiError::from(RoutingError::AllFailed {
            model: "m".into(),
            failures: vec![failure(ProviderError::Http {
                status: 503,
                message: "overloaded".into(),
                retry_after: None,
                body: None,
            })],
        });
        assert!(err.message.contains("overloaded"));
        assert!(err.no_client_retry);
    }

    #[test]
    fn model_not_found_has_code_and_param() {
        let err = ApiError::from(RoutingError::ModelNotFound("x".into()));
        assert_eq!(err.code.as_deref(), Some("model_not_found"));
        assert_eq!(err.param.as_deref(), Some("model"));
    }

    #[test]
    fn function_errors_map_to_tensorzero_statuses() {
        use crate::tensorzero::function_calls::VariantFailure;
        let failure = |kind| VariantFailure {
            variant: "v".into(),
            kind,
            message: "boom".into(),
        };
        let cases = [
            (FunctionError::UnknownModel("m".into()), StatusCode::BAD_REQUEST),
            (FunctionError::UnknownFunction("f".into()), StatusCode::NOT_FOUND),
            (
                FunctionError::variants_failed(false, vec![failure(FailureKind::Provider)]),
                StatusCode::BAD_GATEWAY,
            ),
            (
                FunctionError::variants_failed(true, vec![failure(FailureKind::Provider)]),
                StatusCode::INTERNAL_SERVER_ERROR,
            ),
            (
                FunctionError::variants_failed(true, vec![failure(FailureKind::Client)]),
                StatusCode::BAD_REQUEST,
            ),
            (
                FunctionError::variants_failed(true, vec![failure(FailureKind::Timeout)]),
                StatusCode::REQUEST_TIMEOUT,
            ),
        ];
        for (error, status) in cases {
            assert_eq!(function_error_status(&error), status, "{error:?}");
        }
        assert!(FunctionError::UnknownModel("m".into())
            .to_string()
            .contains("not found in the model table"));
    }
}
