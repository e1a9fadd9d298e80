//! The OpenAI envelope of the files, batches and webhooks APIs' errors.

use crate::batches::BatchesError;
use crate::files::FilesError;
use crate::openai::error::ApiError;
use crate::paging::LimitError;
use crate::webhooks::WebhooksError;
use http::StatusCode;

impl From<FilesError> for ApiError {
    fn from(err: FilesError) -> Self {
        match err {
            FilesError::NotFound { .. } => Self::not_found(err.to_string()).with_param("id"),
            FilesError::Invalid { message, param } => {
                let error = Self::invalid_request(message);
                match param {
                    Some(param) => error.with_param(param),
                    None => error,
                }
            }
            FilesError::TooLarge { message } => Self::payload_too_large(message),
            FilesError::KeyReused => Self::invalid_request(err.to_string())
                .with_param("Idempotency-Key")
                .with_code("idempotency_key_reused"),
            FilesError::Storage(storage) => {
                tracing::error!(error = %storage, "storage failed");
                Self::internal("The request could not be completed because storage failed; try again.")
            }
        }
    }
}

impl From<BatchesError> for ApiError {
    fn from(err: BatchesError) -> Self {
        match err {
            BatchesError::NotFound { param, .. } => Self::not_found(err.to_string()).with_param(param),
            BatchesError::Invalid { message, param, code } => {
                let mut error = Self::invalid_request(message);
                error.param = param;
                error.code = code.map(str::to_owned);
                error
            }
            BatchesError::Conflict(message) => Self::new(StatusCode::CONFLICT, "invalid_request_error", message),
            BatchesError::Files(files) => files.into(),
            BatchesError::Storage(storage) => FilesError::Storage(storage).into(),
            BatchesError::Provider(message) => Self::new(StatusCode::BAD_GATEWAY, "server_error", message),
        }
    }
}

impl From<WebhooksError> for ApiError {
    fn from(err: WebhooksError) -> Self {
        match err {
            WebhooksError::NotFound { .. } => Self::not_found(err.to_string()).with_param("id"),
            WebhooksError::Invalid { message, param } => Self::invalid_request(message)
                .with_param(param)
                .with_code("invalid_value"),
            WebhooksError::LimitReached { message } => Self::invalid_request(message).with_code("limit_exceeded"),
            WebhooksError::Storage(storage) => FilesError::Storage(storage).into(),
        }
    }
}

impl From<LimitError> for ApiError {
    fn from(err: LimitError) -> Self {
        Self::invalid_request(err.to_string())
            .with_param("limit")
            .with_code(err.code())
    }
}
