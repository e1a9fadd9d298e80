//! Cross-cutting layers: request ids, authentication, unknown routes.

use super::error::ApiError;
use super::AppState;
use crate::auth::Principal;
use axum::extract::{Request, State};
use axum::http::{HeaderName, Method, Uri};
use axum::middleware::Next;
use axum::response::Response;
use tower_http::request_id::{MakeRequestId, PropagateRequestIdLayer, RequestId, SetRequestIdLayer};
use tower_http::trace::TraceLayer;

static REQUEST_ID: HeaderName = HeaderName::from_static("x-request-id");

/// Request ids are UUIDv7 (`req_…`), unless the caller sent one.
#[derive(Clone, Copy, Default)]
pub struct MakeRequestUuidV7;

impl MakeRequestId for MakeRequestUuidV7 {
    fn make_request_id<B>(&mut self, _request: &http::Request<B>) -> Option<RequestId> {
        let id = format!("req_{}", uuid::Uuid::now_v7().simple());
        http::HeaderValue::from_str(&id).ok().map(RequestId::new)
    }
}

/// Set `x-request-id` on the request (if absent), trace with it, and copy it to the response.
pub fn add_request_id_layers(router: axum::Router) -> axum::Router {
    router
        .layer(PropagateRequestIdLayer::new(REQUEST_ID.clone()))
        .layer(TraceLayer::new_for_http().make_span_with(|request: &Request| {
            let request_id = request
                .headers()
                .get(&REQUEST_ID)
                .and_then(|v| v.to_str().ok())
                .unwrap_or_default();
            tracing::info_span!(
                "request",
                method = %request.method(),
                path = %request.uri().path(),
                request_id,
                project = tracing::field::Empty
            )
        }))
        .layer(SetRequestIdLayer::new(REQUEST_ID.clone(), MakeRequestUuidV7))
}

/// Authenticate, then hand the [`Principal`] to the handler as an extension.
pub async fn require_auth(
    State(state): State<AppState>,
    mut request: Request,
    next: Next,
) -> Result<Response, ApiError> {
    let authorization = request
        .headers()
        .get(http::header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .map(str::to_owned);
    let principal: Principal = state.auth.authenticate(authorization.as_deref()).await?;
    tracing::Span::current().record("project", principal.project.as_str());
    request.extensions_mut().insert(principal);
    Ok(next.run(request).await)
}

pub async fn unknown_route(method: Method, uri: Uri) -> ApiError {
    ApiError::not_found(format!("Unknown request URL: {method} {}.", uri.path())).with_code("unknown_url")
}

pub async fn method_not_allowed(method: Method, uri: Uri) -> ApiError {
    ApiError::method_not_allowed(format!("Method {method} is not allowed for {}.", uri.path()))
        .with_code("method_not_allowed")
}
