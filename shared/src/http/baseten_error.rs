//! Errors of the Baseten-style async routes: `{"error": "<message>", "code": "<CODE>"}` plus the
//! `field` a 400 names. Every error on these routes has this shape, also the ones raised before
//! their handlers run (see `tensorzero_surface::surface_error_bodies`).

use crate::async_requests::AsyncError;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::Json;

#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct BasetenError {
    pub status: StatusCode,
    pub code: &'static str,
    pub message: String,
    pub field: Option<String>,
}

impl BasetenError {
    /// An error raised outside the async domain, its code from its status.
    pub(crate) fn from_status(status: StatusCode, message: String) -> Self {
        let code = match status.as_u16() {
            400 | 422 => "INVALID_REQUEST",
            401 | 403 => "UNAUTHORIZED",
            404 => "NOT_FOUND",
            405 => "METHOD_NOT_ALLOWED",
            413 => "REQUEST_TOO_LARGE",
            429 => "RATE_LIMITED",
            _ => "INTERNAL_SERVER_ERROR",
        };
        Self {
            status,
            code,
            message,
            field: None,
        }
    }
}

impl From<AsyncError> for BasetenError {
    fn from(error: AsyncError) -> Self {
        let field = error.field().map(str::to_owned);
        let (status, code) = match &error {
            AsyncError::InvalidInput { .. } => (StatusCode::BAD_REQUEST, "MODEL_INVALID_INPUT"),
            AsyncError::UnknownModel { .. } => (StatusCode::BAD_REQUEST, "MODEL_DOES_NOT_EXIST"),
            AsyncError::NotFound(_) => (StatusCode::NOT_FOUND, "ASYNC_REQUEST_NOT_FOUND"),
            AsyncError::Storage(_) => (StatusCode::SERVICE_UNAVAILABLE, "INTERNAL_SERVER_ERROR"),
        };
        if matches!(error, AsyncError::Storage(_)) {
            tracing::error!(error = %error, "async request storage failed");
        }
        let message = match &error {
            AsyncError::Storage(_) => "The request could not be stored; try again.".to_owned(),
            _ => error.to_string(),
        };
        Self {
            status,
            code,
            message,
            field,
        }
    }
}

impl IntoResponse for BasetenError {
    fn into_response(self) -> Response {
        let body = BasetenErrorBody {
            error: self.message,
            code: self.code.to_owned(),
            field: self.field,
        };
        (self.status, Json(body)).into_response()
    }
}

/// Baseten's error body: `{"error": "<message>", "code": "<CODE>"}`, plus the `field` a 400 names.
#[derive(Debug, Clone, serde::Serialize, utoipa::ToSchema)]
#[schema(as = BasetenError)]
pub(crate) struct BasetenErrorBody {
    pub error: String,
    /// `MODEL_INVALID_INPUT`, `MODEL_DOES_NOT_EXIST`, `ASYNC_REQUEST_NOT_FOUND`, `UNAUTHORIZED`, …
    pub code: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub field: Option<String>,
}
