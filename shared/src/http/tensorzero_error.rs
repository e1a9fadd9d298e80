//! Errors on TensorZero's surface (`/inference`, `/feedback`, records): `{"error": "<message>"}`
//! with TensorZero's statuses. Every mapping to it lives here.

use crate::functions::inference::{FailureKind, FunctionError};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::Json;
use serde_json::json;

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TensorZeroError {
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

    pub fn bad_request(message: impl Into<String>) -> Self {
        Self::new(StatusCode::BAD_REQUEST, message)
    }

    pub fn not_found(message: impl Into<String>) -> Self {
        Self::new(StatusCode::NOT_FOUND, message)
    }

    pub fn internal(message: impl Into<String>) -> Self {
        Self::new(StatusCode::INTERNAL_SERVER_ERROR, message)
    }

    /// The body of the error, also used as a mid-stream error event.
    pub fn body(&self) -> serde_json::Value {
        json!({ "error": self.message })
    }
}

impl IntoResponse for TensorZeroError {
    fn into_response(self) -> Response {
        if self.status.is_server_error() {
            tracing::warn!(status = %self.status, error = %self.message, "tensorzero request failed");
        }
        (self.status, Json(self.body())).into_response()
    }
}

impl From<FunctionError> for TensorZeroError {
    fn from(error: FunctionError) -> Self {
        let status = match &error {
            FunctionError::InvalidRequest(_) => StatusCode::BAD_REQUEST,
            FunctionError::UnknownFunction(_)
            | FunctionError::UnknownVariant { .. }
            | FunctionError::UnknownModel(_) => StatusCode::NOT_FOUND,
            FunctionError::AllVariantsFailed(_) => match error.uniform_failure() {
                Some(FailureKind::Client) => StatusCode::BAD_REQUEST,
                Some(FailureKind::Timeout) => StatusCode::REQUEST_TIMEOUT,
                _ => StatusCode::BAD_GATEWAY,
            },
            FunctionError::StreamInterrupted(_) => StatusCode::BAD_GATEWAY,
            FunctionError::Storage(_) => StatusCode::SERVICE_UNAVAILABLE,
        };
        Self::new(status, error.to_string())
    }
}
