//! `/v1/uploads`: create, add parts (multipart field `data`), complete, cancel.

use super::error::ApiError;
use super::extract::{ApiExtension, ApiPath};
use super::json_body::JsonBody;
use super::multipart_stream::{multipart_error, multipart_rejection, skip_field, stream_field};
use super::AppState;
use crate::auth::Principal;
use crate::openai::files::{CompleteUploadRequest, CreateUploadRequest};
use axum::extract::multipart::MultipartRejection;
use axum::extract::{Multipart, State};
use axum::response::{IntoResponse, Response};
use axum::routing::post;
use axum::{Json, Router};

pub(super) fn routes() -> Router<AppState> {
    Router::new()
        .route("/v1/uploads", post(create_upload))
        .route("/v1/uploads/{id}/parts", post(add_part))
        .route("/v1/uploads/{id}/complete", post(complete_upload))
        .route("/v1/uploads/{id}/cancel", post(cancel_upload))
}

async fn create_upload(
    State(state): State<AppState>,
    ApiExtension(principal): ApiExtension<Principal>,
    body: JsonBody<CreateUploadRequest>,
) -> Result<Response, ApiError> {
    Ok(Json(state.files.create_upload(&principal.project, body.typed).await?).into_response())
}

async fn add_part(
    State(state): State<AppState>,
    ApiExtension(principal): ApiExtension<Principal>,
    ApiPath(id): ApiPath<String>,
    multipart: Result<Multipart, MultipartRejection>,
) -> Result<Response, ApiError> {
    let mut multipart = multipart.map_err(|rejection| multipart_rejection(&rejection, "data"))?;
    while let Some(field) = multipart.next_field().await.map_err(|e| multipart_error(&e))? {
        if field.name() == Some("data") {
            let files = &state.files;
            let part = stream_field(field, |data| files.add_upload_part(&principal.project, &id, data)).await??;
            return Ok(Json(part).into_response());
        }
        // Other fields are read (within the text field limit) and ignored.
        skip_field(field).await?;
    }
    Err(ApiError::invalid_request("Missing required parameter: 'data'.").with_param("data"))
}

async fn complete_upload(
    State(state): State<AppState>,
    ApiExtension(principal): ApiExtension<Principal>,
    ApiPath(id): ApiPath<String>,
    body: JsonBody<CompleteUploadRequest>,
) -> Result<Response, ApiError> {
    let request = body.typed;
    let upload = state
        .files
        .complete_upload(&principal.project, &id, &request.part_ids, request.md5.as_deref())
        .await?;
    Ok(Json(upload).into_response())
}

async fn cancel_upload(
    State(state): State<AppState>,
    ApiExtension(principal): ApiExtension<Principal>,
    ApiPath(id): ApiPath<String>,
) -> Result<Response, ApiError> {
    Ok(Json(state.files.cancel_upload(&principal.project, &id).await?).into_response())
}
