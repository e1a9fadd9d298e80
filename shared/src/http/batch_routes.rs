//! `/v1/batches`.

use super::api_routes::routes;
use super::error::ApiError;
use super::extract::{ApiExtension, ApiPath, ApiQuery};
use super::json_body::JsonBody;
use super::BatchesState;
use crate::auth::Principal;
use crate::batches::{ListBatches, BATCH_PAGE};
use crate::openai::batches::{BatchList, BatchObject, CreateBatchRequest};
use crate::ports::BatchId;
use crate::user_text::excerpt;
use axum::extract::State;
use axum::http::HeaderMap;
use axum::response::{IntoResponse, Response};
use axum::Json;
use serde::Deserialize;
use utoipa_axum::router::OpenApiRouter;

pub(super) fn routes() -> OpenApiRouter<BatchesState> {
    OpenApiRouter::default()
        .routes(routes!(create_batch, list_batches))
        .routes(routes!(get_batch))
        .routes(routes!(cancel_batch))
}

/// The `Idempotency-Key` header, checked.
pub(super) fn idempotency_key(headers: &HeaderMap) -> Result<Option<String>, ApiError> {
    let Some(value) = headers.get("idempotency-key") else {
        return Ok(None);
    };
    match value.to_str() {
        Ok(key) if crate::idempotency::valid_key(key) => Ok(Some(key.to_owned())),
        _ => Err(ApiError::invalid_request(format!(
            "Invalid 'Idempotency-Key': use 1 to {} printable ASCII characters.",
            crate::idempotency::MAX_KEY_LEN
        ))
        .with_param("Idempotency-Key")),
    }
}

/// `POST /v1/batches`: run an uploaded JSONL file of requests as a batch.
#[utoipa::path(
    post,
    path = "/v1/batches",
    tag = "batches",
    params(("Idempotency-Key" = Option<String>, Header, description = "A retry with the same key answers with what the first request created")),
    request_body = CreateBatchRequest,
    responses((status = 200, body = BatchObject), super::api_doc::OpenAiErrors)
)]
async fn create_batch(
    State(state): State<BatchesState>,
    ApiExtension(principal): ApiExtension<Principal>,
    headers: HeaderMap,
    body: JsonBody<CreateBatchRequest>,
) -> Result<Response, ApiError> {
    let key = idempotency_key(&headers)?;
    let batch = state
        .batches
        .create_batch_by(
            &principal.project,
            principal.key_id.as_deref(),
            body.typed,
            key.as_deref(),
        )
        .await?;
    Ok(Json(batch).into_response())
}

#[derive(Debug, Deserialize)]
struct ListParams {
    after: Option<String>,
    limit: Option<String>,
}

/// `GET /v1/batches`: this project's batches, newest first.
#[utoipa::path(
    get,
    path = "/v1/batches",
    tag = "batches",
    params(
        ("after" = Option<String>, Query, description = "The last batch id of the previous page"),
        ("limit" = Option<u32>, Query, minimum = 1, maximum = 100, description = "Page size (default 20)"),
    ),
    responses((status = 200, body = BatchList), super::api_doc::OpenAiErrors)
)]
async fn list_batches(
    State(state): State<BatchesState>,
    ApiExtension(principal): ApiExtension<Principal>,
    ApiQuery(params): ApiQuery<ListParams>,
) -> Result<Response, ApiError> {
    let limit = BATCH_PAGE.parse(params.limit.as_deref())?;
    let list = state
        .batches
        .list_batches(
            &principal.project,
            ListBatches {
                after: params.after.filter(|a| !a.is_empty()).map(BatchId::new),
                limit,
            },
        )
        .await?;
    Ok(Json(list).into_response())
}

/// `GET /v1/batches/{id}`.
#[utoipa::path(
    get,
    path = "/v1/batches/{id}",
    tag = "batches",
    params(
        ("id" = String, Path, description = "The batch's id"),
        ("live" = Option<bool>, Query, description = "A Nimbus extension: `true` adds to `request_counts` what running chunks have not saved yet (within 2 s of lines finishing) and keeps them publishing it for the next minute; the local server always does"),
    ),
    responses((status = 200, body = BatchObject), super::api_doc::OpenAiErrors)
)]
async fn get_batch(
    State(state): State<BatchesState>,
    ApiExtension(principal): ApiExtension<Principal>,
    ApiPath(id): ApiPath<String>,
    ApiQuery(params): ApiQuery<GetParams>,
) -> Result<Response, ApiError> {
    let live = match params.live.as_deref() {
        None | Some("false") => false,
        Some("true") => true,
        Some(other) => {
            return Err(ApiError::invalid_request(format!(
                "Invalid 'live': '{}'. Expected true or false.",
                excerpt(other)
            ))
            .with_param("live"))
        }
    };
    let id = BatchId::new(id);
    Ok(Json(state.batches.get_batch(&principal.project, &id, live).await?).into_response())
}

#[derive(Debug, Deserialize)]
struct GetParams {
    live: Option<String>,
}

/// `POST /v1/batches/{id}/cancel`: stop the batch; finished lines are kept.
#[utoipa::path(
    post,
    path = "/v1/batches/{id}/cancel",
    tag = "batches",
    params(("id" = String, Path, description = "The batch's id")),
    responses((status = 200, body = BatchObject), super::api_doc::OpenAiErrors)
)]
async fn cancel_batch(
    State(state): State<BatchesState>,
    ApiExtension(principal): ApiExtension<Principal>,
    ApiPath(id): ApiPath<String>,
) -> Result<Response, ApiError> {
    let id = BatchId::new(id);
    Ok(Json(state.batches.cancel_batch(&principal.project, &id).await?).into_response())
}
