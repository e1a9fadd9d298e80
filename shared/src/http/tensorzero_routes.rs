//! `POST /inference` (TensorZero's gateway API): parse, call the function layer, render.

use super::answer_deadline::StreamAnswer;
use super::api_routes::routes;
use super::extract::ApiExtension;
use super::sse::{sse_body_response, sse_frames_with};
use super::tensorzero_error::{TensorZeroError, TensorZeroJson};
use super::InferenceState;
use crate::auth::Principal;
use crate::tensorzero::function_calls::{FunctionError, InferenceRequest};
use axum::extract::State;
use axum::response::{IntoResponse, Response};
use axum::Json;
use utoipa_axum::router::OpenApiRouter;

pub(super) fn routes() -> OpenApiRouter<InferenceState> {
    OpenApiRouter::default().routes(routes!(inference))
}

/// `POST /inference`: call a function (or a model directly with `model_name`); with
/// `"stream": true` the answer comes as server-sent events ending in `data: [DONE]`.
#[utoipa::path(
    post,
    path = "/inference",
    tag = "tensorzero",
    request_body = InferenceRequest,
    responses(
        (status = 200, description = "The inference; with `stream: true`, its chunks as events",
            content((crate::tensorzero::function_calls::InferenceReply = "application/json"),
                (crate::tensorzero::function_calls::InferenceChunk = "text/event-stream"))),
        super::api_doc::TensorZeroErrors,
    )
)]
async fn inference(
    State(state): State<InferenceState>,
    ApiExtension(principal): ApiExtension<Principal>,
    stream_answer: StreamAnswer,
    TensorZeroJson(request): TensorZeroJson<InferenceRequest>,
) -> Result<Response, TensorZeroError> {
    let functions = &state.functions;
    let call = request
        .into_call(functions.now_ms(), || functions.new_id())
        .map_err(TensorZeroError::from)?;
    if call.stream {
        stream_answer.streaming();
        let stream = functions.infer_stream(&principal.project, &call).await?;
        let frames = sse_frames_with(stream.chunks, |error: FunctionError| {
            TensorZeroError::from(error).body().to_string()
        });
        return Ok(sse_body_response(frames));
    }
    let result = functions.infer(&principal.project, &call).await?;
    let reply = crate::tensorzero::function_calls::InferenceReply::new(&result, call.includes);
    Ok(Json(reply).into_response())
}
