//! Baseten-style async inference (batches function): `POST /async_predict`,
//! `GET`/`DELETE /async_request/{id}`, `GET /async_request/{id}/output`, `GET /async_requests`,
//! and the same under a per-model base URL `/models/{model}` (`/async_predict`,
//! `/production/async_predict`, `/async_request/{id}`). Parse, call the async service, render.

use super::api_routes::routes;
use super::baseten_error::BasetenError;
use super::error::ApiError;
use super::extract::{ApiExtension, ApiPath};
use super::json_body::JsonBody;
use super::BatchesState;
use crate::async_requests::{
    AsyncError, AsyncPredictDoc, AsyncRequestPage, AsyncRequestView, CancelOutcome, ListAsyncRequests, ASYNC_PAGE,
};
use crate::auth::Principal;
use axum::extract::rejection::QueryRejection;
use axum::extract::{DefaultBodyLimit, Query, State};
use axum::http::header;
use axum::response::{IntoResponse, Response};
use axum::Json;
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};
use utoipa_axum::router::OpenApiRouter;

/// Baseten's limit on an `/async_predict` body.
pub(crate) const MAX_ASYNC_BODY_BYTES: usize = 256 * 1024;

pub(super) fn routes() -> OpenApiRouter<BatchesState> {
    OpenApiRouter::default()
        .routes(routes!(submit))
        .routes(routes!(submit_for_model))
        .routes(routes!(submit_for_production_model))
        .routes(routes!(status, cancel))
        .routes(routes!(output))
        .routes(routes!(status_for_model, cancel_for_model))
        .routes(routes!(list))
        .layer(DefaultBodyLimit::max(MAX_ASYNC_BODY_BYTES))
}

/// `{"request_id": "<id>"}`.
#[derive(Debug, Serialize, utoipa::ToSchema)]
struct AsyncAccepted {
    request_id: String,
}

/// `POST /async_predict`: queue `model_input` for `endpoint`; the result is kept and, with a
/// `webhook_endpoint`, posted there signed.
#[utoipa::path(
    post,
    path = "/async_predict",
    tag = "async",
    request_body = AsyncPredictDoc,
    responses((status = 200, body = AsyncAccepted), super::api_doc::BasetenErrors)
)]
async fn submit(
    State(state): State<BatchesState>,
    ApiExtension(principal): ApiExtension<Principal>,
    body: Result<JsonBody<Map<String, Value>>, ApiError>,
) -> Result<Json<AsyncAccepted>, BasetenError> {
    accept(&state, &principal, body, None).await
}

/// `POST /models/{model}/async_predict`: as `/async_predict`, for the model in the path.
#[utoipa::path(
    post,
    path = "/models/{model}/async_predict",
    tag = "async",
    params(("model" = String, Path, description = "The model (or `/inference` function) to run")),
    request_body = AsyncPredictDoc,
    responses((status = 200, body = AsyncAccepted), super::api_doc::BasetenErrors)
)]
async fn submit_for_model(
    State(state): State<BatchesState>,
    ApiExtension(principal): ApiExtension<Principal>,
    ApiPath(model): ApiPath<String>,
    body: Result<JsonBody<Map<String, Value>>, ApiError>,
) -> Result<Json<AsyncAccepted>, BasetenError> {
    accept(&state, &principal, body, Some(&model)).await
}

/// `POST /models/{model}/production/async_predict`: Baseten's production-environment URL.
#[utoipa::path(
    post,
    path = "/models/{model}/production/async_predict",
    tag = "async",
    params(("model" = String, Path, description = "The model (or `/inference` function) to run")),
    request_body = AsyncPredictDoc,
    responses((status = 200, body = AsyncAccepted), super::api_doc::BasetenErrors)
)]
async fn submit_for_production_model(
    State(state): State<BatchesState>,
    ApiExtension(principal): ApiExtension<Principal>,
    ApiPath(model): ApiPath<String>,
    body: Result<JsonBody<Map<String, Value>>, ApiError>,
) -> Result<Json<AsyncAccepted>, BasetenError> {
    accept(&state, &principal, body, Some(&model)).await
}

/// Queue a submission (for the model of a per-model URL, when there is one).
async fn accept(
    state: &BatchesState,
    principal: &Principal,
    body: Result<JsonBody<Map<String, Value>>, ApiError>,
    path_model: Option<&str>,
) -> Result<Json<AsyncAccepted>, BasetenError> {
    let body = body.map_err(unreadable_body)?;
    let request_id = state
        .async_requests
        .submit_by(&principal.project, principal.key_id.as_deref(), body.typed, path_model)
        .await?;
    Ok(Json(AsyncAccepted { request_id }))
}

/// A body that is not a JSON object: Baseten's `MODEL_INVALID_INPUT`, naming the field (`body`
/// when the JSON itself is malformed; the message gives the line and column).
fn unreadable_body(error: ApiError) -> BasetenError {
    if !matches!(error.status.as_u16(), 400 | 422) {
        return BasetenError::from_status(error.status, error.message);
    }
    BasetenError {
        status: error.status,
        code: "MODEL_INVALID_INPUT",
        field: Some(error.param.unwrap_or_else(|| "body".to_owned())),
        message: error.message,
    }
}

/// `GET /async_request/{request_id}`: the request's status, attempts and webhook deliveries.
#[utoipa::path(
    get,
    path = "/async_request/{request_id}",
    tag = "async",
    params(("request_id" = String, Path)),
    responses((status = 200, body = AsyncRequestView), super::api_doc::BasetenErrors)
)]
async fn status(
    State(state): State<BatchesState>,
    ApiExtension(principal): ApiExtension<Principal>,
    ApiPath(request_id): ApiPath<String>,
) -> Result<Json<AsyncRequestView>, BasetenError> {
    Ok(Json(state.async_requests.get(&principal.project, &request_id).await?))
}

/// `GET /models/{model}/async_request/{request_id}`: as above, for a request of this model.
#[utoipa::path(
    get,
    path = "/models/{model}/async_request/{request_id}",
    tag = "async",
    params(("model" = String, Path), ("request_id" = String, Path)),
    responses((status = 200, body = AsyncRequestView), super::api_doc::BasetenErrors)
)]
async fn status_for_model(
    State(state): State<BatchesState>,
    ApiExtension(principal): ApiExtension<Principal>,
    ApiPath((model, request_id)): ApiPath<(String, String)>,
) -> Result<Json<AsyncRequestView>, BasetenError> {
    let view = state.async_requests.get(&principal.project, &request_id).await?;
    if view.model_id != model {
        return Err(AsyncError::NotFound(request_id).into());
    }
    Ok(Json(view))
}

/// `DELETE /async_request/{request_id}`: cancel a request that has not run yet.
#[utoipa::path(
    delete,
    path = "/async_request/{request_id}",
    tag = "async",
    params(("request_id" = String, Path)),
    responses((status = 200, body = CancelOutcome), super::api_doc::BasetenErrors)
)]
async fn cancel(
    State(state): State<BatchesState>,
    ApiExtension(principal): ApiExtension<Principal>,
    ApiPath(request_id): ApiPath<String>,
) -> Result<Json<CancelOutcome>, BasetenError> {
    Ok(Json(
        state.async_requests.cancel(&principal.project, &request_id).await?,
    ))
}

/// `DELETE /models/{model}/async_request/{request_id}`: as above, for a request of this model.
#[utoipa::path(
    delete,
    path = "/models/{model}/async_request/{request_id}",
    tag = "async",
    params(("model" = String, Path), ("request_id" = String, Path)),
    responses((status = 200, body = CancelOutcome), super::api_doc::BasetenErrors)
)]
async fn cancel_for_model(
    State(state): State<BatchesState>,
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

/// `GET /async_request/{request_id}/output`: the finished request's answer, as its endpoint
/// answered it.
#[utoipa::path(
    get,
    path = "/async_request/{request_id}/output",
    tag = "async",
    params(("request_id" = String, Path)),
    responses((status = 200, description = "The endpoint's answer", body = Object), super::api_doc::BasetenErrors)
)]
async fn output(
    State(state): State<BatchesState>,
    ApiExtension(principal): ApiExtension<Principal>,
    ApiPath(request_id): ApiPath<String>,
) -> Result<Response, BasetenError> {
    let body = state.async_requests.output(&principal.project, &request_id).await?;
    Ok(([(header::CONTENT_TYPE, "application/json")], body).into_response())
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct ListParams {
    limit: Option<String>,
    after: Option<String>,
    status: Option<String>,
}

/// `GET /async_requests`: this project's requests, newest first.
#[utoipa::path(
    get,
    path = "/async_requests",
    tag = "async",
    params(
        ("limit" = Option<u32>, Query, description = "Page size"),
        ("after" = Option<String>, Query, description = "The last request id of the previous page"),
        ("status" = Option<String>, Query, description = "Only requests in this status"),
    ),
    responses((status = 200, body = AsyncRequestPage), super::api_doc::BasetenErrors)
)]
async fn list(
    State(state): State<BatchesState>,
    ApiExtension(principal): ApiExtension<Principal>,
    query: Result<Query<ListParams>, QueryRejection>,
) -> Result<Json<AsyncRequestPage>, BasetenError> {
    let Query(params) = query.map_err(|rejection| {
        let error = ApiError::invalid_request(format!("Invalid query parameters: {}", rejection.body_text()));
        BasetenError::from_status(error.status, error.message)
    })?;
    let query = ListAsyncRequests {
        limit: ASYNC_PAGE
            .parse(params.limit.as_deref())
            .map_err(|e| AsyncError::invalid("limit", e.to_string()))?,
        after: params.after,
        status: params.status,
    };
    Ok(Json(state.async_requests.list(&principal.project, &query).await?))
}
