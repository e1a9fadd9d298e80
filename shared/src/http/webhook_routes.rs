//! `/v1/webhook_secrets` (a project's secrets signing its async-request webhooks) and
//! `/v1/webhook_endpoints` (batch event webhooks, the OpenAI SDK's `client.webhooks`).

use super::api_routes::routes;
use super::error::ApiError;
use super::extract::{ApiExtension, ApiPath, ApiQuery};
use super::json_body::JsonBody;
use super::BatchesState;
use crate::auth::Principal;
use crate::openai::json_body::parse_json_body;
use crate::webhooks::{
    CreateEndpointRequest, CreatedEndpoint, CreatedSecret, DeletedEndpoint, DeliveryList, EndpointList, RevokedSecret,
    SecretSummary, WebhookEndpoint, WEBHOOK_PAGE,
};
use axum::body::Bytes;
use axum::extract::State;
use axum::response::{IntoResponse, Response};
use axum::Json;
use serde::{Deserialize, Serialize};
use utoipa_axum::router::OpenApiRouter;

pub(super) fn routes() -> OpenApiRouter<BatchesState> {
    OpenApiRouter::default()
        .routes(routes!(create_secret, list_secrets))
        .routes(routes!(revoke_secret))
        .routes(routes!(create_endpoint, list_endpoints))
        .routes(routes!(get_endpoint, delete_endpoint))
        .routes(routes!(rotate_endpoint_secret))
        .routes(routes!(list_deliveries))
}

/// `POST /v1/webhook_secrets`: a new secret signing this project's async-request webhooks; its
/// value is shown only here.
#[utoipa::path(post, path = "/v1/webhook_secrets", tag = "webhooks", responses((status = 200, body = CreatedSecret), super::api_doc::OpenAiErrors))]
async fn create_secret(
    State(state): State<BatchesState>,
    ApiExtension(principal): ApiExtension<Principal>,
) -> Result<Response, ApiError> {
    let created = state.webhook_secrets.create(&principal.project).await?;
    // Deliveries that waited for a secret go out now, not at their next retry.
    if let Err(err) = state.async_requests.secret_created(&principal.project).await {
        tracing::warn!(error = %err, "could not bring forward the deliveries waiting for a secret");
    }
    Ok(Json(created).into_response())
}

/// This project's webhook secrets, without their values.
#[derive(Debug, Serialize, utoipa::ToSchema)]
struct SecretList {
    /// Always `list`.
    object: &'static str,
    data: Vec<SecretSummary>,
    has_more: bool,
}

/// `GET /v1/webhook_secrets`.
#[utoipa::path(get, path = "/v1/webhook_secrets", tag = "webhooks", responses((status = 200, body = SecretList), super::api_doc::OpenAiErrors))]
async fn list_secrets(
    State(state): State<BatchesState>,
    ApiExtension(principal): ApiExtension<Principal>,
) -> Result<Response, ApiError> {
    let data = state.webhook_secrets.list(&principal.project).await?;
    let list = SecretList {
        object: "list",
        data,
        has_more: false,
    };
    Ok(Json(list).into_response())
}

/// `DELETE /v1/webhook_secrets/{id}`: stop signing with a secret.
#[utoipa::path(
    delete,
    path = "/v1/webhook_secrets/{id}",
    tag = "webhooks",
    params(("id" = String, Path, description = "The secret's id")),
    responses((status = 200, body = RevokedSecret), super::api_doc::OpenAiErrors)
)]
async fn revoke_secret(
    State(state): State<BatchesState>,
    ApiExtension(principal): ApiExtension<Principal>,
    ApiPath(id): ApiPath<String>,
) -> Result<Response, ApiError> {
    Ok(Json(state.webhook_secrets.revoke(&principal.project, &id).await?).into_response())
}

/// `POST /v1/webhook_endpoints`: an endpoint for batch events; its signing secret is shown only
/// here.
#[utoipa::path(
    post,
    path = "/v1/webhook_endpoints",
    tag = "webhooks",
    request_body = CreateEndpointRequest,
    responses((status = 200, body = CreatedEndpoint), super::api_doc::OpenAiErrors)
)]
async fn create_endpoint(
    State(state): State<BatchesState>,
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

/// `GET /v1/webhook_endpoints`.
#[utoipa::path(
    get,
    path = "/v1/webhook_endpoints",
    tag = "webhooks",
    params(
        ("after" = Option<String>, Query, description = "The last endpoint id of the previous page"),
        ("limit" = Option<u32>, Query, minimum = 1, maximum = 100, description = "Page size (default 20)"),
    ),
    responses((status = 200, body = EndpointList), super::api_doc::OpenAiErrors)
)]
async fn list_endpoints(
    State(state): State<BatchesState>,
    ApiExtension(principal): ApiExtension<Principal>,
    ApiQuery(params): ApiQuery<ListParams>,
) -> Result<Response, ApiError> {
    let limit = WEBHOOK_PAGE.parse(params.limit.as_deref())?;
    let after = params.after.as_deref().filter(|a| !a.is_empty());
    Ok(Json(state.webhook_endpoints.list(&principal.project, after, limit).await?).into_response())
}

/// `GET /v1/webhook_endpoints/{id}`.
#[utoipa::path(
    get,
    path = "/v1/webhook_endpoints/{id}",
    tag = "webhooks",
    params(("id" = String, Path, description = "The endpoint's id")),
    responses((status = 200, body = WebhookEndpoint), super::api_doc::OpenAiErrors)
)]
async fn get_endpoint(
    State(state): State<BatchesState>,
    ApiExtension(principal): ApiExtension<Principal>,
    ApiPath(id): ApiPath<String>,
) -> Result<Response, ApiError> {
    Ok(Json(state.webhook_endpoints.get(&principal.project, &id).await?).into_response())
}

/// `DELETE /v1/webhook_endpoints/{id}`.
#[utoipa::path(
    delete,
    path = "/v1/webhook_endpoints/{id}",
    tag = "webhooks",
    params(("id" = String, Path, description = "The endpoint's id")),
    responses((status = 200, body = DeletedEndpoint), super::api_doc::OpenAiErrors)
)]
async fn delete_endpoint(
    State(state): State<BatchesState>,
    ApiExtension(principal): ApiExtension<Principal>,
    ApiPath(id): ApiPath<String>,
) -> Result<Response, ApiError> {
    Ok(Json(state.webhook_endpoints.delete(&principal.project, &id).await?).into_response())
}

#[derive(Debug, Default, Deserialize, utoipa::ToSchema)]
struct RotateSecretRequest {
    #[serde(default)]
    keep_old_secret_active_for_24_hours: bool,
}

/// `POST /v1/webhook_endpoints/{id}/rotate_secret`: a new signing secret; the old one may stay
/// valid for 24 hours. The body is optional (the SDK sends `{}` or the flag).
#[utoipa::path(
    post,
    path = "/v1/webhook_endpoints/{id}/rotate_secret",
    tag = "webhooks",
    params(("id" = String, Path, description = "The endpoint's id")),
    request_body(content = Option<RotateSecretRequest>),
    responses((status = 200, body = CreatedEndpoint), super::api_doc::OpenAiErrors)
)]
async fn rotate_endpoint_secret(
    State(state): State<BatchesState>,
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

/// `GET /v1/webhook_endpoints/{id}/deliveries`: the latest deliveries, newest first.
#[utoipa::path(
    get,
    path = "/v1/webhook_endpoints/{id}/deliveries",
    tag = "webhooks",
    params(
        ("id" = String, Path, description = "The endpoint's id"),
        ("limit" = Option<u32>, Query, minimum = 1, maximum = 100, description = "How many (default 20)"),
    ),
    responses((status = 200, body = DeliveryList), super::api_doc::OpenAiErrors)
)]
async fn list_deliveries(
    State(state): State<BatchesState>,
    ApiExtension(principal): ApiExtension<Principal>,
    ApiPath(id): ApiPath<String>,
    ApiQuery(params): ApiQuery<DeliveryParams>,
) -> Result<Response, ApiError> {
    let limit = WEBHOOK_PAGE.parse(params.limit.as_deref())?;
    let list = state
        .batch_webhooks
        .list_deliveries(&principal.project, &id, limit)
        .await?;
    Ok(Json(list).into_response())
}
