//! `/v1/uploads`: create, add parts (multipart field `data`), complete, cancel.

use super::api_routes::routes;
use super::batch_routes::idempotency_key;
use super::error::ApiError;
use super::extract::{ApiExtension, ApiPath};
use super::json_body::JsonBody;
use super::multipart_stream::{multipart_error, multipart_rejection, skip_field, stream_field};
use super::FilesState;
use crate::auth::Principal;
use crate::openai::files::{CompleteUploadRequest, CreateUploadRequest, UploadObject, UploadPart};
use axum::extract::multipart::MultipartRejection;
use axum::extract::{Multipart, State};
use axum::http::HeaderMap;
use axum::response::{IntoResponse, Response};
use axum::Json;
use utoipa_axum::router::OpenApiRouter;

pub(super) fn routes() -> OpenApiRouter<FilesState> {
    OpenApiRouter::default()
        .routes(routes!(create_upload))
        .routes(routes!(add_part))
        .routes(routes!(complete_upload))
        .routes(routes!(cancel_upload))
}

/// `POST /v1/uploads/{id}/parts`'s multipart form.
#[derive(utoipa::ToSchema)]
#[allow(dead_code)]
struct UploadPartForm {
    /// The part's bytes (up to 64 MB).
    #[schema(value_type = String, format = Binary)]
    data: Vec<u8>,
}

/// `POST /v1/uploads`: start an upload of `bytes` bytes, to be sent in parts.
#[utoipa::path(
    post,
    path = "/v1/uploads",
    tag = "files",
    params(("Idempotency-Key" = Option<String>, Header, description = "A retry with the same key and parameters answers with the upload the first request created, as it is now")),
    request_body = CreateUploadRequest,
    responses((status = 200, body = UploadObject), super::api_doc::OpenAiErrors)
)]
async fn create_upload(
    State(state): State<FilesState>,
    ApiExtension(principal): ApiExtension<Principal>,
    headers: HeaderMap,
    body: JsonBody<CreateUploadRequest>,
) -> Result<Response, ApiError> {
    let key = idempotency_key(&headers)?;
    let upload = state
        .files
        .create_upload_once(&principal.project, body.typed, key.as_deref())
        .await?;
    Ok(Json(upload).into_response())
}

/// `POST /v1/uploads/{id}/parts`: add one part (multipart field `data`).
#[utoipa::path(
    post,
    path = "/v1/uploads/{id}/parts",
    tag = "files",
    params(("id" = String, Path, description = "The upload's id")),
    request_body(content = UploadPartForm, content_type = "multipart/form-data"),
    responses((status = 200, body = UploadPart), super::api_doc::OpenAiErrors)
)]
async fn add_part(
    State(state): State<FilesState>,
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

/// `POST /v1/uploads/{id}/complete`: join the parts, in the order given, into a file.
#[utoipa::path(
    post,
    path = "/v1/uploads/{id}/complete",
    tag = "files",
    params(
        ("id" = String, Path, description = "The upload's id"),
        ("Idempotency-Key" = Option<String>, Header, description = "A retry with the same key, parts and MD5 answers with the completed upload"),
    ),
    request_body = CompleteUploadRequest,
    responses((status = 200, body = UploadObject), super::api_doc::OpenAiErrors)
)]
async fn complete_upload(
    State(state): State<FilesState>,
    ApiExtension(principal): ApiExtension<Principal>,
    ApiPath(id): ApiPath<String>,
    headers: HeaderMap,
    body: JsonBody<CompleteUploadRequest>,
) -> Result<Response, ApiError> {
    let key = idempotency_key(&headers)?;
    let request = body.typed;
    let upload = state
        .files
        .complete_upload_once(
            &principal.project,
            &id,
            &request.part_ids,
            request.md5.as_deref(),
            key.as_deref(),
        )
        .await?;
    Ok(Json(upload).into_response())
}

/// `POST /v1/uploads/{id}/cancel`: cancel an upload; its parts are deleted.
#[utoipa::path(
    post,
    path = "/v1/uploads/{id}/cancel",
    tag = "files",
    params(("id" = String, Path, description = "The upload's id")),
    responses((status = 200, body = UploadObject), super::api_doc::OpenAiErrors)
)]
async fn cancel_upload(
    State(state): State<FilesState>,
    ApiExtension(principal): ApiExtension<Principal>,
    ApiPath(id): ApiPath<String>,
) -> Result<Response, ApiError> {
    Ok(Json(state.files.cancel_upload(&principal.project, &id).await?).into_response())
}
