//! The OpenAI error value: a status and the envelope `{"error": {"message", "type", "param",
//! "code"}}`. How each domain error becomes one is the surfaces' business:
//! `surface_errors::openai` for the inference domain's errors (the routes, and the batch and async
//! lines written in OpenAI's format), `http::openai_error` for those of the files, batches and
//! webhooks APIs.

use http::StatusCode;
use serde::Serialize;
use serde_json::{json, Value};

#[derive(Debug, Clone, PartialEq)]
pub struct ApiError {
    pub status: StatusCode,
    pub message: String,
    pub kind: &'static str,
    pub param: Option<String>,
    pub code: Option<String>,
    /// Tell the OpenAI SDKs not to retry (the gateway already retried and fell back).
    pub no_client_retry: bool,
}

impl ApiError {
    pub fn new(status: StatusCode, kind: &'static str, message: impl Into<String>) -> Self {
        Self {
            status,
            message: message.into(),
            kind,
            param: None,
            code: None,
            no_client_retry: false,
        }
    }

    pub(crate) fn with_param(mut self, param: impl Into<String>) -> Self {
        self.param = Some(param.into());
        self
    }

    pub(crate) fn with_code(mut self, code: impl Into<String>) -> Self {
        self.code = Some(code.into());
        self
    }

    pub(crate) fn invalid_request(message: impl Into<String>) -> Self {
        Self::new(StatusCode::BAD_REQUEST, "invalid_request_error", message)
    }

    pub fn not_found(message: impl Into<String>) -> Self {
        Self::new(StatusCode::NOT_FOUND, "invalid_request_error", message)
    }

    pub(crate) fn method_not_allowed(message: impl Into<String>) -> Self {
        Self::new(StatusCode::METHOD_NOT_ALLOWED, "invalid_request_error", message)
    }

    pub(crate) fn payload_too_large(message: impl Into<String>) -> Self {
        Self::new(StatusCode::PAYLOAD_TOO_LARGE, "invalid_request_error", message)
    }

    pub fn internal(message: impl Into<String>) -> Self {
        Self::new(StatusCode::INTERNAL_SERVER_ERROR, "server_error", message)
    }

    /// The envelope as JSON (also used for errors inside an SSE stream).
    pub fn envelope(&self) -> Value {
        let envelope = ErrorEnvelope {
            error: ErrorObject {
                message: self.message.clone(),
                kind: self.kind.to_owned(),
                param: self.param.clone(),
                code: self.code.clone(),
            },
        };
        serde_json::to_value(envelope).unwrap_or_else(|_| json!({"error": {"message": self.message}}))
    }
}

/// OpenAI's error body: `{"error": {"message", "type", "param", "code"}}`.
#[derive(Debug, Clone, Serialize, utoipa::ToSchema)]
#[schema(as = OpenAiError)]
pub struct ErrorEnvelope {
    pub error: ErrorObject,
}

/// What went wrong; `param` names the field at fault when one is.
#[derive(Debug, Clone, Serialize, utoipa::ToSchema)]
#[schema(as = OpenAiErrorObject)]
pub struct ErrorObject {
    pub message: String,
    /// `invalid_request_error`, `authentication_error`, `server_error`, …
    #[serde(rename = "type")]
    pub kind: String,
    pub param: Option<String>,
    pub code: Option<String>,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn envelope_has_all_four_keys() {
        let value = ApiError::invalid_request("bad").envelope();
        let error = value["error"].as_object().unwrap();
        for key in ["message", "type", "param", "code"] {
            assert!(error.contains_key(key), "{key}");
        }
    }
}
