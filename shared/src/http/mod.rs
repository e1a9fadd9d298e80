//! The HTTP surface: one axum router, served by `lambda_http` in Lambda and by a plain server
//! locally. Handlers parse, call the business layer, and map errors; nothing else.

pub mod error;
mod inference_routes;
pub mod json_body;
mod middleware;
pub mod sse;

pub use error::ApiError;

use crate::auth::Authenticator;
use crate::inference::InferenceService;
use axum::extract::DefaultBodyLimit;
use axum::routing::get;
use axum::Router;
use std::sync::Arc;

/// Everything the handlers need.
#[derive(Clone)]
pub struct AppState {
    pub inference: Arc<InferenceService>,
    pub auth: Arc<Authenticator>,
}

/// Largest JSON body accepted (API Gateway's own limit is 10 MB).
pub const MAX_JSON_BODY_BYTES: usize = 10 * 1024 * 1024;

/// The inference function's routes: chat completions, embeddings, models, health.
pub fn inference_router(state: AppState) -> Router {
    let authenticated = inference_routes::routes()
        .layer(DefaultBodyLimit::max(MAX_JSON_BODY_BYTES))
        .route_layer(axum::middleware::from_fn_with_state(
            state.clone(),
            middleware::require_auth,
        ));
    let router = Router::new()
        .merge(authenticated)
        .route("/health", get(inference_routes::health))
        .with_state(state);
    with_common_layers(router)
}

/// Request ids, tracing, and OpenAI-style 404/405 for every router.
pub fn with_common_layers(router: Router) -> Router {
    middleware::add_request_id_layers(
        router
            .fallback(middleware::unknown_route)
            .method_not_allowed_fallback(middleware::method_not_allowed),
    )
}

#[cfg(test)]
mod tests;
