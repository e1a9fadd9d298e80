//! The LMI API: `POST /invocations`, `POST /predictions/{model}` (authenticated like every route)
//! and `GET /ping` (open, like `/health`: SageMaker's health check sends no key). Parse, call the
//! LMI domain (`crate::lmi_api`), frame; errors in LMI's shapes (`lmi_error`).

use super::answer_deadline::StreamAnswer;
use super::api_routes::routes;
use super::extract::ApiPath;
use super::json_body::JsonBody;
use super::lmi_error::LmiError;
use super::InferenceState;
use crate::lmi_api::{LineFraming, LmiAnswer, ModelTarget, TARGET_MODEL_HEADER};
use axum::body::Body;
use axum::extract::State;
use axum::http::{header, HeaderMap};
use axum::response::{IntoResponse, Response};
use axum::Json;
use bytes::Bytes;
use futures::StreamExt;
use serde::de::IgnoredAny;
use serde::Serialize;
use serde_json::Value;
use utoipa_axum::router::OpenApiRouter;

/// The paths of this surface (errors on them are rendered in LMI's shapes).
pub(crate) fn is_lmi_path(path: &str) -> bool {
    matches!(path, "/invocations" | "/ping") || path.starts_with("/predictions/")
}

pub(super) fn routes() -> OpenApiRouter<InferenceState> {
    let router = OpenApiRouter::default().routes(routes!(invocations));
    // A model name may hold slashes.
    super::with_wildcard_route(router, "/predictions/{*model}", routes!(predictions))
}

/// Routes without authentication.
pub(super) fn open_routes() -> OpenApiRouter<super::HostState> {
    OpenApiRouter::default().routes(routes!(ping))
}

/// `{"status": "Healthy"}`.
#[derive(Debug, Serialize, utoipa::ToSchema)]
struct Ping {
    status: &'static str,
}

/// `GET /ping`: SageMaker's health check (no key needed).
#[utoipa::path(get, path = "/ping", tag = "lmi", security(()), responses((status = 200, body = Ping)))]
async fn ping() -> Json<Ping> {
    Json(Ping { status: "Healthy" })
}

/// `POST /invocations`: DJL Serving's inference API; the model is the
/// `X-Amzn-SageMaker-Target-Model` header's, or the only one configured for it. With
/// `"stream": true` the answer comes as JSON lines (`application/jsonlines`), or as server-sent
/// events when `Accept: text/event-stream`.
#[utoipa::path(
    post,
    path = "/invocations",
    tag = "lmi",
    request_body(content = Object, description = "`{\"inputs\": …, \"parameters\": {…}, \"stream\": …}` (text generation) or an OpenAI-style chat body with `messages`"),
    params(("X-Amzn-SageMaker-Target-Model" = Option<String>, Header, description = "The model to use")),
    responses(
        (status = 200, description = "The answer; streamed as JSON lines or events with `stream: true`",
            content((Object = "application/json"), (Object = "application/jsonlines"), (Object = "text/event-stream"))),
        super::api_doc::LmiErrors,
    )
)]
async fn invocations(
    State(state): State<InferenceState>,
    stream_answer: StreamAnswer,
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
    answer(&state, ModelTarget::Header(target), &headers, body, stream_answer).await
}

/// `POST /predictions/{model}`: as `/invocations`, the model named in the path.
#[utoipa::path(
    post,
    path = "/predictions/{model}",
    tag = "lmi",
    request_body(content = Object, description = "`{\"inputs\": …, \"parameters\": {…}, \"stream\": …}` (text generation) or an OpenAI-style chat body with `messages`"),
    params(("model" = String, Path, description = "The model's name; it may contain `/`")),
    responses(
        (status = 200, description = "The answer; streamed as JSON lines or events with `stream: true`",
            content((Object = "application/json"), (Object = "application/jsonlines"), (Object = "text/event-stream"))),
        super::api_doc::LmiErrors,
    )
)]
async fn predictions(
    State(state): State<InferenceState>,
    ApiPath(model): ApiPath<String>,
    stream_answer: StreamAnswer,
    headers: HeaderMap,
    body: JsonBody<IgnoredAny>,
) -> Result<Response, LmiError> {
    answer(&state, ModelTarget::Path(model), &headers, body, stream_answer).await
}

async fn answer(
    state: &InferenceState,
    target: ModelTarget,
    headers: &HeaderMap,
    body: JsonBody<IgnoredAny>,
    stream_answer: StreamAnswer,
) -> Result<Response, LmiError> {
    if body.raw.get("stream").and_then(Value::as_bool) == Some(true) {
        stream_answer.streaming();
    }
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
