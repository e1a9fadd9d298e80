//! The LMI API: `POST /invocations`, `POST /predictions/{model}` (authenticated like every route)
//! and `GET /ping` (open, like `/health`: SageMaker's health check sends no key). Parse, call the
//! LMI domain (`crate::lmi_api`), frame; errors in LMI's shapes (`lmi_error`).

use super::extract::ApiPath;
use super::json_body::JsonBody;
use super::lmi_error::LmiError;
use super::AppState;
use crate::lmi_api::{LineFraming, LmiAnswer, ModelTarget, TARGET_MODEL_HEADER};
use axum::body::Body;
use axum::extract::State;
use axum::http::{header, HeaderMap};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Json, Router};
use bytes::Bytes;
use futures::StreamExt;
use serde::de::IgnoredAny;
use serde_json::{json, Value};

/// The paths of this surface (errors on them are rendered in LMI's shapes).
pub fn is_lmi_path(path: &str) -> bool {
    matches!(path, "/invocations" | "/ping") || path.starts_with("/predictions/")
}

pub(super) fn routes() -> Router<AppState> {
    Router::new()
        .route("/invocations", post(invocations))
        .route("/predictions/{*model}", post(predictions))
}

/// Routes without authentication.
pub(super) fn open_routes() -> Router<AppState> {
    Router::new().route("/ping", get(ping))
}

async fn ping() -> Json<Value> {
    Json(json!({"status": "Healthy"}))
}

async fn invocations(
    State(state): State<AppState>,
    headers: HeaderMap,
    body: JsonBody<IgnoredAny>,
) -> Result<Response, LmiError> {
    let target = headers
        .get(TARGET_MODEL_HEADER)
        .map(|value| {
            value
                .to_str()
                .map(str::to_owned)
                .map_err(|_| LmiError::invalid(format!("The `{TARGET_MODEL_HEADER}` header is not valid text.")))
        })
        .transpose()?;
    answer(&state, ModelTarget::Header(target), &headers, body).await
}

async fn predictions(
    State(state): State<AppState>,
    ApiPath(model): ApiPath<String>,
    headers: HeaderMap,
    body: JsonBody<IgnoredAny>,
) -> Result<Response, LmiError> {
    answer(&state, ModelTarget::Path(model), &headers, body).await
}

async fn answer(
    state: &AppState,
    target: ModelTarget,
    headers: &HeaderMap,
    body: JsonBody<IgnoredAny>,
) -> Result<Response, LmiError> {
    let wants_sse = headers
        .get_all(header::ACCEPT)
        .iter()
        .filter_map(|value| value.to_str().ok())
        .any(|value| value.contains("text/event-stream"));
    match state.lmi_api.invoke(target, body.raw, wants_sse).await? {
        LmiAnswer::Json(value) => Ok(Json(value).into_response()),
        LmiAnswer::Lines { lines, framing } => Ok(lines_response(lines, framing)),
    }
}

/// A streamed body: one JSON object per line, or per `data:` event.
fn lines_response(lines: futures::stream::BoxStream<'static, Value>, framing: LineFraming) -> Response {
    let frames = lines.map(move |line| {
        let json = line.to_string();
        Ok::<_, std::convert::Infallible>(Bytes::from(match framing {
            LineFraming::JsonLines => format!("{json}\n"),
            LineFraming::Sse => format!("data: {json}\n\n"),
        }))
    });
    let content_type = match framing {
        LineFraming::JsonLines => "application/jsonlines",
        LineFraming::Sse => "text/event-stream",
    };
    (
        [
            (header::CONTENT_TYPE, content_type),
            (header::CACHE_CONTROL, "no-cache"),
        ],
        Body::from_stream(frames),
    )
        .into_response()
}
