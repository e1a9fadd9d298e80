//! TensorZero's routes answer every error in TensorZero's shape `{"error": "<message>"}`, the
//! Baseten-style async routes in theirs (`{"error", "code"}`) and the LMI API in LMI's, also the
//! ones raised before their
//! handlers run (a missing or bad API key, a wrong method, a body over the limit), which the
//! shared layers render as OpenAI envelopes.

use super::baseten_error::BasetenError;
use super::error::ApiErrorMessage;
use super::lmi_error::LmiError;
use super::lmi_routes::is_lmi_path;
use super::tensorzero_error::TensorZeroError;
use axum::extract::Request;
use axum::http::header;
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};

/// Whether `path` is one of TensorZero's own routes (not its OpenAI-compatible `/openai/v1/…`).
pub(crate) fn is_tensorzero_path(path: &str) -> bool {
    matches!(path, "/inference" | "/feedback" | "/batch_inference" | "/dicl/build")
        || ["/batch_inference/", "/inferences/", "/episodes/"]
            .iter()
            .any(|prefix| path.starts_with(prefix))
}

/// Whether `path` is one of the Baseten-style async routes.
pub(crate) fn is_baseten_path(path: &str) -> bool {
    matches!(path, "/async_predict" | "/async_requests")
        || ["/async_request/", "/models/"]
            .iter()
            .any(|prefix| path.starts_with(prefix))
}

#[derive(Clone, Copy)]
enum Surface {
    TensorZero,
    Baseten,
    Lmi,
}

/// Re-render an OpenAI-envelope error on a TensorZero, Baseten-style or LMI route in that surface's
/// shape, keeping the status and the other headers (request id, `retry-after`, …).
pub(crate) async fn surface_error_bodies(request: Request, next: Next) -> Response {
    let path = request.uri().path();
    let surface = if is_tensorzero_path(path) {
        Surface::TensorZero
    } else if is_baseten_path(path) {
        Surface::Baseten
    } else if is_lmi_path(path) {
        Surface::Lmi
    } else {
        return next.run(request).await;
    };
    let response = next.run(request).await;
    let Some(ApiErrorMessage(message)) = response.extensions().get::<ApiErrorMessage>().cloned() else {
        return response;
    };
    let (parts, _) = response.into_parts();
    let mut rendered = match surface {
        Surface::TensorZero => TensorZeroError::new(parts.status, message).into_response(),
        Surface::Baseten => BasetenError::from_status(parts.status, message).into_response(),
        Surface::Lmi => LmiError::from_status(parts.status, message).into_response(),
    };
    for (name, value) in &parts.headers {
        if name != header::CONTENT_TYPE && name != header::CONTENT_LENGTH {
            rendered.headers_mut().append(name, value.clone());
        }
    }
    rendered
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_tensorzeros_own_routes_count() {
        for path in [
            "/inference",
            "/feedback",
            "/inferences/x",
            "/episodes/x/inferences",
            "/batch_inference/b",
            "/dicl/build",
        ] {
            assert!(is_tensorzero_path(path), "{path}");
        }
        for path in [
            "/openai/v1/chat/completions",
            "/v1/models",
            "/inference/x",
            "/health",
            "/inferencez",
        ] {
            assert!(!is_tensorzero_path(path), "{path}");
        }
        for path in [
            "/async_predict",
            "/async_request/x",
            "/async_requests",
            "/models/m/async_predict",
        ] {
            assert!(is_baseten_path(path) && !is_tensorzero_path(path), "{path}");
        }
        assert!(!is_baseten_path("/v1/models"));
    }
}
