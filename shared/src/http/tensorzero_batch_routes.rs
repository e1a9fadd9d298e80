//! TensorZero's batch API (batches function): `POST /batch_inference`,
//! `GET /batch_inference/{batch_id}` and `GET /batch_inference/{batch_id}/inference/{inference_id}`.
//! Parse, call the batch engine, render; errors in TensorZero's `{"error": "…"}`.

use super::api_routes::routes;
use super::error::ApiError;
use super::extract::{ApiExtension, ApiPath};
use super::tensorzero_error::{TensorZeroError, TensorZeroJson};
use super::BatchesState;
use crate::auth::Principal;
use crate::batches::{BatchInferenceCreated, PollQuery};
use crate::paging::PageBounds;
use crate::ports::ProjectId;
use crate::tensorzero::batch_request::BatchInferenceRequest;
use crate::user_text::excerpt;
use axum::extract::rejection::QueryRejection;
use axum::extract::{Query, State};
use axum::response::{IntoResponse, Response};
use axum::Json;
use utoipa_axum::router::OpenApiRouter;
use uuid::Uuid;

pub(super) fn routes() -> OpenApiRouter<BatchesState> {
    OpenApiRouter::default()
        .routes(routes!(submit))
        .routes(routes!(poll_batch))
        .routes(routes!(poll_inference))
}

fn parse_uuid(name: &str, value: &str) -> Result<Uuid, TensorZeroError> {
    Uuid::parse_str(value)
        .map_err(|_| TensorZeroError::bad_request(format!("Invalid `{name}` `{}`: it must be a UUID.", excerpt(value))))
}

/// `POST /batch_inference`: many `/inference` calls run as one batch (gzip-encoded bodies accepted).
#[utoipa::path(
    post,
    path = "/batch_inference",
    tag = "tensorzero",
    request_body = BatchInferenceRequest,
    responses((status = 200, body = BatchInferenceCreated), super::api_doc::TensorZeroErrors)
)]
async fn submit(
    State(state): State<BatchesState>,
    ApiExtension(principal): ApiExtension<Principal>,
    TensorZeroJson(request): TensorZeroJson<BatchInferenceRequest>,
) -> Result<Json<BatchInferenceCreated>, TensorZeroError> {
    let created = state
        .batches
        .submit_batch_inference_by(&principal.project, principal.key_id.as_deref(), request)
        .await?;
    Ok(Json(created))
}

/// A poll's `limit`: any positive number of inferences (all of them when absent).
const BATCH_POLL_PAGE: PageBounds = PageBounds::new(usize::MAX, usize::MAX);

/// `limit` (≥ 1), `after` (an inference id of the batch), `include_failures` (true/false).
fn poll_query(pairs: Vec<(String, String)>) -> Result<PollQuery, TensorZeroError> {
    let mut query = PollQuery::default();
    let mut seen = Vec::new();
    for (name, value) in pairs {
        if seen.contains(&name) {
            return Err(TensorZeroError::bad_request(format!(
                "Query parameter `{}` is given twice.",
                excerpt(&name)
            )));
        }
        match name.as_str() {
            "limit" => {
                let limit = BATCH_POLL_PAGE.parse(Some(&value)).map_err(|_| {
                    TensorZeroError::bad_request(format!(
                        "Invalid `limit` `{}`: it must be a positive integer.",
                        excerpt(&value)
                    ))
                })?;
                query.limit = Some(limit.get());
            }
            "after" => query.after = Some(parse_uuid("after", &value)?),
            "include_failures" => {
                query.include_failures = match value.as_str() {
                    "true" => true,
                    "false" => false,
                    _ => {
                        return Err(TensorZeroError::bad_request(format!(
                            "Invalid `include_failures` `{}`: it must be `true` or `false`.",
                            excerpt(&value)
                        )))
                    }
                }
            }
            _ => {
                return Err(TensorZeroError::bad_request(format!(
                    "Unknown query parameter `{}`: use `limit`, `after` and `include_failures`.",
                    excerpt(&name)
                )))
            }
        }
        seen.push(name);
    }
    Ok(query)
}

/// `GET /batch_inference/{batch_id}`: `pending`, `failed`, or `completed` with the inferences.
#[utoipa::path(
    get,
    path = "/batch_inference/{batch_id}",
    tag = "tensorzero",
    params(
        ("batch_id" = Uuid, Path, description = "The batch's id"),
        ("limit" = Option<u32>, Query, minimum = 1, description = "At most this many inferences (all by default)"),
        ("after" = Option<Uuid>, Query, description = "Inferences after this one, in input order"),
        ("include_failures" = Option<bool>, Query, description = "List failed items in `failed_inferences`"),
    ),
    responses((status = 200, body = crate::batches::BatchInferencePoll), super::api_doc::TensorZeroErrors)
)]
async fn poll_batch(
    State(state): State<BatchesState>,
    principal: Result<ApiExtension<Principal>, ApiError>,
    path: Result<ApiPath<String>, ApiError>,
    query: Result<Query<Vec<(String, String)>>, QueryRejection>,
) -> Result<Response, TensorZeroError> {
    let ApiExtension(principal) = principal?;
    let ApiPath(batch_id) = path?;
    let batch_id = parse_uuid("batch_id", &batch_id)?;
    let Query(pairs) = query.map_err(ApiError::from)?;
    poll(&state, &principal.project, batch_id, poll_query(pairs)?).await
}

/// `GET /batch_inference/{batch_id}/inference/{inference_id}`: one item of a batch.
#[utoipa::path(
    get,
    path = "/batch_inference/{batch_id}/inference/{inference_id}",
    tag = "tensorzero",
    params(
        ("batch_id" = Uuid, Path, description = "The batch's id"),
        ("inference_id" = Uuid, Path, description = "The item's inference id"),
        ("include_failures" = Option<bool>, Query, description = "List the item in `failed_inferences` if it failed"),
    ),
    responses((status = 200, body = crate::batches::BatchInferencePoll), super::api_doc::TensorZeroErrors)
)]
async fn poll_inference(
    State(state): State<BatchesState>,
    principal: Result<ApiExtension<Principal>, ApiError>,
    path: Result<ApiPath<(String, String)>, ApiError>,
    query: Result<Query<Vec<(String, String)>>, QueryRejection>,
) -> Result<Response, TensorZeroError> {
    let ApiExtension(principal) = principal?;
    let ApiPath((batch_id, inference_id)) = path?;
    let batch_id = parse_uuid("batch_id", &batch_id)?;
    let inference_id = parse_uuid("inference_id", &inference_id)?;
    let Query(pairs) = query.map_err(ApiError::from)?;
    let mut query = poll_query(pairs)?;
    if query.limit.is_some() || query.after.is_some() {
        return Err(TensorZeroError::bad_request(
            "`limit` and `after` page a whole batch; a single inference takes only `include_failures`",
        ));
    }
    query.inference_id = Some(inference_id);
    poll(&state, &principal.project, batch_id, query).await
}

/// The poll's reply, unless it is larger than one response may be (a Lambda response stays under
/// 6 MB): then a 400 that says how to page.
async fn poll(
    state: &BatchesState,
    project: &ProjectId,
    batch_id: Uuid,
    query: PollQuery,
) -> Result<Response, TensorZeroError> {
    let reply = state.batches.poll_batch_inference(project, batch_id, query).await?;
    let body = serde_json::to_vec(&reply)
        .map_err(|e| TensorZeroError::internal(format!("could not encode the batch's results: {e}")))?;
    if body.len() as u64 > state.settings.inline_content_limit {
        return Err(TensorZeroError::bad_request(format!(
            "The results of batch {batch_id} take {} bytes, more than one response can carry here ({} bytes); \
             fetch them in pages: `?limit=1000`, then `&after=<next_after>` until `has_more` is false.",
            body.len(),
            state.settings.inline_content_limit
        )));
    }
    Ok(([(axum::http::header::CONTENT_TYPE, "application/json")], body).into_response())
}
