//! Every request measured: `http_requests` (a count) and `http_request_duration` (until the
//! response's head, so a stream counts its time to first byte), by route template, method and
//! status class; and `GET /metrics`, the measurements in Prometheus text format where the host
//! keeps them (the local server).

use super::HostState;
use crate::openai::error::ApiError;
use crate::ports::metrics::status_class;
use crate::ports::MetricsSink;
use axum::extract::{MatchedPath, Request, State};
use axum::http::{header, Method};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use std::sync::Arc;
use std::time::Instant;

/// Requests of no route are counted under this route.
const UNMATCHED: &str = "unmatched";

/// The method as a dimension: the standard ones by name, anything else as `other`.
fn method_name(method: &Method) -> &'static str {
    match *method {
        Method::GET => "GET",
        Method::POST => "POST",
        Method::PUT => "PUT",
        Method::DELETE => "DELETE",
        Method::PATCH => "PATCH",
        Method::HEAD => "HEAD",
        Method::OPTIONS => "OPTIONS",
        _ => "other",
    }
}

pub(super) async fn measure(State(metrics): State<Arc<dyn MetricsSink>>, request: Request, next: Next) -> Response {
    let route = request
        .extensions()
        .get::<MatchedPath>()
        .map_or_else(|| UNMATCHED.to_owned(), |path| path.as_str().to_owned());
    let method = method_name(request.method());
    let started = Instant::now();
    let response = next.run(request).await;
    let dimensions = [
        ("route", route.as_str()),
        ("method", method),
        ("status_class", status_class(response.status().as_u16())),
    ];
    metrics.record_timed("http_requests", "http_request_duration", started, &dimensions);
    response
}

/// `GET /metrics`: the local server's measurements in Prometheus text format (a Lambda function
/// sends its own to CloudWatch and answers 404).
#[utoipa::path(
    get,
    path = "/metrics",
    tag = "operations",
    security(()),
    responses(
        (status = 200, description = "Prometheus text format 0.0.4", content_type = "text/plain", body = String),
        super::api_doc::OpenAiErrors,
    )
)]
pub(super) async fn prometheus_text(State(state): State<HostState>) -> Result<Response, ApiError> {
    let text = state
        .metrics
        .prometheus_text()
        .ok_or_else(|| ApiError::not_found("This host sends its metrics to CloudWatch; it serves none."))?;
    Ok((
        [(header::CONTENT_TYPE, "text/plain; version=0.0.4; charset=utf-8")],
        text,
    )
        .into_response())
}
