//! Errors of the TensorZero-style routes (`/inference`, `/feedback`, the records routes) in
//! TensorZero's shape: a status and the body `{"error": "<message>"}`. The OpenAI routes keep
//! the envelope of [`ApiError`]; this is the one place TensorZero-route errors are mapped.

use super::error::ApiError;
use super::json_body::JsonBody;
use crate::batches::BatchInferenceError;
use crate::ports::StorageError;
use crate::surface_errors::openai::function_error_status;
use crate::tensorzero::dicl::DiclBuildError;
use crate::tensorzero::feedback::FeedbackError;
use crate::tensorzero::function_calls::FunctionError;
use axum::extract::{FromRequest, Request};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use serde::de::DeserializeOwned;
use serde_json::json;

/// A TensorZero-style error response.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct TensorZeroError {
    pub status: StatusCode,
    pub message: String,
}

impl TensorZeroError {
    pub fn new(status: StatusCode, message: impl Into<String>) -> Self {
        Self {
            status,
            message: message.into(),
        }
    }

    pub(crate) fn bad_request(message: impl Into<String>) -> Self {
        Self::new(StatusCode::BAD_REQUEST, message)
    }

    pub fn not_found(message: impl Into<String>) -> Self {
        Self::new(StatusCode::NOT_FOUND, message)
    }

    #[cfg(test)]
    pub(crate) fn bad_gateway(message: impl Into<String>) -> Self {
        Self::new(StatusCode::BAD_GATEWAY, message)
    }

    #[cfg(test)]
    pub(crate) fn gateway_timeout(message: impl Into<String>) -> Self {
        Self::new(StatusCode::GATEWAY_TIMEOUT, message)
    }

    pub fn internal(message: impl Into<String>) -> Self {
        Self::new(StatusCode::INTERNAL_SERVER_ERROR, message)
    }

    /// The body, also usable as an error event inside a stream.
    pub fn body(&self) -> serde_json::Value {
        let body = TensorZeroErrorBody {
            error: self.message.clone(),
        };
        serde_json::to_value(body).unwrap_or_else(|_| json!({"error": self.message}))
    }
}

/// TensorZero's error body: `{"error": "<message>"}`.
#[derive(Debug, Clone, serde::Serialize, utoipa::ToSchema)]
#[schema(as = TensorZeroError)]
pub(crate) struct TensorZeroErrorBody {
    pub error: String,
}

impl IntoResponse for TensorZeroError {
    fn into_response(self) -> Response {
        if self.status.is_server_error() {
            tracing::warn!(status = %self.status, error = %self.message, "tensorzero request failed");
        }
        (self.status, axum::Json(self.body())).into_response()
    }
}

/// An OpenAI-envelope error (an extractor's rejection: a bad body, path or query) with the same
/// status and message.
impl From<ApiError> for TensorZeroError {
    fn from(err: ApiError) -> Self {
        Self::new(err.status, err.message)
    }
}

impl From<StorageError> for TensorZeroError {
    fn from(err: StorageError) -> Self {
        tracing::error!(error = %err, "storage failed");
        Self::internal("The request could not be completed because storage failed; try again.")
    }
}

impl From<BatchInferenceError> for TensorZeroError {
    fn from(err: BatchInferenceError) -> Self {
        match err {
            BatchInferenceError::Function(function) => function.into(),
            BatchInferenceError::BatchNotFound(_) | BatchInferenceError::InferenceNotFound { .. } => {
                Self::not_found(err.to_string())
            }
            BatchInferenceError::Storage(storage) => storage.into(),
        }
    }
}

impl From<FeedbackError> for TensorZeroError {
    fn from(err: FeedbackError) -> Self {
        match err {
            FeedbackError::Invalid(message) => Self::bad_request(message),
            FeedbackError::UnknownMetric(_) | FeedbackError::TargetNotFound { .. } => Self::not_found(err.to_string()),
            FeedbackError::Storage(storage) => storage.into(),
        }
    }
}

impl From<DiclBuildError> for TensorZeroError {
    fn from(err: DiclBuildError) -> Self {
        match err {
            DiclBuildError::Invalid(message) => Self::bad_request(message),
            DiclBuildError::NotFound(message) => Self::not_found(message),
            DiclBuildError::Exists { .. } => Self::new(StatusCode::CONFLICT, err.to_string()),
            DiclBuildError::Embedding(_) => Self::new(StatusCode::BAD_GATEWAY, err.to_string()),
            DiclBuildError::Storage(storage) => storage.into(),
        }
    }
}

/// The function layer's errors with TensorZero's statuses ([`function_error_status`]).
impl From<FunctionError> for TensorZeroError {
    fn from(error: FunctionError) -> Self {
        Self::new(function_error_status(&error), error.to_string())
    }
}

/// A JSON body read like [`JsonBody`] (malformed JSON, wrong types, missing and unknown fields
/// named), rejected as a [`TensorZeroError`].
pub(crate) struct TensorZeroJson<T>(pub T);

impl<S, T> FromRequest<S> for TensorZeroJson<T>
where
    S: Send + Sync,
    T: DeserializeOwned,
{
    type Rejection = TensorZeroError;

    async fn from_request(request: Request, state: &S) -> Result<Self, Self::Rejection> {
        let body = JsonBody::<T>::from_request(request, state).await?;
        Ok(Self(body.typed))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use uuid::Uuid;

    #[test]
    fn statuses_and_body_shape() {
        let cases = [
            (TensorZeroError::bad_request("b"), StatusCode::BAD_REQUEST),
            (TensorZeroError::not_found("n"), StatusCode::NOT_FOUND),
            (TensorZeroError::bad_gateway("g"), StatusCode::BAD_GATEWAY),
            (TensorZeroError::gateway_timeout("t"), StatusCode::GATEWAY_TIMEOUT),
            (TensorZeroError::internal("i"), StatusCode::INTERNAL_SERVER_ERROR),
        ];
        for (err, status) in cases {
            assert_eq!(err.status, status);
            assert_eq!(err.body(), json!({"error": err.message}));
        }
    }

    #[test]
    fn feedback_errors_map_to_400_404_500() {
        let id = Uuid::now_v7();
        let cases = [
            (FeedbackError::Invalid("x".into()), StatusCode::BAD_REQUEST),
            (FeedbackError::UnknownMetric("m".into()), StatusCode::NOT_FOUND),
            (
                FeedbackError::TargetNotFound {
                    target: crate::ports::inference_records::FeedbackTarget::Inference,
                    id,
                },
                StatusCode::NOT_FOUND,
            ),
            (
                FeedbackError::Storage(StorageError::Backend("disk on fire".into())),
                StatusCode::INTERNAL_SERVER_ERROR,
            ),
        ];
        for (err, status) in cases {
            let mapped = TensorZeroError::from(err.clone());
            assert_eq!(mapped.status, status, "{err:?}");
            assert!(
                !mapped.message.contains("disk on fire"),
                "storage details stay in the logs"
            );
        }
    }
}
