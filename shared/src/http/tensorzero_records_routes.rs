//! `GET /inferences/{inference_id}`, `GET /episodes/{episode_id}/inferences` (the stored records
//! of the `/inference` endpoint, an extension over TensorZero, which keeps them behind its UI) and
//! `POST /feedback` (TensorZero's). Errors are TensorZero's `{"error": "…"}`.

use super::api_routes::routes;
use super::error::ApiError;
use super::extract::{ApiExtension, ApiPath};
use super::tensorzero_error::{TensorZeroError, TensorZeroJson};
use super::InferenceState;
use crate::auth::Principal;
use crate::paging::PageBounds;
use crate::ports::inference_records::InferenceRecord;
use crate::tensorzero::experiments::ExperimentReport;
use crate::tensorzero::feedback::{FeedbackId, FeedbackRequest};
use crate::user_text::excerpt;
use axum::extract::rejection::QueryRejection;
use axum::extract::{Query, State};
use axum::Json;
use serde::Serialize;
use utoipa_axum::router::OpenApiRouter;
use uuid::Uuid;

/// Page sizes of `GET /episodes/{episode_id}/inferences`: 1 to 100, 20 by default.
pub(crate) const EPISODE_PAGE: PageBounds = PageBounds::new(20, 100);

pub(super) fn routes() -> OpenApiRouter<InferenceState> {
    OpenApiRouter::default()
        .routes(routes!(get_inference))
        .routes(routes!(list_episode_inferences))
        .routes(routes!(feedback))
        .routes(routes!(get_experiment))
}

fn parse_uuid(name: &str, value: &str) -> Result<Uuid, TensorZeroError> {
    Uuid::parse_str(value)
        .map_err(|_| TensorZeroError::bad_request(format!("Invalid `{name}` `{}`: it must be a UUID.", excerpt(value))))
}

/// `GET /inferences/{inference_id}`: a stored inference of `/inference`.
#[utoipa::path(
    get,
    path = "/inferences/{inference_id}",
    tag = "tensorzero",
    params(("inference_id" = Uuid, Path, description = "The inference's id")),
    responses((status = 200, body = InferenceRecord), super::api_doc::TensorZeroErrors)
)]
async fn get_inference(
    State(state): State<InferenceState>,
    principal: Result<ApiExtension<Principal>, ApiError>,
    path: Result<ApiPath<String>, ApiError>,
) -> Result<Json<InferenceRecord>, TensorZeroError> {
    let ApiExtension(principal) = principal?;
    let ApiPath(id) = path?;
    let inference_id = parse_uuid("inference_id", &id)?;
    match state.records.get(&principal.project, inference_id).await? {
        Some(record) => Ok(Json(record)),
        None => Err(TensorZeroError::not_found(format!(
            "Inference `{inference_id}` was not found."
        ))),
    }
}

/// `limit` (1..=100, default 20) and `after` (an inference id); nothing else.
#[derive(Debug, PartialEq, Eq)]
struct EpisodePageQuery {
    limit: usize,
    after: Option<Uuid>,
}

fn episode_page_query(pairs: Vec<(String, String)>) -> Result<EpisodePageQuery, TensorZeroError> {
    let mut limit = None;
    let mut after = None;
    for (name, value) in pairs {
        let duplicate = match name.as_str() {
            "limit" => {
                let parsed = EPISODE_PAGE.parse(Some(&value)).map_err(|_| {
                    TensorZeroError::bad_request(format!(
                        "Invalid `limit` `{}`: it must be an integer from 1 to {}.",
                        excerpt(&value),
                        EPISODE_PAGE.max
                    ))
                })?;
                limit.replace(parsed.get()).is_some()
            }
            "after" => after.replace(parse_uuid("after", &value)?).is_some(),
            _ => {
                return Err(TensorZeroError::bad_request(format!(
                    "Unknown query parameter `{}`: use `limit` and `after`.",
                    excerpt(&name)
                )))
            }
        };
        if duplicate {
            return Err(TensorZeroError::bad_request(format!(
                "Query parameter `{name}` is given twice."
            )));
        }
    }
    Ok(EpisodePageQuery {
        limit: limit.unwrap_or(EPISODE_PAGE.default),
        after,
    })
}

/// `GET /episodes/{episode_id}/inferences`: an episode's stored inferences, a page at a time.
#[utoipa::path(
    get,
    path = "/episodes/{episode_id}/inferences",
    tag = "tensorzero",
    params(
        ("episode_id" = Uuid, Path, description = "The episode's id"),
        ("limit" = Option<u32>, Query, minimum = 1, maximum = 100, description = "Page size (default 20)"),
        ("after" = Option<Uuid>, Query, description = "The last inference id of the previous page"),
    ),
    responses((status = 200, body = EpisodeInferences), super::api_doc::TensorZeroErrors)
)]
async fn list_episode_inferences(
    State(state): State<InferenceState>,
    principal: Result<ApiExtension<Principal>, ApiError>,
    path: Result<ApiPath<String>, ApiError>,
    query: Result<Query<Vec<(String, String)>>, QueryRejection>,
) -> Result<Json<EpisodeInferences>, TensorZeroError> {
    let ApiExtension(principal) = principal?;
    let ApiPath(id) = path?;
    let episode_id = parse_uuid("episode_id", &id)?;
    let Query(pairs) = query.map_err(ApiError::from)?;
    let query = episode_page_query(pairs)?;
    let page = state
        .records
        .list_episode(&principal.project, episode_id, query.after, query.limit)
        .await?;
    // An episode exists once it has an inference; a later page may be empty.
    if page.records.is_empty() && query.after.is_none() {
        return Err(TensorZeroError::not_found(format!(
            "Episode `{episode_id}` was not found."
        )));
    }
    Ok(Json(EpisodeInferences {
        object: "list",
        data: page.records,
        has_more: page.has_more,
    }))
}

/// A page of an episode's inferences, oldest first.
#[derive(Debug, Serialize, utoipa::ToSchema)]
struct EpisodeInferences {
    /// Always `list`.
    object: &'static str,
    data: Vec<InferenceRecord>,
    has_more: bool,
}

/// `{"feedback_id": "<uuid>"}`.
#[derive(Debug, Serialize, utoipa::ToSchema)]
struct FeedbackAccepted {
    feedback_id: FeedbackId,
}

/// `POST /feedback`: a metric's value or a demonstration for an inference or an episode.
#[utoipa::path(
    post,
    path = "/feedback",
    tag = "tensorzero",
    request_body = FeedbackRequest,
    responses((status = 200, body = FeedbackAccepted), super::api_doc::TensorZeroErrors)
)]
async fn feedback(
    State(state): State<InferenceState>,
    principal: Result<ApiExtension<Principal>, ApiError>,
    TensorZeroJson(request): TensorZeroJson<FeedbackRequest>,
) -> Result<Json<FeedbackAccepted>, TensorZeroError> {
    let ApiExtension(principal) = principal?;
    let feedback_id = state.feedback.submit(&principal.project, request).await?;
    Ok(Json(FeedbackAccepted { feedback_id }))
}

/// `GET /experiments/{function_name}`: where a function's adaptive experiment stands (the share
/// of new episodes each variant gets, each candidate's counted feedback, the winner once there
/// is one). The experiment is the deployment's: every project's feedback counts.
#[utoipa::path(
    get,
    path = "/experiments/{function_name}",
    tag = "tensorzero",
    params(("function_name" = String, Path, description = "A function with `type = \"adaptive\"` experimentation")),
    responses((status = 200, body = ExperimentReport), super::api_doc::TensorZeroErrors)
)]
async fn get_experiment(
    State(state): State<InferenceState>,
    principal: Result<ApiExtension<Principal>, ApiError>,
    path: Result<ApiPath<String>, ApiError>,
) -> Result<Json<ExperimentReport>, TensorZeroError> {
    let ApiExtension(_principal) = principal?;
    let ApiPath(name) = path?;
    let not_found = || TensorZeroError::not_found(format!("Function `{}` has no adaptive experiment.", excerpt(&name)));
    let function = state.functions.functions().function(&name).map_err(|_| not_found())?;
    match state.experiments.report(function).await? {
        Some(report) => Ok(Json(report)),
        None => Err(not_found()),
    }
}

#[cfg(test)]
#[path = "tensorzero_records_tests.rs"]
mod tests;
