//! Baseten-style async inference (batches function): `POST /async_predict`,
//! `GET`/`DELETE /async_request/{id}`, `GET /async_request/{id}/output`, `GET /async_requests`,
//! and the same under a per-model base URL `/models/{model}` (`/async_predict`,
//! `/production/async_predict`, `/async_request/{id}`). Parse, call the async service, render.

use super::baseten_error::BasetenError;
use super::error::ApiError;
use super::extract::{ApiExtension, ApiPath};
use super::json_body::JsonBody;
use super::AppState;
use crate::async_requests::{AsyncError, AsyncRequestPage, AsyncRequestView, CancelOutcome, ListAsyncRequests};
use crate::auth::Principal;
use axum::extract::rejection::QueryRejection;
use axum::extract::{DefaultBodyLimit, Query, State};
use axum::http::header;
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Json, Router};
use serde::Deserialize;
use serde_json::{json, Map, Value};

/// Baseten's limit on an `/async_predict` body.
pub const MAX_ASYNC_BODY_BYTES: usize = 256 * 1024;

pub(super) fn routes() -> Router<AppState> {
    Router::new()
        .route("/async_predict", post(submit))
        .route("/models/{model}/async_predict", post(submit_for_model))
        .route("/models/{model}/production/async_predict", post(submit_for_model))
        .route("/async_request/{request_id}", get(status).delete(cancel))
        .route("/async_request/{request_id}/output", get(output))
        .route(
            "/models/{model}/async_request/{request_id}",
            get(status_for_model).delete(cancel_for_model),
        )
        .route("/async_requests", get(list))
        .layer(DefaultBodyLimit::max(MAX_ASYNC_BODY_BYTES))
}

async fn submit(
    State(state): State<AppState>,
    ApiExtension(principal): ApiExtension<Principal>,
    body: JsonBody<Map<String, Value>>,
) -> Result<Json<Value>, BasetenError> {
    let request_id = state
        .async_requests
        .submit(&principal.project, body.typed, None)
        .await?;
    Ok(Json(json!({ "request_id": request_id })))
}

async fn submit_for_model(
    State(state): State<AppState>,
    ApiExtension(principal): ApiExtension<Principal>,
    ApiPath(model): ApiPath<String>,
    body: JsonBody<Map<String, Value>>,
) -> Result<Json<Value>, BasetenError> {
    let request_id = state
        .async_requests
        .submit(&principal.project, body.typed, Some(&model))
        .await?;
    Ok(Json(json!({ "request_id": request_id })))
}

async fn status(
    State(state): State<AppState>,
    ApiExtension(principal): ApiExtension<Principal>,
    ApiPath(request_id): ApiPath<String>,
) -> Result<Json<AsyncRequestView>, BasetenError> {
    Ok(Json(state.async_requests.get(&principal.project, &request_id).await?))
}

async fn status_for_model(
    State(state): State<AppState>,
    ApiExtension(principal): ApiExtension<Principal>,
    ApiPath((model, request_id)): ApiPath<(String, String)>,
) -> Result<Json<AsyncRequestView>, BasetenError> {
    let view = state.async_requests.get(&principal.project, &request_id).await?;
    if view.model_id != model {
        return Err(AsyncError::NotFound(request_id).into());
    }
    Ok(Json(view))
}

async fn cancel(
    State(state): State<AppState>,
    ApiExtension(principal): ApiExtension<Principal>,
    ApiPath(request_id): ApiPath<String>,
) -> Result<Json<CancelOutcome>, BasetenError> {
    Ok(Json(
        state.async_requests.cancel(&principal.project, &request_id).await?,
    ))
}

async fn cancel_for_model(
    State(state): State<AppState>,
    ApiExtension(principal): ApiExtension<Principal>,
    ApiPath((model, request_id)): ApiPath<(String, String)>,
) -> Result<Json<CancelOutcome>, BasetenError> {
    let view = state.async_requests.get(&principal.project, &request_id).await?;
    if view.model_id != model {
        return Err(AsyncError::NotFound(request_id).into());
    }
    Ok(Json(
        state.async_requests.cancel(&principal.project, &request_id).await?,
    ))
}

async fn output(
    State(state): State<AppState>,
    ApiExtension(principal): ApiExtension<Principal>,
    ApiPath(request_id): ApiPath<String>,
) -> Result<Response, BasetenError> {
    let body = state.async_requests.output(&principal.project, &request_id).await?;
    Ok(([(header::CONTENT_TYPE, "application/json")], body).into_response())
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct ListParams {
    limit: Option<usize>,
    after: Option<String>,
    status: Option<String>,
}

async fn list(
    State(state): State<AppState>,
    ApiExtension(principal): ApiExtension<Principal>,
    query: Result<Query<ListParams>, QueryRejection>,
) -> Result<Json<AsyncRequestPage>, BasetenError> {
    let Query(params) = query.map_err(|rejection| {
        let error = ApiError::invalid_request(format!("Invalid query parameters: {}", rejection.body_text()));
        BasetenError::from_status(error.status, error.message)
    })?;
    let query = ListAsyncRequests {
        limit: params.limit,
        after: params.after,
        status: params.status,
    };
    Ok(Json(state.async_requests.list(&principal.project, &query).await?))
}
