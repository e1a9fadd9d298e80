//! `/v1/webhook_secrets` (a project's secrets signing its async-request webhooks) and
//! `/v1/webhook_endpoints` (batch event webhooks, the OpenAI SDK's `client.webhooks`).

use super::error::ApiError;
use super::extract::{ApiExtension, ApiPath, ApiQuery};
use super::json_body::JsonBody;
use super::AppState;
use crate::auth::Principal;
use crate::openai::json_body::parse_json_body;
use crate::user_text::excerpt;
use crate::webhooks::CreateEndpointRequest;
use axum::body::Bytes;
use axum::extract::State;
use axum::response::{IntoResponse, Response};
use axum::routing::{delete, get, post};
use axum::{Json, Router};
use serde::Deserialize;

pub(super) fn routes() -> Router<AppState> {
    Router::new()
        .route("/v1/webhook_secrets", post(create_secret).get(list_secrets))
        .route("/v1/webhook_secrets/{id}", delete(revoke_secret))
        .route("/v1/webhook_endpoints", post(create_endpoint).get(list_endpoints))
        .route("/v1/webhook_endpoints/{id}", get(get_endpoint).delete(delete_endpoint))
        .route("/v1/webhook_endpoints/{id}/rotate_secret", post(rotate_endpoint_secret))
        .route("/v1/webhook_endpoints/{id}/deliveries", get(list_deliveries))
}

/// `?limit=N` read as an integer, `default` when absent.
fn limit_param(limit: Option<&str>, default: usize) -> Result<usize, ApiError> {
    match limit {
        None => Ok(default),
        Some(text) => text.trim().parse::<usize>().map_err(|_| {
            ApiError::invalid_request(format!("Invalid 'limit': '{}' is not an integer.", excerpt(text)))
                .with_param("limit")
        }),
    }
}

async fn create_secret(
    State(state): State<AppState>,
    ApiExtension(principal): ApiExtension<Principal>,
) -> Result<Response, ApiError> {
    Ok(Json(state.webhook_secrets.create(&principal.project).await?).into_response())
}

async fn list_secrets(
    State(state): State<AppState>,
    ApiExtension(principal): ApiExtension<Principal>,
) -> Result<Response, ApiError> {
    let data = state.webhook_secrets.list(&principal.project).await?;
    Ok(Json(serde_json::json!({"object": "list", "data": data, "has_more": false})).into_response())
}

async fn revoke_secret(
    State(state): State<AppState>,
    ApiExtension(principal): ApiExtension<Principal>,
    ApiPath(id): ApiPath<String>,
) -> Result<Response, ApiError> {
    Ok(Json(state.webhook_secrets.revoke(&principal.project, &id).await?).into_response())
}

async fn create_endpoint(
    State(state): State<AppState>,
    ApiExtension(principal): ApiExtension<Principal>,
    body: JsonBody<CreateEndpointRequest>,
) -> Result<Response, ApiError> {
    let created = state.webhook_endpoints.create(&principal.project, body.typed).await?;
    Ok(Json(created).into_response())
}

#[derive(Debug, Deserialize)]
struct ListParams {
    after: Option<String>,
    limit: Option<String>,
}

async fn list_endpoints(
    State(state): State<AppState>,
    ApiExtension(principal): ApiExtension<Principal>,
    ApiQuery(params): ApiQuery<ListParams>,
) -> Result<Response, ApiError> {
    let limit = limit_param(params.limit.as_deref(), 20)?;
    let after = params.after.as_deref().filter(|a| !a.is_empty());
    Ok(Json(state.webhook_endpoints.list(&principal.project, after, limit).await?).into_response())
}

async fn get_endpoint(
    State(state): State<AppState>,
    ApiExtension(principal): ApiExtension<Principal>,
    ApiPath(id): ApiPath<String>,
) -> Result<Response, ApiError> {
    Ok(Json(state.webhook_endpoints.get(&principal.project, &id).await?).into_response())
}

async fn delete_endpoint(
    State(state): State<AppState>,
    ApiExtension(principal): ApiExtension<Principal>,
    ApiPath(id): ApiPath<String>,
) -> Result<Response, ApiError> {
    Ok(Json(state.webhook_endpoints.delete(&principal.project, &id).await?).into_response())
}

#[derive(Debug, Default, Deserialize)]
struct RotateSecretRequest {
    #[serde(default)]
    keep_old_secret_active_for_24_hours: bool,
}

/// The body is optional (the SDK sends `{}` or the flag).
async fn rotate_endpoint_secret(
    State(state): State<AppState>,
    ApiExtension(principal): ApiExtension<Principal>,
    ApiPath(id): ApiPath<String>,
    body: Bytes,
) -> Result<Response, ApiError> {
    let request = if body.iter().all(u8::is_ascii_whitespace) {
        RotateSecretRequest::default()
    } else {
        parse_json_body::<RotateSecretRequest>(&body)?.typed
    };
    let rotated = state
        .webhook_endpoints
        .rotate_secret(&principal.project, &id, request.keep_old_secret_active_for_24_hours)
        .await?;
    Ok(Json(rotated).into_response())
}

#[derive(Debug, Deserialize)]
struct DeliveryParams {
    limit: Option<String>,
}

async fn list_deliveries(
    State(state): State<AppState>,
    ApiExtension(principal): ApiExtension<Principal>,
    ApiPath(id): ApiPath<String>,
    ApiQuery(params): ApiQuery<DeliveryParams>,
) -> Result<Response, ApiError> {
    let limit = limit_param(params.limit.as_deref(), 20)?;
    let list = state
        .batch_webhooks
        .list_deliveries(&principal.project, &id, limit)
        .await?;
    Ok(Json(list).into_response())
}
