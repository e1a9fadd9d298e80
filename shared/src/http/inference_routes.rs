//! `/v1/chat/completions`, `/v1/embeddings`, `/v1/models`, `/health`.

use super::answer_deadline::StreamAnswer;
use super::api_doc::OpenAiErrors;
use super::api_routes::routes;
use super::error::ApiError;
use super::extract::ApiPath;
use super::json_body::JsonBody;
use super::sse::sse_response;
use super::InferenceState;
use crate::openai::chat::{ChatCompletion, ChatCompletionChunk, ChatCompletionRequest};
use crate::openai::credentials::take_credentials;
use crate::openai::embeddings::{EmbeddingRequest, EmbeddingResponse};
use crate::openai::models::{ModelList, ModelObject};
use crate::openai::to_model::OpenAiChatRequest;
use axum::extract::State;
use axum::response::{IntoResponse, Response};
use axum::Json;
use serde::Serialize;
use utoipa_axum::router::OpenApiRouter;

pub(super) fn routes() -> OpenApiRouter<InferenceState> {
    let router = OpenApiRouter::default()
        .routes(routes!(chat_completions))
        .routes(routes!(embeddings))
        .routes(routes!(list_models));
    // A model id may hold slashes (`org/name`).
    super::with_wildcard_route(router, "/v1/models/{*model}", routes!(get_model))
}

/// `{"status": "ok"}`.
#[derive(Debug, Serialize, utoipa::ToSchema)]
pub(super) struct Health {
    status: &'static str,
}

/// `GET /health`: the function is up.
#[utoipa::path(get, path = "/health", tag = "operations", security(()), responses((status = 200, body = Health)))]
pub(super) async fn health() -> Json<Health> {
    Json(Health { status: "ok" })
}

/// `POST /v1/chat/completions`: a chat completion, or with `"stream": true` its chunks as
/// server-sent events ending in `data: [DONE]`.
#[utoipa::path(
    post,
    path = "/v1/chat/completions",
    tag = "openai",
    request_body = ChatCompletionRequest,
    responses(
        (status = 200, description = "The completion; with `stream: true`, `chat.completion.chunk` events",
            content((ChatCompletion = "application/json"), (ChatCompletionChunk = "text/event-stream"))),
        OpenAiErrors,
    )
)]
async fn chat_completions(
    State(state): State<InferenceState>,
    stream_answer: StreamAnswer,
    body: JsonBody<ChatCompletionRequest>,
) -> Result<Response, ApiError> {
    let JsonBody { typed, mut raw, .. } = body;
    let credentials = take_credentials(&mut raw)?;
    let request = OpenAiChatRequest { typed, raw };
    if request.typed.wants_stream() {
        stream_answer.streaming();
        let chunks = state.inference.chat_stream(&request, &credentials).await?;
        Ok(sse_response(chunks))
    } else {
        let completion = state.inference.chat(&request, &credentials).await?;
        Ok(Json(completion).into_response())
    }
}

/// `POST /v1/embeddings`.
#[utoipa::path(
    post,
    path = "/v1/embeddings",
    tag = "openai",
    request_body = EmbeddingRequest,
    responses((status = 200, body = EmbeddingResponse), OpenAiErrors)
)]
async fn embeddings(
    State(state): State<InferenceState>,
    body: JsonBody<EmbeddingRequest>,
) -> Result<Response, ApiError> {
    let JsonBody { typed, mut raw, .. } = body;
    let credentials = take_credentials(&mut raw)?;
    let response = state.inference.embed(&typed, &credentials).await?;
    Ok(Json(response).into_response())
}

/// `GET /v1/models`: every configured model.
#[utoipa::path(get, path = "/v1/models", tag = "openai", responses((status = 200, body = ModelList), OpenAiErrors))]
async fn list_models(State(state): State<InferenceState>) -> Response {
    Json(state.inference.list_models()).into_response()
}

/// `GET /v1/models/{model}`: a configured model, or a shorthand one (`provider::name`).
#[utoipa::path(
    get,
    path = "/v1/models/{model}",
    tag = "openai",
    params(("model" = String, Path, description = "The model's id; it may contain `/`")),
    responses((status = 200, body = ModelObject), OpenAiErrors)
)]
async fn get_model(State(state): State<InferenceState>, ApiPath(model): ApiPath<String>) -> Result<Response, ApiError> {
    Ok(Json(state.inference.get_model(&model)?).into_response())
}
