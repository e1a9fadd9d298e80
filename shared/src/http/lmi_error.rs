//! Errors of the LMI API (`/invocations`, `/predictions/{model}`, `/ping`) in LMI's shapes; the
//! one place this surface's errors are mapped:
//!
//! - bad input (LMI's payload validation): 424 `{"error": "…", "code": 424}`;
//! - every provider failing before the answer started: 424
//!   `{"code": 424, "message": "invoke handler failure", "error": "…"}`, as an LMI container whose
//!   handler failed answers (SageMaker passes it on as a `ModelError`); a provider timing out is
//!   no different;
//! - an answer the gateway could not render 500 `{"error": "…", "code": 500}`;
//! - an unknown model 404, a missing or bad API key 401, a body over the limit 413, a wrong
//!   method 405, each as `{"error": "…", "code": <status>}`.

use crate::inference::InferenceError;
use crate::lmi_api::LmiApiError;
use crate::openai::error::ApiError;
use crate::providers::router::RoutingError;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::Json;
use serde_json::{json, Value};

/// The status LMI answers bad input with.
const FAILED_DEPENDENCY: StatusCode = StatusCode::FAILED_DEPENDENCY;

#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct LmiError {
    pub status: StatusCode,
    pub message: String,
    /// The model's handler failed (LMI's `"message": "invoke handler failure"`).
    pub handler_failure: bool,
}

impl LmiError {
    /// Bad input: 424 with LMI's validation body.
    pub fn invalid(message: impl Into<String>) -> Self {
        Self {
            status: FAILED_DEPENDENCY,
            message: message.into(),
            handler_failure: false,
        }
    }

    fn handler_failure(message: String) -> Self {
        Self {
            status: FAILED_DEPENDENCY,
            message,
            handler_failure: true,
        }
    }

    /// An error raised before the handler ran (authentication, body limit, routing) or by an
    /// extractor, with its status; client errors (400, 422) become LMI's 424.
    pub(crate) fn from_status(status: StatusCode, message: String) -> Self {
        if matches!(status.as_u16(), 400 | 422) {
            return Self::invalid(message);
        }
        Self {
            status,
            message,
            handler_failure: false,
        }
    }

    pub fn body(&self) -> Value {
        let body = LmiErrorBody {
            code: self.status.as_u16(),
            message: self.handler_failure.then(|| "invoke handler failure".to_owned()),
            error: self.message.clone(),
        };
        serde_json::to_value(body).unwrap_or_else(|_| json!({"error": self.message}))
    }
}

/// DJL Serving's error body: `{"error": "<message>", "code": <status>}`; when the model's handler
/// failed, also `"message": "invoke handler failure"`.
#[derive(Debug, Clone, serde::Serialize, utoipa::ToSchema)]
#[schema(as = LmiError)]
pub(crate) struct LmiErrorBody {
    pub code: u16,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
    pub error: String,
}

impl IntoResponse for LmiError {
    fn into_response(self) -> Response {
        if self.handler_failure {
            tracing::warn!(error = %self.message, "LMI request failed in the providers");
        }
        (self.status, Json(self.body())).into_response()
    }
}

impl From<ApiError> for LmiError {
    fn from(err: ApiError) -> Self {
        Self::from_status(err.status, err.message)
    }
}

impl From<LmiApiError> for LmiError {
    fn from(err: LmiApiError) -> Self {
        match err {
            LmiApiError::Invalid(message) => Self::invalid(message),
            LmiApiError::NoModel => Self::invalid(err.to_string()),
            LmiApiError::UnknownModel(_) => Self::from_status(StatusCode::NOT_FOUND, err.to_string()),
            LmiApiError::Inference(inference) => inference.into(),
            LmiApiError::Render(_) => {
                tracing::error!(error = %err, "LMI answer could not be rendered");
                Self::from_status(StatusCode::INTERNAL_SERVER_ERROR, err.to_string())
            }
        }
    }
}

impl From<InferenceError> for LmiError {
    fn from(err: InferenceError) -> Self {
        let failed = matches!(err, InferenceError::Routing(RoutingError::AllFailed { .. }));
        // The OpenAI mapping decides whose fault it is (the client's: a 4xx; the providers': 5xx).
        let api = ApiError::from(err);
        if failed && api.status.is_server_error() {
            Self::handler_failure(api.message)
        } else {
            api.into()
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::providers::router::ProviderFailure;
    use crate::providers::ProviderError;

    fn all_failed(error: ProviderError) -> InferenceError {
        InferenceError::Routing(RoutingError::AllFailed {
            model: "m".into(),
            failures: vec![ProviderFailure {
                provider: "p".into(),
                attempts: 1,
                error,
            }],
        })
    }

    #[test]
    fn statuses_and_bodies() {
        let invalid = LmiError::from(LmiApiError::invalid("bad"));
        assert_eq!(invalid.status, StatusCode::FAILED_DEPENDENCY);
        assert_eq!(invalid.body(), json!({"error": "bad", "code": 424}));

        let failed = LmiError::from(LmiApiError::from(all_failed(ProviderError::Http {
            status: 500,
            message: "boom".into(),
            retry_after: None,
            body: None,
        })));
        assert_eq!(failed.status, StatusCode::FAILED_DEPENDENCY);
        let body = failed.body();
        assert_eq!(body["code"], 424);
        assert_eq!(body["message"], "invoke handler failure");
        assert!(body["error"].as_str().unwrap().contains("boom"));

        let unknown = LmiError::from(LmiApiError::UnknownModel("nope".into()));
        assert_eq!(unknown.status, StatusCode::NOT_FOUND);
        assert_eq!(unknown.body()["code"], 404);

        let unsupported = LmiError::from(LmiApiError::from(all_failed(ProviderError::UnsupportedParameter {
            param: "top_k".into(),
            message: "no".into(),
        })));
        assert_eq!(unsupported.body()["code"], 424);
        assert!(unsupported.body()["error"].as_str().unwrap().contains("top_k"));
        assert!(unsupported.body().get("message").is_none());

        let unrendered = LmiError::from(LmiApiError::Render("bad float".into()));
        assert_eq!(unrendered.status, StatusCode::INTERNAL_SERVER_ERROR);
        assert_eq!(unrendered.body()["code"], 500);

        let auth = LmiError::from_status(StatusCode::UNAUTHORIZED, "no key".into());
        assert_eq!(auth.body(), json!({"error": "no key", "code": 401}));
    }
}
