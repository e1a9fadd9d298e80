//! The OpenAI error value ([`ApiError`], `crate::openai::error`) as an HTTP response, and axum's
//! extractor rejections mapped to it.

pub use crate::openai::error::ApiError;
use crate::user_text::excerpt;
use axum::extract::path::ErrorKind as PathErrorKind;
use axum::extract::rejection::{ExtensionRejection, PathRejection, QueryRejection};
use axum::http::HeaderValue;
use axum::response::{IntoResponse, Response};

/// The message of the [`ApiError`] a response was rendered from, kept as a response extension so
/// that another API surface (TensorZero's routes) can render the same error in its own shape.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct ApiErrorMessage(pub String);

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let mut response = (self.status, axum::Json(self.envelope())).into_response();
        if self.no_client_retry {
            response
                .headers_mut()
                .insert("x-should-retry", HeaderValue::from_static("false"));
        }
        response.extensions_mut().insert(ApiErrorMessage(self.message));
        response
    }
}

impl From<PathRejection> for ApiError {
    fn from(rejection: PathRejection) -> Self {
        let PathRejection::FailedToDeserializePathParams(failed) = rejection else {
            tracing::error!(%rejection, "a route has no path parameters");
            return Self::internal("The request could not be routed.");
        };
        let in_path = |key: &str, problem: String| {
            Self::invalid_request(format!("Invalid '{}' in the URL path: {problem}", excerpt(key)))
                .with_param(excerpt(key))
                .with_code("invalid_path_parameter")
        };
        match failed.into_kind() {
            PathErrorKind::InvalidUtf8InPathParam { key } => {
                in_path(&key, "it is not valid UTF-8 once percent-decoded.".to_owned())
            }
            PathErrorKind::ParseErrorAtKey {
                key,
                value,
                expected_type,
            } => in_path(&key, format!("'{}' is not a valid {expected_type}.", excerpt(&value))),
            PathErrorKind::DeserializeError { key, value, .. } => {
                in_path(&key, format!("'{}' is not valid here.", excerpt(&value)))
            }
            kind @ (PathErrorKind::WrongNumberOfParameters { .. } | PathErrorKind::UnsupportedType { .. }) => {
                tracing::error!(%kind, "a route's path parameters do not fit its handler");
                Self::internal("The request could not be routed.")
            }
            _ => Self::invalid_request("Invalid URL path: a path parameter could not be read.")
                .with_code("invalid_path_parameter"),
        }
    }
}

impl From<QueryRejection> for ApiError {
    fn from(rejection: QueryRejection) -> Self {
        tracing::debug!(%rejection, "query string rejected");
        Self::invalid_request("Invalid query string: it could not be read as name=value pairs.")
            .with_code("invalid_query_string")
    }
}

impl From<ExtensionRejection> for ApiError {
    fn from(rejection: ExtensionRejection) -> Self {
        tracing::error!(%rejection, "a request extension is missing");
        Self::internal("The request could not be completed; try again.")
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::providers::router::{ProviderFailure, RoutingError};
    use crate::providers::ProviderError;

    #[test]
    fn provider_failures_stop_sdk_retries() {
        let err = ApiError::from(RoutingError::AllFailed {
            model: "m".into(),
            failures: vec![ProviderFailure {
                provider: "p".into(),
                attempts: 3,
                error: ProviderError::Http {
                    status: 503,
                    message: "overloaded".into(),
                    retry_after: None,
                    body: None,
                },
            }],
        });
        let response = err.into_response();
        assert_eq!(response.headers()["x-should-retry"], "false");
        let plain = ApiError::invalid_request("bad").into_response();
        assert!(plain.headers().get("x-should-retry").is_none());
    }
}
