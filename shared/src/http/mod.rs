//! The HTTP surface: one axum router, served by `lambda_http` in Lambda and by a plain server
//! locally. Handlers parse, call the business layer, and map errors; nothing else.

pub(crate) mod answer_deadline;
pub(crate) mod api_doc;
mod api_routes;
mod async_routes;
pub(crate) mod baseten_error;
mod batch_routes;
pub(crate) mod body_budget;
pub mod body_deadline;
mod body_drain;
mod dicl_routes;
pub mod error;
mod extract;
mod files_routes;
mod inference_routes;
pub(crate) mod json_body;
pub(crate) mod lmi_error;
pub(crate) mod lmi_routes;
mod middleware;
mod multipart_stream;
mod openai_error;
#[cfg(feature = "openapi")]
pub mod openapi_document;
pub mod public_url;
mod request_metrics;
mod revocable_stream;
pub mod sse;
mod state;
mod tensorzero_batch_routes;
pub(crate) mod tensorzero_error;
mod tensorzero_openai_routes;
mod tensorzero_records_routes;
mod tensorzero_routes;
mod tensorzero_surface;
mod upload_routes;
mod webhook_routes;

pub use error::ApiError;
pub use public_url::PublicBaseUrl;
pub use state::{AppState, HttpSettings};
pub(crate) use state::{BatchesState, FilesState, HostState, InferenceState};

use api_routes::routes;
use axum::extract::DefaultBodyLimit;
use axum::Router;
use std::sync::Arc;
use utoipa_axum::router::{OpenApiRouter, UtoipaMethodRouter};

/// Largest JSON body accepted (API Gateway's own limit is 10 MB).
pub(crate) const MAX_JSON_BODY_BYTES: usize = 10 * 1024 * 1024;

/// The inference function's routes: chat completions, embeddings, models, `/inference`, the
/// TensorZero-style records and feedback routes, the LMI API, health.
pub fn inference_router(host: HostState, state: InferenceState) -> Router {
    let routes = Router::from(inference_function_routes()).with_state(state);
    host_router(host, routes, lmi_routes::open_routes())
}

fn inference_function_routes() -> OpenApiRouter<InferenceState> {
    inference_routes::routes()
        .merge(tensorzero_routes::routes())
        .merge(tensorzero_openai_routes::routes())
        .merge(tensorzero_records_routes::routes())
        .merge(dicl_routes::routes())
        .merge(lmi_routes::routes())
        .layer(DefaultBodyLimit::max(MAX_JSON_BODY_BYTES))
}

/// The files function's routes: `/v1/files`, `/v1/uploads`, `/v1/direct_uploads`, health.
#[cfg(feature = "aws")]
pub(crate) fn files_router(host: HostState, state: FilesState) -> Router {
    host_router(
        host,
        Router::from(file_api_routes()).with_state(state),
        OpenApiRouter::default(),
    )
}

/// The batches function's routes: `/v1/batches`, `/batch_inference`, `/async_predict`,
/// `/v1/webhook_secrets`, `/v1/webhook_endpoints`, health.
#[cfg(feature = "aws")]
pub(crate) fn batches_router(host: HostState, state: BatchesState) -> Router {
    let routes = Router::from(batches_function_routes()).with_state(state);
    host_router(host, routes, OpenApiRouter::default())
}

/// Request bodies may be gzip-encoded (`Content-Encoding: gzip`): a large `/batch_inference`
/// submission then fits the 6 MB a Lambda request may carry; the body limit applies to the
/// decoded JSON.
fn batches_function_routes() -> OpenApiRouter<BatchesState> {
    batch_routes::routes()
        .merge(tensorzero_batch_routes::routes())
        .merge(async_routes::routes())
        .merge(webhook_routes::routes())
        .layer(DefaultBodyLimit::max(MAX_JSON_BODY_BYTES))
        .layer(tower_http::decompression::RequestDecompressionLayer::new())
}

/// Every route of every host, authenticated or not: what the OpenAPI document describes.
#[cfg(feature = "openapi")]
fn every_route() -> utoipa::openapi::OpenApi {
    let mut document = inference_function_routes().into_openapi();
    document.merge(batches_function_routes().into_openapi());
    document.merge(file_api_routes().into_openapi());
    document.merge(open_routes().merge(lmi_routes::open_routes()).into_openapi());
    document
}

/// Every function's routes on one router: what the local server serves. Its clients keep
/// connections alive, so unread request bodies are drained to let them survive early rejections
/// (in Lambda, API Gateway owns the connection and the body is already read).
pub fn local_router(state: AppState) -> Router {
    local_router_with(state, body_deadline::BodyTimeouts::default())
}

/// [`local_router`] with request bodies read under `body_timeouts`.
pub fn local_router_with(state: AppState, body_timeouts: body_deadline::BodyTimeouts) -> Router {
    let every_function = Router::from(inference_function_routes())
        .with_state(state.inference)
        .merge(Router::from(batches_function_routes()).with_state(state.batches))
        .merge(Router::from(file_api_routes()).with_state(state.files));
    host_router(state.host, every_function, lmi_routes::open_routes())
        .layer(axum::middleware::from_fn(body_drain::drain_unread_body))
        .layer(axum::Extension(body_timeouts))
}

/// Streamed bodies: sizes are enforced while streaming, per purpose, not by a body limit.
fn file_api_routes() -> OpenApiRouter<FilesState> {
    files_routes::routes()
        .merge(upload_routes::routes())
        .layer(DefaultBodyLimit::disable())
}

/// What every host answers without authentication: health, metrics, this API's document.
fn open_routes() -> OpenApiRouter<HostState> {
    OpenApiRouter::default()
        .routes(routes!(inference_routes::health))
        .routes(routes!(request_metrics::prometheus_text))
        .routes(routes!(api_doc::openapi_json))
}

/// `router` with `operation` served at `axum_path`, a path whose last parameter holds slashes
/// (`/v1/models/{*model}`); the document keeps the operation's own path (`/v1/models/{model}`).
fn with_wildcard_route<S: Clone + Send + Sync + 'static>(
    router: OpenApiRouter<S>,
    axum_path: &str,
    operation: UtoipaMethodRouter<S>,
) -> OpenApiRouter<S> {
    let (schemas, paths, method_router) = operation;
    let mut router = router.route(axum_path, method_router);
    let document = router.get_openapi_mut();
    document.paths.merge(paths);
    document
        .components
        .get_or_insert_with(Default::default)
        .schemas
        .extend(schemas);
    router
}

/// `routes` behind authentication; `open` and the routes every host answers without it.
fn host_router(host: HostState, routes: Router, open: OpenApiRouter<HostState>) -> Router {
    let authenticated = routes
        .route_layer(axum::middleware::from_fn_with_state(
            host.clone(),
            middleware::require_auth,
        ))
        .route_layer(axum::middleware::from_fn(middleware::record_resource_id));
    let metrics = Arc::clone(&host.metrics);
    let router = Router::new()
        .merge(authenticated)
        .merge(Router::from(open.merge(open_routes())).with_state(host));
    with_common_layers(router).layer(axum::middleware::from_fn_with_state(metrics, request_metrics::measure))
}

/// Request ids, tracing, OpenAI-style 404/405 and an envelope for every error (TensorZero's error
/// shape on its routes), `Host` checked, a 504 at the request's [`answer_deadline::AnswerDeadline`].
pub(crate) fn with_common_layers(router: Router) -> Router {
    let router = router
        .fallback(middleware::unknown_route)
        .method_not_allowed_fallback(middleware::method_not_allowed)
        .layer(axum::middleware::from_fn(body_deadline::read_bodies_in_time))
        .layer(axum::middleware::from_fn(answer_deadline::answer_in_time))
        .layer(axum::middleware::from_fn(middleware::envelope_every_error))
        .layer(axum::middleware::from_fn(public_url::reject_unusual_host))
        .layer(axum::middleware::from_fn(tensorzero_surface::surface_error_bodies));
    middleware::add_request_id_layers(router)
}

#[cfg(all(test, feature = "openapi"))]
mod api_doc_tests;
#[cfg(test)]
mod hostile_schema_tests;
#[cfg(test)]
mod hostile_tests;
#[cfg(test)]
mod stalled_body_tests;
#[cfg(test)]
mod tests;
