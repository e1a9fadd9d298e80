//! `POST /dicl/build` (an extension over TensorZero, whose DICL optimizer builds examples from
//! its UI or client): build a DICL variant's examples from the caller's project's stored
//! inferences. Errors are TensorZero's `{"error": "…"}`.

use super::api_routes::routes;
use super::error::ApiError;
use super::extract::ApiExtension;
use super::tensorzero_error::{TensorZeroError, TensorZeroJson};
use super::InferenceState;
use crate::auth::Principal;
use crate::tensorzero::dicl::{DiclBuildReport, DiclBuildRequest};
use axum::extract::State;
use axum::Json;
use utoipa_axum::router::OpenApiRouter;

pub(super) fn routes() -> OpenApiRouter<InferenceState> {
    OpenApiRouter::default().routes(routes!(build_examples))
}

/// `POST /dicl/build`: embed the function's stored inferences (their output, or the latest
/// demonstration on each) and make them the DICL variant's examples.
#[utoipa::path(
    post,
    path = "/dicl/build",
    tag = "tensorzero",
    request_body = DiclBuildRequest,
    responses((status = 200, body = DiclBuildReport), super::api_doc::TensorZeroErrors)
)]
#[tracing::instrument(skip_all, fields(function = %request.function_name, variant = %request.variant_name))]
async fn build_examples(
    State(state): State<InferenceState>,
    principal: Result<ApiExtension<Principal>, ApiError>,
    TensorZeroJson(request): TensorZeroJson<DiclBuildRequest>,
) -> Result<Json<DiclBuildReport>, TensorZeroError> {
    let ApiExtension(principal) = principal?;
    let report = state.dicl.build(&principal.project, &request).await?;
    Ok(Json(report))
}
