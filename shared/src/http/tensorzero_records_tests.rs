//! The records and feedback routes in-process on the embedded stack.

use super::*;
use crate::app::{app_state, Adapters, AuthSettings};
use crate::auth::AuthMode;
use crate::config::Config;
use crate::http::{inference_router, local_router, AppState, HttpSettings};
use crate::ports::inference_records::{rfc3339, FunctionType, ModelCallRecord, TokenUsage};
use crate::ports::ProjectId;
use axum::body::Body;
use axum::http::{Request, StatusCode};
use axum::Router;
use serde_json::{json, Value};
use std::collections::BTreeMap;
use std::time::Duration;
use tower::ServiceExt;

const CONFIG: &str = r#"
[models.dummy]
routing = ["d"]
[models.dummy.providers.d]
type = "dummy"

[metrics.accepted]
type = "boolean"
level = "inference"
optimize = "max"
"#;

struct Stack {
    adapters: Adapters,
    state: AppState,
    _dir: tempfile::TempDir,
}

fn stack() -> Stack {
    let dir = tempfile::tempdir().unwrap();
    // The records' fixed times are long past: keep them forever.
    let adapters = crate::http::tests::adapters(dir.path()).with_record_retention_days(0);
    let config = Config::from_toml(CONFIG).unwrap();
    let state = app_state(
        &crate::app::LoadedConfig::without_files(config.clone()).unwrap(),
        &adapters,
        AuthSettings {
            mode: AuthMode::Required,
            cache_ttl: Duration::ZERO,
        },
        HttpSettings {
            inline_content_limit: u64::MAX,
            public_url: None,
        },
        crate::batches::BatchSettings::from_config(&config),
    )
    .unwrap();
    Stack {
        adapters,
        state,
        _dir: dir,
    }
}

async fn key(adapters: &Adapters, project: &str) -> String {
    adapters
        .api_keys()
        .create(&ProjectId::new(project), None)
        .await
        .unwrap()
        .api_key
}

async fn call(
    router: &Router,
    method: &str,
    path: &str,
    body: Option<Value>,
    key: &str,
) -> (StatusCode, String, Value) {
    let request = Request::builder()
        .method(method)
        .uri(path)
        .header("authorization", format!("Bearer {key}"))
        .header("content-type", "application/json")
        .body(body.map_or_else(Body::empty, |b| Body::from(b.to_string())))
        .unwrap();
    let response = router.clone().oneshot(request).await.unwrap();
    let status = response.status();
    let content_type = response
        .headers()
        .get("content-type")
        .map(|v| v.to_str().unwrap().to_owned())
        .unwrap_or_default();
    let bytes = axum::body::to_bytes(response.into_body(), usize::MAX).await.unwrap();
    (
        status,
        content_type,
        serde_json::from_slice(&bytes).unwrap_or(Value::Null),
    )
}

/// A TensorZero error: the status, JSON, and `{"error": "<message>"}`; the message is returned.
fn tensorzero_error(response: (StatusCode, String, Value), status: StatusCode) -> String {
    let (actual, content_type, body) = response;
    assert_eq!(actual, status, "{body}");
    assert!(content_type.starts_with("application/json"), "{content_type}");
    let object = body.as_object().unwrap();
    assert_eq!(object.len(), 1, "{body}");
    object["error"].as_str().unwrap().to_owned()
}

fn record(project: &str, episode_id: Uuid, at_ms: u64) -> InferenceRecord {
    let inference_id = Uuid::new_v7(uuid::Timestamp::from_unix(
        uuid::NoContext,
        at_ms / 1000,
        (at_ms % 1000) as u32 * 1_000_000,
    ));
    InferenceRecord {
        project: ProjectId::new(project),
        inference_id,
        episode_id,
        function_name: "draft_email".into(),
        variant_name: "formal".into(),
        function_type: FunctionType::Chat,
        input: json!({"messages": [{"role": "user", "content": "hi"}]}),
        output: json!([{"type": "text", "text": "hello"}]),
        tags: BTreeMap::from([("user".to_owned(), "u1".to_owned())]),
        tool_params: None,
        output_schema: None,
        inference_params: json!({"chat_completion": {}}),
        processing_time_ms: 12,
        ttft_ms: None,
        usage: TokenUsage {
            input_tokens: 3,
            output_tokens: 1,
        },
        finish_reason: Some("stop".into()),
        cached: false,
        created_at: rfc3339(at_ms as i64),
        timestamp: at_ms as i64,
        model_calls: vec![ModelCallRecord {
            id: Uuid::now_v7(),
            model_name: "dummy".into(),
            provider_name: "d".into(),
            raw_request: "{}".into(),
            raw_response: "{}".into(),
            usage: TokenUsage {
                input_tokens: 3,
                output_tokens: 1,
            },
            response_time_ms: 10,
            ttft_ms: None,
            cached: false,
            finish_reason: Some("stop".into()),
        }],
    }
}

#[tokio::test]
async fn an_inference_is_served_to_its_project_only() {
    let stack = stack();
    let router = inference_router(stack.state.host.clone(), stack.state.inference.clone());
    let (mine, theirs) = (key(&stack.adapters, "p1").await, key(&stack.adapters, "p2").await);
    let stored = record("p1", Uuid::now_v7(), 1_777_000_000_000);
    stack.state.inference.records.put(&stored).await.unwrap();

    let path = format!("/inferences/{}", stored.inference_id);
    let (status, _, body) = call(&router, "GET", &path, None, &mine).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert_eq!(body, serde_json::to_value(&stored).unwrap());
    assert!(body.get("project").is_none());
    assert_eq!(body["model_calls"][0]["provider_name"], "d");

    let message = tensorzero_error(call(&router, "GET", &path, None, &theirs).await, StatusCode::NOT_FOUND);
    assert!(message.contains(&stored.inference_id.to_string()), "{message}");
    let message = tensorzero_error(
        call(&router, "GET", "/inferences/not-a-uuid", None, &mine).await,
        StatusCode::BAD_REQUEST,
    );
    assert!(message.contains("inference_id"), "{message}");
    // Authentication comes first, whatever the route.
    assert_eq!(
        call(&router, "GET", &path, None, "nmb_bad").await.0,
        StatusCode::UNAUTHORIZED
    );
}

#[tokio::test]
async fn an_episode_lists_oldest_first_in_pages() {
    let stack = stack();
    let router = local_router(stack.state.clone());
    let (mine, theirs) = (key(&stack.adapters, "p1").await, key(&stack.adapters, "p2").await);
    let episode = Uuid::now_v7();
    let records: Vec<InferenceRecord> = (0..5)
        .map(|i| record("p1", episode, 1_777_000_000_000 + i * 1000))
        .collect();
    for stored in records.iter().rev() {
        stack.state.inference.records.put(stored).await.unwrap();
    }
    stack
        .state
        .inference
        .records
        .put(&record("p1", Uuid::now_v7(), 1_777_000_000_500))
        .await
        .unwrap();

    let mut seen = Vec::new();
    let mut path = format!("/episodes/{episode}/inferences?limit=2");
    loop {
        let (status, _, body) = call(&router, "GET", &path, None, &mine).await;
        assert_eq!(status, StatusCode::OK, "{body}");
        assert_eq!(body["object"], "list");
        let data = body["data"].as_array().unwrap();
        seen.extend(data.iter().map(|r| r["inference_id"].as_str().unwrap().to_owned()));
        if !body["has_more"].as_bool().unwrap() {
            break;
        }
        assert_eq!(data.len(), 2);
        path = format!("/episodes/{episode}/inferences?limit=2&after={}", seen.last().unwrap());
    }
    let expected: Vec<String> = records.iter().map(|r| r.inference_id.to_string()).collect();
    assert_eq!(seen, expected);

    let (_, _, body) = call(&router, "GET", &format!("/episodes/{episode}/inferences"), None, &mine).await;
    assert_eq!(body["data"].as_array().unwrap().len(), 5, "default limit 20");
    tensorzero_error(
        call(
            &router,
            "GET",
            &format!("/episodes/{episode}/inferences"),
            None,
            &theirs,
        )
        .await,
        StatusCode::NOT_FOUND,
    );
    for query in [
        "limit=0",
        "limit=101",
        "limit=x",
        "after=nope",
        "limit=1&limit=2",
        "order=desc",
    ] {
        let message = tensorzero_error(
            call(
                &router,
                "GET",
                &format!("/episodes/{episode}/inferences?{query}"),
                None,
                &mine,
            )
            .await,
            StatusCode::BAD_REQUEST,
        );
        let name = query.split('=').next().unwrap();
        assert!(message.contains(name), "{query}: {message}");
    }
}

#[tokio::test]
async fn feedback_is_checked_stored_and_answered_with_its_id() {
    let stack = stack();
    let router = inference_router(stack.state.host.clone(), stack.state.inference.clone());
    let mine = key(&stack.adapters, "p1").await;
    let stored = record("p1", Uuid::now_v7(), 1_777_000_000_000);
    stack.state.inference.records.put(&stored).await.unwrap();

    // What the TensorZero client sends: every field, unset ones as null.
    let body = json!({"metric_name": "accepted", "value": true, "inference_id": stored.inference_id,
                      "episode_id": null, "tags": {"reviewer": "r1"}, "dryrun": null, "internal": false});
    let (status, _, reply) = call(&router, "POST", "/feedback", Some(body.clone()), &mine).await;
    assert_eq!(status, StatusCode::OK, "{reply}");
    let feedback_id = Uuid::parse_str(reply["feedback_id"].as_str().unwrap()).unwrap();
    assert_eq!(feedback_id.get_version_num(), 7);
    let saved = stack
        .adapters
        .feedback_store()
        .get(&ProjectId::new("p1"), feedback_id)
        .await
        .unwrap()
        .unwrap();
    assert_eq!((saved.metric_name.as_str(), &saved.value), ("accepted", &json!(true)));

    let message = tensorzero_error(
        call(
            &router,
            "POST",
            "/feedback",
            Some(json!({"metric_name": "accepted", "value": true, "inference_id": stored.inference_id, "scroe": 1})),
            &mine,
        )
        .await,
        StatusCode::BAD_REQUEST,
    );
    assert!(message.contains("scroe"), "{message}");
    let message = tensorzero_error(
        call(
            &router,
            "POST",
            "/feedback",
            Some(json!({"metric_name": "accepted", "value": true, "inference_id": "123"})),
            &mine,
        )
        .await,
        StatusCode::BAD_REQUEST,
    );
    assert!(message.contains("inference_id"), "{message}");
    let message = tensorzero_error(
        call(
            &router,
            "POST",
            "/feedback",
            Some(json!({"metric_name": "accepted", "value": 3, "inference_id": stored.inference_id})),
            &mine,
        )
        .await,
        StatusCode::BAD_REQUEST,
    );
    assert!(message.contains("boolean"), "{message}");
    let message = tensorzero_error(
        call(
            &router,
            "POST",
            "/feedback",
            Some(json!({"metric_name": "stars", "value": 3, "inference_id": stored.inference_id})),
            &mine,
        )
        .await,
        StatusCode::NOT_FOUND,
    );
    assert!(message.contains("stars"), "{message}");
    tensorzero_error(
        call(
            &router,
            "POST",
            "/feedback",
            Some(json!({"metric_name": "accepted", "value": true})),
            &mine,
        )
        .await,
        StatusCode::BAD_REQUEST,
    );
    tensorzero_error(
        call(&router, "POST", "/feedback", None, &mine).await,
        StatusCode::BAD_REQUEST,
    );
}

#[tokio::test]
async fn feedback_on_another_projects_inference_is_404_after_a_short_wait() {
    let stack = stack();
    let router = inference_router(stack.state.host.clone(), stack.state.inference.clone());
    let theirs = key(&stack.adapters, "p2").await;
    let stored = record("p1", Uuid::now_v7(), 1_777_000_000_000);
    stack.state.inference.records.put(&stored).await.unwrap();
    let started = std::time::Instant::now();
    let message = tensorzero_error(
        call(
            &router,
            "POST",
            "/feedback",
            Some(json!({"metric_name": "comment", "value": "x", "inference_id": stored.inference_id})),
            &theirs,
        )
        .await,
        StatusCode::NOT_FOUND,
    );
    assert!(message.contains(&stored.inference_id.to_string()), "{message}");
    let waited = started.elapsed();
    assert!(
        waited >= Duration::from_millis(1500) && waited < Duration::from_secs(10),
        "{waited:?}"
    );
}

#[test]
fn episode_page_queries() {
    let pairs = |items: &[(&str, &str)]| items.iter().map(|(k, v)| ((*k).to_owned(), (*v).to_owned())).collect();
    assert_eq!(
        episode_page_query(pairs(&[])).unwrap(),
        EpisodePageQuery {
            limit: EPISODE_PAGE.default,
            after: None
        }
    );
    let after = Uuid::now_v7();
    assert_eq!(
        episode_page_query(pairs(&[("limit", "100"), ("after", &after.to_string())])).unwrap(),
        EpisodePageQuery {
            limit: 100,
            after: Some(after)
        }
    );
    let long = "9".repeat(10_000);
    let err = episode_page_query(pairs(&[("limit", &long)])).unwrap_err();
    assert!(err.message.len() < 200, "{}", err.message);
}
