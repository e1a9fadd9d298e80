//! `POST /inference` (TensorZero's gateway API): parse, call the function layer, render.

use super::body_budget;
use super::extract::ApiExtension;
use super::sse::{sse_body_response, sse_frames_with};
use super::tensorzero_error::TensorZeroError;
use super::AppState;
use crate::auth::Principal;
use crate::functions::inference::{FunctionError, InferenceRequest};
use crate::user_text::excerpt;
use axum::body::Bytes;
use axum::extract::{FromRequest, Request, State};
use axum::response::{IntoResponse, Response};
use axum::routing::post;
use axum::{Json, Router};
use serde::de::DeserializeOwned;

pub(super) fn routes() -> Router<AppState> {
    Router::new().route("/inference", post(inference))
}

/// A JSON body whose problems are answered in TensorZero's error shape (400, naming the field).
pub(crate) struct TensorZeroJson<T>(pub T);

impl<S, T> FromRequest<S> for TensorZeroJson<T>
where
    S: Send + Sync,
    T: DeserializeOwned,
{
    type Rejection = TensorZeroError;

    async fn from_request(request: Request, state: &S) -> Result<Self, Self::Rejection> {
        let declared = request
            .headers()
            .get(axum::http::header::CONTENT_LENGTH)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.parse::<usize>().ok());
        let _budget = body_budget::reserve(declared, super::MAX_JSON_BODY_BYTES).await;
        let bytes = Bytes::from_request(request, state).await.map_err(|rejection| {
            TensorZeroError::new(
                rejection.status(),
                format!("Could not read the request body: {}", rejection.body_text()),
            )
        })?;
        parse_tensorzero_json(&bytes).map(TensorZeroJson)
    }
}

/// Parse a JSON body, naming the offending field on failure (not for broken JSON: where the text
/// broke off says nothing about a field).
pub(crate) fn parse_tensorzero_json<T: DeserializeOwned>(bytes: &[u8]) -> Result<T, TensorZeroError> {
    let mut deserializer = serde_json::Deserializer::from_slice(bytes);
    serde_path_to_error::deserialize(&mut deserializer).map_err(|err| {
        let path = err.path().to_string();
        let inner = excerpt_message(&err.inner().to_string());
        if err.inner().is_syntax() || err.inner().is_eof() {
            TensorZeroError::bad_request(format!("The request body is not valid JSON: {inner}"))
        } else if path == "." {
            TensorZeroError::bad_request(format!("Invalid request body: {inner}"))
        } else {
            TensorZeroError::bad_request(format!("Invalid request body at `{}`: {inner}", excerpt(&path)))
        }
    })
}

/// serde's message, cut to a readable length (it can list every expected field).
fn excerpt_message(message: &str) -> String {
    const LIMIT: usize = 400;
    if message.len() <= LIMIT {
        return message.to_owned();
    }
    let cut = (0..=LIMIT).rev().find(|i| message.is_char_boundary(*i)).unwrap_or(0);
    format!("{}…", &message[..cut])
}

async fn inference(
    State(state): State<AppState>,
    ApiExtension(principal): ApiExtension<Principal>,
    TensorZeroJson(request): TensorZeroJson<InferenceRequest>,
) -> Result<Response, TensorZeroError> {
    let functions = &state.functions;
    let call = request
        .into_call(functions.now_ms(), || functions.new_id())
        .map_err(TensorZeroError::from)?;
    let _ = &principal;
    if call.stream {
        let stream = functions.infer_stream(&call).await?;
        let frames = sse_frames_with(stream.chunks, |error: FunctionError| {
            TensorZeroError::from(error).body().to_string()
        });
        return Ok(sse_body_response(frames));
    }
    let result = functions.infer(&call).await?;
    let reply = crate::functions::inference::InferenceReply::new(&result, call.includes);
    Ok(Json(reply).into_response())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::functions::inference::InferenceRequest;

    fn error_of(body: &str) -> String {
        parse_tensorzero_json::<InferenceRequest>(body.as_bytes())
            .unwrap_err()
            .message
    }

    #[test]
    fn a_bad_field_is_named_and_broken_json_is_called_so() {
        let unknown = error_of(r#"{"model_name": "m", "input": {}, "temprature": 1}"#);
        assert!(unknown.contains("temprature"), "{unknown}");
        let wrong_type = error_of(r#"{"model_name": "m", "input": {}, "stream": "yes"}"#);
        assert!(wrong_type.contains("at `stream`"), "{wrong_type}");
        for broken in [
            r#"{"model_name": "m", "input": {"messages": ["#,
            "{",
            r#"{"model_name" 1}"#,
        ] {
            let message = error_of(broken);
            assert!(message.starts_with("The request body is not valid JSON"), "{message}");
            assert!(!message.contains(" at `"), "{message}");
        }
    }
}
