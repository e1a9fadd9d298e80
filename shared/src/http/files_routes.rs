//! `/v1/files` and direct uploads.

use super::error::ApiError;
use super::extract::{ApiExtension, ApiPath, ApiQuery};
use super::json_body::JsonBody;
use super::multipart_stream::{multipart_error, multipart_rejection, read_text_field, skip_field, stream_field};
use super::{FilesState, PublicBaseUrl};
use crate::auth::Principal;
use crate::files::{DeclaredBytes, FileContent, FileReservation, ListFiles, NewFile, FILE_PAGE, MAX_FILE_BYTES};
use crate::openai::files::{
    CreateDirectUploadRequest, DirectUpload, ExpiresAfter, FileDeleted, FileList, FileObject, FilePurpose,
};
use crate::ports::ListOrder;
use crate::user_text::excerpt;
use axum::body::Body;
use axum::extract::multipart::MultipartRejection;
use axum::extract::{Multipart, Request, State};
use axum::http::{header, HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::{Extension, Json};
use futures::StreamExt;
use serde::Deserialize;

use super::api_routes::routes;
use utoipa_axum::router::OpenApiRouter;

pub(super) fn routes() -> OpenApiRouter<FilesState> {
    OpenApiRouter::default()
        .routes(routes!(create_file, list_files))
        .routes(routes!(get_file, delete_file))
        .routes(routes!(file_content, put_direct_content))
        .routes(routes!(create_direct_upload))
}

/// `POST /v1/files`'s multipart form.
#[derive(utoipa::ToSchema)]
#[allow(dead_code)]
struct FileUploadForm {
    /// The file's bytes.
    #[schema(value_type = String, format = Binary)]
    file: Vec<u8>,
    /// `batch`, `user_data`, `fine-tune`, `assistants`, `vision` or `evals`.
    purpose: String,
    /// `created_at`: the file expires `expires_after[seconds]` after it is created.
    #[schema(rename = "expires_after[anchor]")]
    expires_after_anchor: Option<String>,
    /// 3600 to 2592000.
    #[schema(rename = "expires_after[seconds]")]
    expires_after_seconds: Option<i64>,
}

fn purpose_of(text: &str) -> Result<FilePurpose, ApiError> {
    FilePurpose::parse_uploadable(text).ok_or_else(|| {
        ApiError::invalid_request(format!(
            "'{}' is not one of [{}] - 'purpose'",
            excerpt(text),
            FilePurpose::UPLOADABLE
        ))
        .with_param("purpose")
    })
}

fn parse_seconds(text: &str) -> Result<i64, ApiError> {
    text.trim().parse().map_err(|_| {
        ApiError::invalid_request(format!(
            "Invalid 'expires_after[seconds]': '{}' is not an integer.",
            excerpt(text)
        ))
        .with_param("expires_after[seconds]")
    })
}

/// `POST /v1/files`: upload a file (multipart).
#[utoipa::path(
    post,
    path = "/v1/files",
    tag = "files",
    params(("Idempotency-Key" = Option<String>, Header, description = "A retry with the same key answers with what the first request created")),
    request_body(content = FileUploadForm, content_type = "multipart/form-data"),
    responses((status = 200, body = FileObject), super::api_doc::OpenAiErrors)
)]
async fn create_file(
    State(state): State<FilesState>,
    ApiExtension(principal): ApiExtension<Principal>,
    headers: HeaderMap,
    multipart: Result<Multipart, MultipartRejection>,
) -> Result<Response, ApiError> {
    let mut multipart = multipart.map_err(|rejection| multipart_rejection(&rejection, "file"))?;
    let files = &state.files;
    // With an Idempotency-Key, a retry answers with the file the first request created.
    let reserved_id = match super::batch_routes::idempotency_key(&headers)? {
        None => None,
        Some(key) => match files.reserve_file_id(&principal.project, &key).await? {
            FileReservation::Existing(file) => return Ok(Json(file).into_response()),
            FileReservation::Id(id) => Some(id),
        },
    };
    let mut purpose: Option<String> = None;
    let mut filename: Option<String> = None;
    let mut anchor: Option<String> = None;
    let mut seconds: Option<i64> = None;
    let mut draft = None;
    let outcome: Result<(), ApiError> = async {
        while let Some(field) = multipart.next_field().await.map_err(|e| multipart_error(&e))? {
            match field.name().unwrap_or_default() {
                "purpose" => purpose = Some(read_text_field(field).await?),
                "expires_after[anchor]" => anchor = Some(read_text_field(field).await?),
                "expires_after[seconds]" => seconds = Some(parse_seconds(&read_text_field(field).await?)?),
                "file" if draft.is_none() => {
                    filename = Some(field.file_name().unwrap_or_default().to_owned());
                    // The limit of the purpose when it came first, else the largest; checked again at the end.
                    let max = match purpose.as_deref() {
                        Some(p) => crate::files::max_bytes_for(purpose_of(p)?),
                        None => MAX_FILE_BYTES,
                    };
                    let mut new_draft = match &reserved_id {
                        Some(id) => files.start_file_with_id(&principal.project, id).await?,
                        None => files.start_file(&principal.project).await?,
                    };
                    let written = stream_field(field, |body| files.write_file_bytes(&mut new_draft, body, max)).await;
                    let failed = match written {
                        Ok(Ok(())) => None,
                        Ok(Err(err)) => Some(ApiError::from(err)),
                        Err(err) => Some(err),
                    };
                    if let Some(err) = failed {
                        files.discard_file(&new_draft).await;
                        return Err(err);
                    }
                    draft = Some(new_draft);
                }
                _ => {
                    // Unknown fields are read (within the text field limit) and ignored.
                    skip_field(field).await?;
                }
            }
        }
        Ok(())
    }
    .await;
    let discard = |draft: Option<crate::files::FileDraft>| async move {
        if let Some(draft) = draft {
            files.discard_file(&draft).await;
        }
    };
    if let Err(err) = outcome {
        discard(draft).await;
        return Err(err);
    }
    let purpose = match purpose.as_deref() {
        None => {
            discard(draft).await;
            return Err(ApiError::invalid_request("Missing required parameter: 'purpose'.").with_param("purpose"));
        }
        Some(text) => match purpose_of(text) {
            Ok(p) => p,
            Err(err) => {
                discard(draft).await;
                return Err(err);
            }
        },
    };
    let Some(draft) = draft else {
        return Err(ApiError::invalid_request("Missing required parameter: 'file'.").with_param("file"));
    };
    let expires_after = match (anchor, seconds) {
        (None, None) => None,
        (anchor, Some(seconds)) => Some(ExpiresAfter {
            anchor: anchor.unwrap_or_else(|| "created_at".to_owned()),
            seconds,
        }),
        (Some(_), None) => {
            files.discard_file(&draft).await;
            return Err(
                ApiError::invalid_request("Missing required parameter: 'expires_after[seconds]'.")
                    .with_param("expires_after[seconds]"),
            );
        }
    };
    let new = NewFile {
        filename: filename.unwrap_or_default(),
        purpose,
        expires_after,
    };
    let file = files.finish_file(&principal.project, draft, new).await?;
    Ok(Json(file).into_response())
}

#[derive(Deserialize)]
struct ListParams {
    after: Option<String>,
    limit: Option<String>,
    order: Option<String>,
    purpose: Option<String>,
}

pub(super) fn parse_order(text: Option<&str>) -> Result<ListOrder, ApiError> {
    match text {
        None | Some("desc") => Ok(ListOrder::Desc),
        Some("asc") => Ok(ListOrder::Asc),
        Some(other) => Err(ApiError::invalid_request(format!(
            "Invalid 'order': '{}'. Expected 'asc' or 'desc'.",
            excerpt(other)
        ))
        .with_param("order")
        .with_code("invalid_value")),
    }
}

/// `GET /v1/files`: this project's files.
#[utoipa::path(
    get,
    path = "/v1/files",
    tag = "files",
    params(
        ("after" = Option<String>, Query, description = "The last file id of the previous page"),
        ("limit" = Option<u32>, Query, minimum = 1, maximum = 10000, description = "Page size (default 10000)"),
        ("order" = Option<String>, Query, description = "`asc` or `desc` by creation time (default `desc`)"),
        ("purpose" = Option<String>, Query, description = "Only files of this purpose"),
    ),
    responses((status = 200, body = FileList), super::api_doc::OpenAiErrors)
)]
async fn list_files(
    State(state): State<FilesState>,
    ApiExtension(principal): ApiExtension<Principal>,
    ApiQuery(params): ApiQuery<ListParams>,
) -> Result<Response, ApiError> {
    let query = ListFiles {
        after: params.after.filter(|a| !a.is_empty()),
        limit: FILE_PAGE.parse(params.limit.as_deref())?,
        order: parse_order(params.order.as_deref())?,
        purpose: match params.purpose.as_deref() {
            None | Some("") => None,
            Some("batch_output") => Some(FilePurpose::BatchOutput),
            Some(text) => Some(purpose_of(text)?),
        },
    };
    Ok(Json(state.files.list_files(&principal.project, query).await?).into_response())
}

/// `GET /v1/files/{id}`.
#[utoipa::path(
    get,
    path = "/v1/files/{id}",
    tag = "files",
    params(("id" = String, Path, description = "The file's id")),
    responses((status = 200, body = FileObject), super::api_doc::OpenAiErrors)
)]
async fn get_file(
    State(state): State<FilesState>,
    ApiExtension(principal): ApiExtension<Principal>,
    ApiPath(id): ApiPath<String>,
) -> Result<Response, ApiError> {
    Ok(Json(state.files.get_file(&principal.project, &id).await?).into_response())
}

/// `DELETE /v1/files/{id}`.
#[utoipa::path(
    delete,
    path = "/v1/files/{id}",
    tag = "files",
    params(("id" = String, Path, description = "The file's id")),
    responses((status = 200, body = FileDeleted), super::api_doc::OpenAiErrors)
)]
async fn delete_file(
    State(state): State<FilesState>,
    ApiExtension(principal): ApiExtension<Principal>,
    ApiPath(id): ApiPath<String>,
) -> Result<Response, ApiError> {
    Ok(Json(state.files.delete_file(&principal.project, &id).await?).into_response())
}

/// `GET /v1/files/{id}/content`: the file's bytes; a large file may answer with a redirect to a
/// presigned URL.
#[utoipa::path(
    get,
    path = "/v1/files/{id}/content",
    tag = "files",
    params(("id" = String, Path, description = "The file's id")),
    responses(
        (status = 200, description = "The file's bytes", content_type = "application/octet-stream", body = Vec<u8>),
        (status = 307, description = "The bytes are at the `Location` URL (presigned)"),
        super::api_doc::OpenAiErrors,
    )
)]
async fn file_content(
    State(state): State<FilesState>,
    ApiExtension(principal): ApiExtension<Principal>,
    ApiPath(id): ApiPath<String>,
) -> Result<Response, ApiError> {
    match state
        .files
        .file_content(&principal.project, &id, state.settings.inline_content_limit)
        .await?
    {
        FileContent::Redirect(url) => Ok((StatusCode::TEMPORARY_REDIRECT, [(header::LOCATION, url)]).into_response()),
        FileContent::Stream { bytes, filename, body } => {
            let safe: String = filename
                .chars()
                .map(|c| if c.is_ascii_graphic() && c != '"' { c } else { '_' })
                .collect();
            Ok((
                [
                    (header::CONTENT_TYPE, "application/octet-stream".to_owned()),
                    (header::CONTENT_LENGTH, bytes.to_string()),
                    (header::CONTENT_DISPOSITION, format!("attachment; filename=\"{safe}\"")),
                ],
                Body::from_stream(body),
            )
                .into_response())
        }
    }
}

/// `PUT /v1/files/{id}/content`: a direct upload's bytes, as the body.
#[utoipa::path(
    put,
    path = "/v1/files/{id}/content",
    tag = "files",
    params(("id" = String, Path, description = "The file's id, from `POST /v1/direct_uploads`")),
    request_body(content = Vec<u8>, content_type = "application/octet-stream"),
    responses((status = 200, body = FileObject), super::api_doc::OpenAiErrors)
)]
async fn put_direct_content(
    State(state): State<FilesState>,
    ApiExtension(principal): ApiExtension<Principal>,
    ApiPath(id): ApiPath<String>,
    request: Request,
) -> Result<Response, ApiError> {
    let body = request
        .into_body()
        .into_data_stream()
        .map(|chunk| chunk.map_err(|e| crate::ports::StorageError::Invalid(format!("upload interrupted: {e}"))))
        .boxed();
    Ok(Json(state.files.put_direct_content(&principal.project, &id, body).await?).into_response())
}

/// `POST /v1/direct_uploads`: a file id and a URL to `PUT` its bytes to (presigned where the store
/// offers it).
#[utoipa::path(
    post,
    path = "/v1/direct_uploads",
    tag = "files",
    request_body = CreateDirectUploadRequest,
    responses((status = 200, body = DirectUpload), super::api_doc::OpenAiErrors)
)]
async fn create_direct_upload(
    State(state): State<FilesState>,
    ApiExtension(principal): ApiExtension<Principal>,
    request_base_url: Option<Extension<PublicBaseUrl>>,
    body: JsonBody<CreateDirectUploadRequest>,
) -> Result<Response, ApiError> {
    let request = body.typed;
    let purpose = purpose_of(&request.purpose)?;
    let target = state
        .files
        .create_direct_upload(
            &principal.project,
            request.filename,
            purpose,
            DeclaredBytes {
                bytes: request.bytes,
                sha256: request.sha256,
            },
            request.expires_after,
        )
        .await?;
    let upload_url = match target.upload_url {
        Some(url) => url,
        // The gateway's own PUT route, at its configured (or host-given) address: never one
        // built from request headers.
        None => {
            let base = state
                .settings
                .public_url
                .clone()
                .or(request_base_url.map(|Extension(url)| url))
                .ok_or_else(|| {
                    tracing::error!("no public URL is configured for direct upload URLs");
                    ApiError::internal("The upload URL could not be built: the gateway has no public URL configured.")
                })?;
            base.join(&format!("/v1/files/{}/content", target.file.id))
        }
    };
    Ok(Json(DirectUpload {
        object: "direct_upload",
        file: target.file,
        upload_url,
        method: "PUT",
        upload_headers: target.upload_headers.into_iter().collect(),
        expires_at: target.expires_at,
    })
    .into_response())
}
