//! The router end to end in-process (no sockets): status codes, envelopes, request ids, auth.

use super::*;
use crate::adapters::embedded::{FileBlobStore, MemoryQueue, SqliteStateStore};
use crate::app::{app_state, Adapters, AuthSettings};
use crate::auth::AuthMode;
use crate::config::Config;
use crate::ports::ProjectId;
use axum::body::Body;
use axum::http::{Request, StatusCode};
use serde_json::{json, Value};
use std::time::Duration;
use tower::ServiceExt;

pub(super) const CONFIG: &str = r#"
[gateway.retries]
max_retries = 1
initial_backoff_ms = 1
max_backoff_ms = 2

[models.dummy]
routing = ["d"]
[models.dummy.providers.d]
type = "dummy"

[models.broken]
routing = ["a", "b"]
[models.broken.providers.a]
type = "dummy"
fail_with_status = 500
[models.broken.providers.b]
type = "dummy"
fail_with_status = 503
"#;

pub(super) fn adapters(dir: &std::path::Path) -> Adapters {
    Adapters::new(
        Arc::new(SqliteStateStore::in_memory().unwrap()),
        Arc::new(FileBlobStore::open(dir).unwrap()),
        Arc::new(MemoryQueue::new()),
    )
}

/// Where the test routers say clients reach them.
pub(super) const PUBLIC_URL: &str = "http://gateway.test:3000";

/// The whole local router (every function's routes) on fresh embedded adapters in `dir`, open.
pub(super) fn local_in(dir: &std::path::Path) -> Router {
    local_router(state_with(&adapters(dir), AuthMode::OpenWhenNoKeys))
}

fn router_with(adapters: &Adapters, mode: AuthMode) -> Router {
    let state = state_with(adapters, mode);
    inference_router(state.host, state.inference)
}

/// The handlers' state for [`CONFIG`] on `adapters`, public at `http://gateway.test:3000`.
pub(super) fn state_with(adapters: &Adapters, mode: AuthMode) -> AppState {
    state_for(CONFIG, adapters, mode)
}

/// [`state_with`] for another configuration text.
pub(super) fn state_for(config_text: &str, adapters: &Adapters, mode: AuthMode) -> AppState {
    let config = Config::from_toml(config_text).unwrap();
    app_state(
        &crate::app::LoadedConfig::without_files(config.clone()).unwrap(),
        adapters,
        AuthSettings {
            mode,
            cache_ttl: Duration::ZERO,
        },
        HttpSettings {
            inline_content_limit: u64::MAX,
            public_url: Some(PublicBaseUrl::parse(PUBLIC_URL).unwrap()),
        },
        crate::batches::BatchSettings::from_config(&config),
    )
    .unwrap()
}

async fn call(
    router: &Router,
    method: &str,
    path: &str,
    body: Option<Value>,
    key: Option<&str>,
) -> (StatusCode, http::HeaderMap, Value) {
    let mut request = Request::builder().method(method).uri(path);
    if let Some(key) = key {
        request = request.header("authorization", format!("Bearer {key}"));
    }
    let body = body.map_or_else(Body::empty, |b| Body::from(b.to_string()));
    let response = router.clone().oneshot(request.body(body).unwrap()).await.unwrap();
    let status = response.status();
    let headers = response.headers().clone();
    let bytes = axum::body::to_bytes(response.into_body(), usize::MAX).await.unwrap();
    let value = serde_json::from_slice(&bytes).unwrap_or(Value::String(String::from_utf8_lossy(&bytes).into_owned()));
    (status, headers, value)
}

/// The ids `GET /v1/models` lists, in order.
async fn listed_model_ids(router: &Router) -> Vec<String> {
    let (_, _, list) = call(router, "GET", "/v1/models", None, None).await;
    list["data"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|m| m["id"].as_str().map(str::to_owned))
        .collect()
}

fn chat_body(model: &str) -> Value {
    json!({"model": model, "messages": [{"role": "user", "content": "hi"}]})
}

#[tokio::test]
async fn every_response_has_a_request_id_errors_included() {
    let dir = tempfile::tempdir().unwrap();
    let router = router_with(&adapters(dir.path()), AuthMode::OpenWhenNoKeys);
    for (method, path, body) in [
        ("GET", "/health", None),
        ("GET", "/v1/models", None),
        ("POST", "/v1/chat/completions", Some(json!({"model": "dummy"}))),
        ("GET", "/v1/unknown", None),
    ] {
        let (_, headers, _) = call(&router, method, path, body, None).await;
        let id = headers.get("x-request-id").unwrap().to_str().unwrap();
        assert!(id.starts_with("req_"), "{path}: {id}");
    }
}

#[tokio::test]
async fn statuses_and_envelopes() {
    let dir = tempfile::tempdir().unwrap();
    let router = router_with(&adapters(dir.path()), AuthMode::OpenWhenNoKeys);
    let (status, _, body) = call(&router, "POST", "/v1/chat/completions", Some(chat_body("dummy")), None).await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(body["object"], "chat.completion");

    let (status, _, body) = call(&router, "POST", "/v1/chat/completions", Some(chat_body("nope")), None).await;
    assert_eq!(status, StatusCode::NOT_FOUND);
    assert_eq!(body["error"]["code"], "model_not_found");

    let (status, headers, body) = call(&router, "POST", "/v1/chat/completions", Some(chat_body("broken")), None).await;
    assert_eq!(status, StatusCode::BAD_GATEWAY);
    let message = body["error"]["message"].as_str().unwrap();
    assert!(
        message.contains("HTTP 500") && message.contains("HTTP 503"),
        "{message}"
    );
    assert_eq!(headers["x-should-retry"], "false");

    let (status, _, body) = call(
        &router,
        "POST",
        "/v1/chat/completions",
        Some(json!({"messages": []})),
        None,
    )
    .await;
    assert_eq!(status, StatusCode::BAD_REQUEST);
    assert_eq!(body["error"]["param"], "model");

    let (status, _, _) = call(&router, "GET", "/v1/chat/completions", None, None).await;
    assert_eq!(status, StatusCode::METHOD_NOT_ALLOWED);

    let (status, _, body) = call(&router, "GET", "/v1/models/dummy", None, None).await;
    assert_eq!((status, body["id"].as_str()), (StatusCode::OK, Some("dummy")));
}

#[tokio::test]
async fn shorthand_models_answer_chat_but_are_not_listed() {
    let dir = tempfile::tempdir().unwrap();
    let router = router_with(&adapters(dir.path()), AuthMode::OpenWhenNoKeys);
    let (status, _, body) = call(
        &router,
        "POST",
        "/v1/chat/completions",
        Some(chat_body("dummy::anything")),
        None,
    )
    .await;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert_eq!(body["model"], "dummy::anything");
    for unknown in ["vault::x", "dummy::"] {
        let (status, _, body) = call(&router, "POST", "/v1/chat/completions", Some(chat_body(unknown)), None).await;
        assert_eq!(status, StatusCode::NOT_FOUND, "{unknown}");
        assert_eq!(body["error"]["code"], "model_not_found");
    }
    assert_eq!(listed_model_ids(&router).await, vec!["broken", "dummy"]);
}

/// A model whose only provider reads its key from an unset environment variable is not listed
/// (nor retrievable), and a call says which variable is missing; a second provider that can be
/// called keeps the model listed.
#[tokio::test]
async fn models_without_their_env_key_are_not_listed() {
    let config = format!(
        r#"{CONFIG}
[models.keyless]
routing = ["o"]
[models.keyless.providers.o]
type = "openai"
model_name = "m"
api_key_location = "env::NIMBUS_TEST_UNSET_KEY_VAR"

[models.half]
routing = ["o", "d"]
[models.half.providers.o]
type = "openai"
model_name = "m"
api_key_location = "env::NIMBUS_TEST_UNSET_KEY_VAR"
[models.half.providers.d]
type = "dummy"
"#
    );
    let dir = tempfile::tempdir().unwrap();
    let state = state_for(&config, &adapters(dir.path()), AuthMode::OpenWhenNoKeys);
    let router = inference_router(state.host, state.inference);
    assert_eq!(listed_model_ids(&router).await, vec!["broken", "dummy", "half"]);
    let (status, _, _) = call(&router, "GET", "/v1/models/keyless", None, None).await;
    assert_eq!(status, StatusCode::NOT_FOUND);
    let (status, _, body) = call(
        &router,
        "POST",
        "/v1/chat/completions",
        Some(chat_body("keyless")),
        None,
    )
    .await;
    assert_eq!(status, StatusCode::BAD_GATEWAY, "{body}");
    let message = body["error"]["message"].as_str().unwrap();
    assert!(
        message.contains("NIMBUS_TEST_UNSET_KEY_VAR, which is not set"),
        "{message}"
    );
}

#[tokio::test]
async fn streaming_is_sse_ending_in_done() {
    let dir = tempfile::tempdir().unwrap();
    let router = router_with(&adapters(dir.path()), AuthMode::OpenWhenNoKeys);
    let mut body = chat_body("dummy");
    body["stream"] = json!(true);
    let (status, headers, text) = call(&router, "POST", "/v1/chat/completions", Some(body), None).await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(headers["content-type"], "text/event-stream");
    let text = text.as_str().unwrap();
    assert!(text.trim_end().ends_with("data: [DONE]"), "{text}");
}

#[tokio::test]
async fn keys_are_required_once_created_and_always_in_required_mode() {
    let dir = tempfile::tempdir().unwrap();
    let adapters = adapters(dir.path());
    let open = router_with(&adapters, AuthMode::OpenWhenNoKeys);
    let required = router_with(&adapters, AuthMode::Required);
    assert_eq!(call(&open, "GET", "/v1/models", None, None).await.0, StatusCode::OK);
    let (status, _, body) = call(&required, "GET", "/v1/models", None, None).await;
    assert_eq!(status, StatusCode::UNAUTHORIZED);
    assert_eq!(body["error"]["code"], "missing_api_key");
    // Health stays open for load balancers and probes.
    assert_eq!(call(&required, "GET", "/health", None, None).await.0, StatusCode::OK);

    let created = adapters
        .api_keys()
        .create(&ProjectId::new("team-a"), None)
        .await
        .unwrap();
    for router in [&open, &required] {
        assert_eq!(
            call(router, "GET", "/v1/models", None, None).await.0,
            StatusCode::UNAUTHORIZED
        );
        let (status, _, body) = call(router, "GET", "/v1/models", None, Some("nmb_bad")).await;
        assert_eq!(
            (status, body["error"]["code"].as_str()),
            (StatusCode::UNAUTHORIZED, Some("invalid_api_key"))
        );
        assert_eq!(
            call(router, "GET", "/v1/models", None, Some(&created.api_key)).await.0,
            StatusCode::OK
        );
    }
}

#[tokio::test]
async fn bad_credentials_object_is_a_400() {
    let dir = tempfile::tempdir().unwrap();
    let router = router_with(&adapters(dir.path()), AuthMode::OpenWhenNoKeys);
    let mut body = chat_body("dummy");
    body["credentials"] = json!({"k": 5});
    let (status, _, body) = call(&router, "POST", "/v1/chat/completions", Some(body), None).await;
    assert_eq!(status, StatusCode::BAD_REQUEST);
    assert_eq!(body["error"]["param"], "credentials.k");
}

#[tokio::test]
async fn tensorzero_routes_answer_errors_before_their_handler_in_tensorzeros_shape() {
    let dir = tempfile::tempdir().unwrap();
    let router = router_with(&adapters(dir.path()), AuthMode::Required);
    let inference = json!({"model_name": "dummy", "input": {"messages": []}});
    let (status, headers, body) = call(&router, "POST", "/inference", Some(inference.clone()), None).await;
    assert_eq!(status, StatusCode::UNAUTHORIZED);
    assert!(body["error"].as_str().unwrap().contains("API key"), "{body}");
    assert_eq!(body.as_object().unwrap().len(), 1, "{body}");
    assert_eq!(headers["content-type"], "application/json");
    assert!(headers.contains_key("x-request-id"));
    let (status, _, body) = call(&router, "POST", "/inference", Some(inference), Some("nmb_bad")).await;
    assert_eq!(
        (status, body["error"].is_string()),
        (StatusCode::UNAUTHORIZED, true),
        "{body}"
    );
    let (status, _, body) = call(&router, "GET", "/inference", None, None).await;
    assert_eq!(
        (status, body["error"].is_string()),
        (StatusCode::METHOD_NOT_ALLOWED, true),
        "{body}"
    );
    // The OpenAI routes keep their envelope.
    let (status, _, body) = call(&router, "POST", "/v1/chat/completions", Some(chat_body("dummy")), None).await;
    assert_eq!(
        (status, body["error"]["code"].as_str()),
        (StatusCode::UNAUTHORIZED, Some("missing_api_key"))
    );
}

#[tokio::test]
async fn a_gzip_encoded_batch_inference_submission_is_decoded() {
    use flate2::write::GzEncoder;
    use std::io::Write;
    let config = format!(
        "{CONFIG}\n[functions.echo]\ntype = \"chat\"\n[functions.echo.variants.only]\ntype = \"chat_completion\"\nmodel = \"dummy\"\n"
    );
    let dir = tempfile::tempdir().unwrap();
    let state = state_for(&config, &adapters(dir.path()), AuthMode::OpenWhenNoKeys);
    let router = batches_router(state.host, state.batches);
    let inputs: Vec<Value> = (0..500)
        .map(
            |i| json!({"messages": [{"role": "user", "content": format!("item {i}: the same words again and again")}]}),
        )
        .collect();
    let body = json!({"function_name": "echo", "inputs": inputs}).to_string();
    let mut encoder = GzEncoder::new(Vec::new(), flate2::Compression::default());
    encoder.write_all(body.as_bytes()).unwrap();
    let gzipped = encoder.finish().unwrap();
    assert!(gzipped.len() * 5 < body.len(), "{} of {}", gzipped.len(), body.len());
    let send = |encoded: bool| {
        let mut request = Request::builder()
            .method("POST")
            .uri("/batch_inference")
            .header("content-type", "application/json");
        if encoded {
            request = request.header("content-encoding", "gzip");
        }
        router
            .clone()
            .oneshot(request.body(Body::from(gzipped.clone())).unwrap())
    };
    let response = send(true).await.unwrap();
    assert_eq!(response.status(), StatusCode::OK);
    let bytes = axum::body::to_bytes(response.into_body(), usize::MAX).await.unwrap();
    let created: Value = serde_json::from_slice(&bytes).unwrap();
    assert_eq!(created["inference_ids"].as_array().unwrap().len(), 500);
    // Without the header the bytes are not JSON.
    assert_eq!(send(false).await.unwrap().status(), StatusCode::BAD_REQUEST);
}

#[tokio::test]
async fn requests_are_measured_by_route_template_and_read_back_at_metrics() {
    let dir = tempfile::tempdir().unwrap();
    let adapters = adapters(dir.path()).with_metrics(Arc::new(crate::adapters::embedded::PrometheusMetrics::new()));
    let router = router_with(&adapters, AuthMode::OpenWhenNoKeys);
    assert_eq!(call(&router, "GET", "/v1/models", None, None).await.0, StatusCode::OK);
    assert_eq!(
        call(&router, "GET", "/v1/models/dummy", None, None).await.0,
        StatusCode::OK
    );
    assert_eq!(
        call(&router, "GET", "/v1/models/nope", None, None).await.0,
        StatusCode::NOT_FOUND
    );
    assert_eq!(
        call(&router, "GET", "/no/such/route", None, None).await.0,
        StatusCode::NOT_FOUND
    );

    let (status, headers, body) = call(&router, "GET", "/metrics", None, None).await;
    assert_eq!(status, StatusCode::OK);
    assert!(headers[http::header::CONTENT_TYPE]
        .to_str()
        .unwrap()
        .starts_with("text/plain; version=0.0.4"));
    let text = body.as_str().unwrap();
    let count = |labels: &str| format!("nimbus_http_requests_total{{{labels}}} 1\n");
    assert!(
        text.contains(&count(r#"method="GET",route="/v1/models",status_class="2xx""#)),
        "{text}"
    );
    // The route template, never the id in the path.
    assert!(
        text.contains(&count(r#"method="GET",route="/v1/models/{*model}",status_class="2xx""#)),
        "{text}"
    );
    assert!(
        text.contains(&count(r#"method="GET",route="/v1/models/{*model}",status_class="4xx""#)),
        "{text}"
    );
    assert!(
        text.contains(&count(r#"method="GET",route="unmatched",status_class="4xx""#)),
        "{text}"
    );
    assert!(!text.contains("dummy") && !text.contains("nope"), "{text}");
    assert!(text.contains("nimbus_http_request_duration_seconds_count{"), "{text}");
}

#[tokio::test]
async fn a_host_that_keeps_no_metrics_serves_none() {
    let dir = tempfile::tempdir().unwrap();
    let router = router_with(&adapters(dir.path()), AuthMode::OpenWhenNoKeys);
    assert_eq!(
        call(&router, "GET", "/metrics", None, None).await.0,
        StatusCode::NOT_FOUND
    );
}
