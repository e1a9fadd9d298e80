//! `/v1/batches`.

use super::error::ApiError;
use super::extract::{ApiExtension, ApiPath, ApiQuery};
use super::json_body::JsonBody;
use super::AppState;
use crate::auth::Principal;
use crate::batches::ListBatches;
use crate::openai::batches::CreateBatchRequest;
use crate::user_text::excerpt;
use axum::extract::State;
use axum::http::HeaderMap;
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Json, Router};
use serde::Deserialize;

pub(super) fn routes() -> Router<AppState> {
    Router::new()
        .route("/v1/batches", post(create_batch).get(list_batches))
        .route("/v1/batches/{id}", get(get_batch))
        .route("/v1/batches/{id}/cancel", post(cancel_batch))
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

async fn create_batch(
    State(state): State<AppState>,
    ApiExtension(principal): ApiExtension<Principal>,
    headers: HeaderMap,
    body: JsonBody<CreateBatchRequest>,
) -> Result<Response, ApiError> {
    let key = idempotency_key(&headers)?;
    let batch = state
        .batches
        .create_batch(&principal.project, body.typed, key.as_deref())
        .await?;
    Ok(Json(batch).into_response())
}

#[derive(Debug, Deserialize)]
struct ListParams {
    after: Option<String>,
    limit: Option<String>,
}

async fn list_batches(
    State(state): State<AppState>,
    ApiExtension(principal): ApiExtension<Principal>,
    ApiQuery(params): ApiQuery<ListParams>,
) -> Result<Response, ApiError> {
    let limit = match params.limit.as_deref() {
        None => 20,
        Some(text) => text.trim().parse::<usize>().map_err(|_| {
            ApiError::invalid_request(format!("Invalid 'limit': '{}' is not an integer.", excerpt(text)))
                .with_param("limit")
        })?,
    };
    let list = state
        .batches
        .list_batches(
            &principal.project,
            ListBatches {
                after: params.after.filter(|a| !a.is_empty()),
                limit,
            },
        )
        .await?;
    Ok(Json(list).into_response())
}

async fn get_batch(
    State(state): State<AppState>,
    ApiExtension(principal): ApiExtension<Principal>,
    ApiPath(id): ApiPath<String>,
) -> Result<Response, ApiError> {
    Ok(Json(state.batches.get_batch(&principal.project, &id).await?).into_response())
}

async fn cancel_batch(
    State(state): State<AppState>,
    ApiExtension(principal): ApiExtension<Principal>,
    ApiPath(id): ApiPath<String>,
) -> Result<Response, ApiError> {
    Ok(Json(state.batches.cancel_batch(&principal.project, &id).await?).into_response())
}
