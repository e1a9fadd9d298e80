//! TensorZero's OpenAI-compatible paths: `/openai/v1/chat/completions` (models
//! `tensorzero::function_name::F` / `tensorzero::model_name::M` through the function layer) and
//! `/openai/v1/embeddings`. Errors use OpenAI's envelope.

use super::answer_deadline::StreamAnswer;
use super::api_routes::routes;
use super::error::ApiError;
use super::extract::ApiExtension;
use super::json_body::JsonBody;
use super::sse::{sse_body_response, sse_frames_with};
use super::InferenceState;
use crate::auth::Principal;
use crate::openai::embeddings::EmbeddingRequest;
use crate::tensorzero::function_calls::FunctionError;
use crate::tensorzero::openai_compat::{
    completion_of, inference_request_of, CompletionChunker, EMBEDDING_MODEL_PREFIX, MODEL_PREFIX,
};
use axum::extract::State;
use axum::response::{IntoResponse, Response};
use axum::Json;
use futures::StreamExt;
use serde_json::{Map, Value};
use utoipa_axum::router::OpenApiRouter;

pub(super) fn routes() -> OpenApiRouter<InferenceState> {
    OpenApiRouter::default()
        .routes(routes!(chat_completions))
        .routes(routes!(embeddings))
}

/// `POST /openai/v1/chat/completions`: TensorZero's OpenAI-compatible route; `model` is
/// `tensorzero::function_name::NAME` or `tensorzero::model_name::NAME`, and
/// `tensorzero::`-prefixed fields (`tensorzero::episode_id`, `tensorzero::tags`, …) are read.
#[utoipa::path(
    post,
    path = "/openai/v1/chat/completions",
    tag = "tensorzero",
    request_body = crate::openai::chat::ChatCompletionRequest,
    responses(
        (status = 200, description = "The completion; with `stream: true`, `chat.completion.chunk` events",
            content((crate::openai::chat::ChatCompletion = "application/json"),
                (crate::openai::chat::ChatCompletionChunk = "text/event-stream"))),
        super::api_doc::OpenAiErrors,
    )
)]
async fn chat_completions(
    State(state): State<InferenceState>,
    ApiExtension(principal): ApiExtension<Principal>,
    stream_answer: StreamAnswer,
    body: JsonBody<Map<String, Value>>,
) -> Result<Response, ApiError> {
    let include_usage = body
        .raw
        .get("stream_options")
        .and_then(|o| o.get("include_usage"))
        .and_then(Value::as_bool)
        .unwrap_or(false);
    let (_, request) = inference_request_of(body.raw)?;
    let functions = &state.functions;
    let call = request.into_call(functions.now_ms(), || functions.new_id())?;
    let created = functions.now_ms() / 1000;
    if call.stream {
        stream_answer.streaming();
        let stream = functions.infer_stream(&principal.project, &call).await?;
        let mut chunker = CompletionChunker::new(&stream.function_name, &stream.variant_name, created, include_usage);
        let chunks = stream
            .chunks
            .filter_map(move |chunk| {
                let out = match chunk {
                    Ok(chunk) => chunker.chunk(&chunk).map(Ok),
                    Err(error) => Some(Err(error)),
                };
                futures::future::ready(out)
            })
            .boxed();
        let frames = sse_frames_with(chunks, |error: FunctionError| {
            ApiError::from(error).envelope().to_string()
        });
        return Ok(sse_body_response(frames));
    }
    let result = functions.infer(&principal.project, &call).await?;
    Ok(Json(completion_of(&result, created)).into_response())
}

/// `POST /openai/v1/embeddings`: `model` is `tensorzero::embedding_model_name::NAME` (or a model
/// name as such).
#[utoipa::path(
    post,
    path = "/openai/v1/embeddings",
    tag = "tensorzero",
    request_body = EmbeddingRequest,
    responses((status = 200, body = crate::openai::embeddings::EmbeddingResponse), super::api_doc::OpenAiErrors)
)]
async fn embeddings(
    State(state): State<InferenceState>,
    body: JsonBody<EmbeddingRequest>,
) -> Result<Response, ApiError> {
    let JsonBody { mut typed, mut raw, .. } = body;
    let credentials = crate::openai::credentials::take_credentials(&mut raw)?;
    let asked = typed.model.clone();
    typed.model = asked
        .strip_prefix(EMBEDDING_MODEL_PREFIX)
        .or_else(|| asked.strip_prefix(MODEL_PREFIX))
        .unwrap_or(&asked)
        .to_owned();
    let mut response = state.inference.embed(&typed, &credentials).await?;
    response.model = asked;
    Ok(Json(response).into_response())
}
