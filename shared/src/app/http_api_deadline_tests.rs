//! The HTTP API's answer deadline: which requests get one, and what a slow one is answered.

use super::*;
use crate::adapters::embedded::{FileBlobStore, MemoryQueue, SqliteStateStore};
use crate::app::LoadedConfig;
use crate::app::{app_state, Adapters, AuthSettings};
use crate::auth::AuthMode;
use crate::config::Config;
use crate::http::HttpSettings;
use axum::body::Body;
use axum::http::StatusCode;
use lambda_http::aws_lambda_events::apigw::{ApiGatewayProxyRequestContext, ApiGatewayV2httpRequestContext};
use serde_json::{json, Value};
use std::sync::Arc;
use tower::ServiceExt;

const LIMIT: Duration = Duration::from_secs(28);

fn now_ms() -> i64 {
    i64::try_from(
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_millis(),
    )
    .unwrap()
}

/// A payload 2.0 context for `domain`, received by the front `ago`.
fn v2(domain: &str, ago: Duration) -> RequestContext {
    let mut context = ApiGatewayV2httpRequestContext::default();
    context.domain_name = Some(domain.into());
    context.time_epoch = now_ms() - i64::try_from(ago.as_millis()).unwrap();
    RequestContext::ApiGatewayV2(context)
}

const HTTP_API: &str = "abc123.execute-api.eu-west-1.amazonaws.com";
const FUNCTION_URL: &str = "abc123.lambda-url.eu-west-1.on.aws";

#[tokio::test]
async fn only_http_api_requests_get_a_deadline_counted_from_when_api_gateway_got_them() {
    let deadline = http_api_deadline_of(&v2(HTTP_API, Duration::from_secs(5)), LIMIT).unwrap();
    let left = deadline.at - tokio::time::Instant::now();
    assert!(
        left <= Duration::from_secs(23) && left > Duration::from_secs(22),
        "{left:?}"
    );
    // A replayed or sample event (older than API Gateway's own cut) counts from now.
    let stale = http_api_deadline_of(&v2(HTTP_API, Duration::from_secs(3600)), LIMIT).unwrap();
    let left = stale.at - tokio::time::Instant::now();
    assert!(left <= LIMIT && left > LIMIT - Duration::from_secs(1), "{left:?}");
    assert_eq!(http_api_deadline_of(&v2(FUNCTION_URL, Duration::ZERO), LIMIT), None);
    let rest = RequestContext::ApiGatewayV1(ApiGatewayProxyRequestContext::default());
    assert_eq!(http_api_deadline_of(&rest, LIMIT), None);
    assert_eq!(
        http_api_deadline_of(&v2(HTTP_API, Duration::ZERO), Duration::ZERO),
        None
    );
}

#[test]
fn the_deadline_defaults_to_28_seconds() {
    assert_eq!(DEFAULT_HTTP_API_ANSWER_DEADLINE, LIMIT);
}

/// A model that takes longer to answer than [`SHORT_LIMIT`] (real time: a paused clock would jump
/// to the deadline while storage works on blocking threads).
const SLOW_CONFIG: &str = r#"
[models.slow]
routing = ["d"]
[models.slow.providers.d]
type = "dummy"
latency_ms = 1500
"#;

/// The deadline the slow function is given (the real one is [`LIMIT`]).
const SHORT_LIMIT: Duration = Duration::from_millis(400);

/// The inference function's router on embedded adapters, as the Lambda host wraps it.
fn slow_function(dir: &std::path::Path) -> Router {
    let adapters = Adapters::new(
        Arc::new(SqliteStateStore::in_memory().unwrap()),
        Arc::new(FileBlobStore::open(dir).unwrap()),
        Arc::new(MemoryQueue::new()),
    );
    let config = Config::from_toml(SLOW_CONFIG).unwrap();
    let state = app_state(
        &LoadedConfig::without_files(config.clone()).unwrap(),
        &adapters,
        AuthSettings {
            mode: AuthMode::OpenWhenNoKeys,
            cache_ttl: Duration::ZERO,
        },
        HttpSettings {
            inline_content_limit: u64::MAX,
            public_url: None,
        },
        crate::batches::BatchSettings::from_config(&config),
    )
    .unwrap();
    with_http_api_deadline(crate::http::inference_router(state.host, state.inference), SHORT_LIMIT)
}

/// POST `body` to `path` through `context` (none: the local server); the status, the
/// content type, the body (JSON when it is) and how long the answer took to start.
async fn post(
    router: &Router,
    path: &str,
    body: Value,
    context: Option<RequestContext>,
) -> (StatusCode, String, Value, Duration) {
    let mut request = axum::http::Request::post(path)
        .header("host", "gateway.test")
        .header("content-type", "application/json")
        .body(Body::from(body.to_string()))
        .unwrap();
    if let Some(context) = context {
        request.extensions_mut().insert(context);
    }
    let started = tokio::time::Instant::now();
    let response = router.clone().oneshot(request).await.unwrap();
    let took = started.elapsed();
    let status = response.status();
    let content_type = response
        .headers()
        .get("content-type")
        .map(|v| v.to_str().unwrap().to_owned())
        .unwrap_or_default();
    if content_type.starts_with("text/event-stream") {
        return (status, content_type, Value::Null, took);
    }
    let bytes = axum::body::to_bytes(response.into_body(), 1 << 20).await.unwrap();
    (
        status,
        content_type,
        serde_json::from_slice(&bytes).unwrap_or(Value::Null),
        took,
    )
}

fn chat(stream: bool) -> Value {
    json!({"model": "slow", "messages": [{"role": "user", "content": "hi"}], "stream": stream})
}

#[tokio::test]
async fn a_slow_answer_through_the_http_api_is_a_504_advising_to_stream_before_the_cut() {
    let dir = tempfile::tempdir().unwrap();
    let router = slow_function(dir.path());

    let (status, _, body, took) = post(
        &router,
        "/v1/chat/completions",
        chat(false),
        Some(v2(HTTP_API, Duration::ZERO)),
    )
    .await;
    assert_eq!(status, StatusCode::GATEWAY_TIMEOUT, "{body}");
    assert!(took >= SHORT_LIMIT && took < Duration::from_millis(1500), "{took:?}");
    assert_eq!(body["error"]["type"], "timeout");
    assert_eq!(body["error"]["code"], "timeout");
    assert!(
        body["error"]["message"].as_str().unwrap().contains("\"stream\": true"),
        "{body}"
    );

    // TensorZero's route answers in its own shape.
    let inference = json!({"model_name": "slow", "input": {"messages": [{"role": "user", "content": "hi"}]}});
    let (status, _, body, took) = post(&router, "/inference", inference, Some(v2(HTTP_API, Duration::ZERO))).await;
    assert_eq!(status, StatusCode::GATEWAY_TIMEOUT, "{body}");
    assert!(took < Duration::from_millis(1500), "{took:?}");
    assert!(body["error"].as_str().unwrap().contains("stream"), "{body}");
}

#[tokio::test]
async fn streams_the_function_url_and_the_local_server_have_no_deadline() {
    let dir = tempfile::tempdir().unwrap();
    let router = slow_function(dir.path());
    // A stream's answer starts (its head) long before the deadline, whatever follows.
    let (status, content_type, _, _) = post(
        &router,
        "/v1/chat/completions",
        chat(true),
        Some(v2(HTTP_API, Duration::ZERO)),
    )
    .await;
    assert_eq!((status, content_type.as_str()), (StatusCode::OK, "text/event-stream"));
    for context in [Some(v2(FUNCTION_URL, Duration::ZERO)), None] {
        let (status, _, body, took) = post(&router, "/v1/chat/completions", chat(false), context).await;
        assert_eq!(status, StatusCode::OK, "{body}");
        assert!(took >= Duration::from_millis(1500), "{took:?}");
    }
}
