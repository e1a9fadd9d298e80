//! `/v1/chat/completions`, `/v1/embeddings`, `/v1/models`, `/health`.

use super::error::ApiError;
use super::extract::ApiPath;
use super::json_body::JsonBody;
use super::sse::sse_response;
use super::AppState;
use crate::openai::chat::ChatCompletionRequest;
use crate::openai::credentials::take_credentials;
use crate::openai::embeddings::EmbeddingRequest;
use crate::openai::to_model::OpenAiChatRequest;
use axum::extract::State;
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Json, Router};
use serde_json::{json, Value};

pub(super) fn routes() -> Router<AppState> {
    Router::new()
        .route("/v1/chat/completions", post(chat_completions))
        .route("/v1/embeddings", post(embeddings))
        .route("/v1/models", get(list_models))
        .route("/v1/models/{*model}", get(get_model))
}

pub(super) async fn health() -> Json<Value> {
    Json(json!({"status": "ok"}))
}

async fn chat_completions(
    State(state): State<AppState>,
    body: JsonBody<ChatCompletionRequest>,
) -> Result<Response, ApiError> {
    let JsonBody { typed, mut raw, .. } = body;
    let credentials = take_credentials(&mut raw)?;
    let request = OpenAiChatRequest { typed, raw };
    if request.typed.wants_stream() {
        let chunks = state.inference.chat_stream(&request, &credentials).await?;
        Ok(sse_response(chunks))
    } else {
        let completion = state.inference.chat(&request, &credentials).await?;
        Ok(Json(completion).into_response())
    }
}

async fn embeddings(State(state): State<AppState>, body: JsonBody<EmbeddingRequest>) -> Result<Response, ApiError> {
    let JsonBody { typed, mut raw, .. } = body;
    let credentials = take_credentials(&mut raw)?;
    let response = state.inference.embed(&typed, &credentials).await?;
    Ok(Json(response).into_response())
}

async fn list_models(State(state): State<AppState>) -> Response {
    Json(state.inference.list_models()).into_response()
}

async fn get_model(State(state): State<AppState>, ApiPath(model): ApiPath<String>) -> Result<Response, ApiError> {
    Ok(Json(state.inference.get_model(&model)?).into_response())
}
