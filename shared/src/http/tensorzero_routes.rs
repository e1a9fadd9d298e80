//! `POST /inference` (TensorZero's gateway API): parse, call the function layer, render.

use super::extract::ApiExtension;
use super::sse::{sse_body_response, sse_frames_with};
use super::tensorzero_error::{TensorZeroError, TensorZeroJson};
use super::AppState;
use crate::auth::Principal;
use crate::functions::inference::{FunctionError, InferenceRequest};
use axum::extract::State;
use axum::response::{IntoResponse, Response};
use axum::routing::post;
use axum::{Json, Router};

pub(super) fn routes() -> Router<AppState> {
    Router::new().route("/inference", post(inference))
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
    if call.stream {
        let stream = functions.infer_stream(&principal.project, &call).await?;
        let frames = sse_frames_with(stream.chunks, |error: FunctionError| {
            TensorZeroError::from(error).body().to_string()
        });
        return Ok(sse_body_response(frames));
    }
    let result = functions.infer(&principal.project, &call).await?;
    let reply = crate::functions::inference::InferenceReply::new(&result, call.includes);
    Ok(Json(reply).into_response())
}
