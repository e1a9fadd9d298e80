//! Cross-cutting layers: request ids, authentication, unknown routes, an envelope for every error.

use super::error::ApiError;
use super::revocable_stream::{end_on_revocation, CHECK_EVERY};
use super::HostState;
use crate::auth::Principal;
use crate::user_text::excerpt;
use axum::extract::{RawPathParams, Request, State};
use axum::http::{header, HeaderName, Method, StatusCode, Uri};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use axum::RequestExt as _;
use std::sync::Arc;
use tower_http::request_id::{MakeRequestId, PropagateRequestIdLayer, RequestId, SetRequestIdLayer};
use tower_http::trace::TraceLayer;

static REQUEST_ID: HeaderName = HeaderName::from_static("x-request-id");
static AMZN_TRACE_ID: HeaderName = HeaderName::from_static("x-amzn-trace-id");
/// The longest trace id kept in the logs (an X-Ray header is about 100 characters).
const MAX_TRACE_ID_CHARS: usize = 256;

/// The X-Ray trace of this request: the Lambda runtime's for the invocation
/// (`_X_AMZN_TRACE_ID`), else the one API Gateway or a load balancer sent; empty locally.
fn trace_id(request: &Request) -> String {
    let from_runtime = std::env::var("_X_AMZN_TRACE_ID").ok().filter(|id| !id.is_empty());
    let id = from_runtime.unwrap_or_else(|| {
        request
            .headers()
            .get(&AMZN_TRACE_ID)
            .and_then(|v| v.to_str().ok())
            .unwrap_or_default()
            .to_owned()
    });
    id.chars().take(MAX_TRACE_ID_CHARS).collect()
}

/// Request ids are UUIDv7 (`req_…`), unless the caller sent one.
#[derive(Clone, Copy, Default)]
pub(crate) struct MakeRequestUuidV7;

impl MakeRequestId for MakeRequestUuidV7 {
    fn make_request_id<B>(&mut self, _request: &http::Request<B>) -> Option<RequestId> {
        let id = format!("req_{}", uuid::Uuid::now_v7().simple());
        http::HeaderValue::from_str(&id).ok().map(RequestId::new)
    }
}

/// Set `x-request-id` on the request (if absent), trace with it (and the X-Ray trace id, so a
/// request's log lines can be found from its trace), and copy it to the response.
pub(crate) fn add_request_id_layers(router: axum::Router) -> axum::Router {
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
                trace_id = %trace_id(request),
                project = tracing::field::Empty,
                resource_id = tracing::field::Empty
            )
        }))
        .layer(SetRequestIdLayer::new(REQUEST_ID.clone(), MakeRequestUuidV7))
}

/// The longest resource id written into a request's span; a longer path parameter is cut.
const MAX_LOGGED_RESOURCE_ID: usize = 128;

/// Name the resource a request is about in its span: the last parameter of its route
/// (`/v1/batches/{batch_id}/cancel` → the batch's id), so that one batch's or request's lines can
/// be filtered, from its HTTP requests to its jobs (whose spans carry the same `resource_id`).
pub(crate) async fn record_resource_id(mut request: Request, next: Next) -> Response {
    if let Ok(params) = request.extract_parts::<RawPathParams>().await {
        if let Some((_, value)) = params.iter().last() {
            let value: String = value.chars().take(MAX_LOGGED_RESOURCE_ID).collect();
            tracing::Span::current().record("resource_id", value.as_str());
        }
    }
    next.run(request).await
}

/// Authenticate, then hand the [`Principal`] to the handler as an extension.
pub(crate) async fn require_auth(
    State(state): State<HostState>,
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
    let key_id = principal.key_id.clone();
    request.extensions_mut().insert(principal);
    let response = next.run(request).await;
    Ok(match key_id {
        // An open stream ends when its key is revoked.
        Some(key_id) => end_on_revocation(response, Arc::clone(&state.auth), key_id, CHECK_EVERY),
        None => response,
    })
}

pub(crate) async fn unknown_route(method: Method, uri: Uri) -> ApiError {
    ApiError::not_found(format!(
        "Unknown request URL: {} {}.",
        excerpt(method.as_str()),
        excerpt(uri.path())
    ))
    .with_code("unknown_url")
}

pub(crate) async fn method_not_allowed(method: Method, uri: Uri) -> ApiError {
    ApiError::method_not_allowed(format!(
        "Method {} is not allowed for {}.",
        excerpt(method.as_str()),
        excerpt(uri.path())
    ))
    .with_code("method_not_allowed")
}

/// The most of a non-JSON error body read to quote it.
const MAX_PLAIN_ERROR_BYTES: usize = 4096;

/// A safety net: an error response that is not JSON (a framework rejection no handler mapped)
/// becomes the OpenAI envelope, quoting a short prefix of its text.
pub(crate) async fn envelope_every_error(request: Request, next: Next) -> Response {
    let response = next.run(request).await;
    let status = response.status();
    let is_json = response
        .headers()
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.starts_with("application/json"));
    if !(status.is_client_error() || status.is_server_error()) || is_json {
        return response;
    }
    let (parts, body) = response.into_parts();
    let text = axum::body::to_bytes(body, MAX_PLAIN_ERROR_BYTES)
        .await
        .map(|bytes| String::from_utf8_lossy(&bytes).trim().to_owned())
        .unwrap_or_default();
    let reason = status.canonical_reason().unwrap_or("Error");
    let message = if text.is_empty() {
        format!("{reason}.")
    } else {
        format!("{reason}: {}", excerpt(&text))
    };
    let mut error = match status {
        StatusCode::NOT_FOUND => ApiError::not_found(message),
        StatusCode::METHOD_NOT_ALLOWED => ApiError::method_not_allowed(message),
        StatusCode::PAYLOAD_TOO_LARGE => ApiError::payload_too_large(message),
        status if status.is_server_error() => ApiError::internal(message),
        _ => ApiError::invalid_request(message),
    };
    error.status = status;
    let mut enveloped = error.into_response();
    for (name, value) in &parts.headers {
        if name != header::CONTENT_TYPE && name != header::CONTENT_LENGTH {
            enveloped.headers_mut().append(name, value.clone());
        }
    }
    enveloped
}
