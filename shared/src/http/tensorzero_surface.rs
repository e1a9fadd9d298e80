//! TensorZero's routes answer every error in TensorZero's shape `{"error": "<message>"}`, also
//! the ones raised before their handlers run (a missing or bad API key, a wrong method, a body
//! over the limit), which the shared layers render as OpenAI envelopes.

use super::error::ApiErrorMessage;
use super::tensorzero_error::TensorZeroError;
use axum::extract::Request;
use axum::http::header;
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};

/// Whether `path` is one of TensorZero's own routes (not its OpenAI-compatible `/openai/v1/…`).
pub fn is_tensorzero_path(path: &str) -> bool {
    matches!(path, "/inference" | "/feedback" | "/batch_inference")
        || ["/batch_inference/", "/inferences/", "/episodes/"]
            .iter()
            .any(|prefix| path.starts_with(prefix))
}

/// Re-render an OpenAI-envelope error on a TensorZero route as TensorZero's error, keeping the
/// status and the other headers (request id, `retry-after`, …).
pub async fn tensorzero_error_bodies(request: Request, next: Next) -> Response {
    let tensorzero = is_tensorzero_path(request.uri().path());
    let response = next.run(request).await;
    if !tensorzero {
        return response;
    }
    let Some(ApiErrorMessage(message)) = response.extensions().get::<ApiErrorMessage>().cloned() else {
        return response;
    };
    let (parts, _) = response.into_parts();
    let mut rendered = TensorZeroError::new(parts.status, message).into_response();
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
    }
}
