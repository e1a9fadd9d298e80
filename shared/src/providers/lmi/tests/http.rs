//! The `type = "lmi"` provider through its real HTTP transport, against a tiny container.

use crate::config::{CredentialLocation, ExtraHeaderEntry as ConfigHeader, LmiProviderConfig, LmiSchema};
use crate::model::{ChunkBlock, ContentBlock, ExtraHeaderEntry};
use crate::providers::lmi::LmiProvider;
use crate::providers::{CallContext, ChatProvider, ChatStreamProvider, ProviderError};
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::post;
use axum::{Json, Router};
use futures::StreamExt;
use serde_json::{json, Value};
use std::collections::HashMap;
use std::time::Duration;

async fn invocations(headers: HeaderMap, Json(body): Json<Value>) -> Response {
    let header = |name: &str| headers.get(name).and_then(|v| v.to_str().ok()).unwrap_or("").to_owned();
    if header("authorization") != "Bearer sk-lmi" {
        return (StatusCode::UNAUTHORIZED, Json(json!({"error": "no key", "code": 401}))).into_response();
    }
    let prompt = body["inputs"].as_str().unwrap_or_default();
    if prompt.contains("[lmi-424]") {
        return (
            StatusCode::FAILED_DEPENDENCY,
            Json(json!({"error": "bad input", "code": 424})),
        )
            .into_response();
    }
    if prompt.contains("[lmi-throttle]") {
        return (StatusCode::TOO_MANY_REQUESTS, [("retry-after", "2")], "slow down").into_response();
    }
    let seen = format!("{}|{}", header("x-team"), header("x-trace"));
    if body["stream"] == true {
        let lines = format!(
            "{{\"token\": {{\"id\": 1, \"text\": \"{seen}\"}}}}\n{{\"token\": {{\"id\": 2, \"text\": \"!\"}}, \
             \"generated_text\": \"{seen}!\", \"details\": {{\"finish_reason\": \"eos_token\", \"generated_tokens\": 2}}}}\n"
        );
        return ([("content-type", "application/jsonlines")], lines).into_response();
    }
    Json(json!({"generated_text": seen, "details": {"finish_reason": "eos_token", "generated_tokens": 1}}))
        .into_response()
}

async fn container() -> String {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let address = listener.local_addr().unwrap();
    let app = Router::new().route("/invocations", post(invocations));
    tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
    format!("http://{address}/invocations")
}

fn config(endpoint_url: String) -> LmiProviderConfig {
    LmiProviderConfig {
        endpoint_url,
        schema: LmiSchema::RollingBatch,
        chat_template: None,
        default_max_new_tokens: None,
        api_key_location: CredentialLocation::Dynamic("lmi_key".into()),
        timeout_ms: 5_000,
        connect_timeout_ms: 1_000,
        extra_body: Vec::new(),
        extra_headers: vec![ConfigHeader {
            name: "x-team".into(),
            value: Some("blue".into()),
            delete: None,
        }],
    }
}

fn credentials() -> HashMap<String, String> {
    HashMap::from([("lmi_key".to_owned(), "sk-lmi".to_owned())])
}

#[tokio::test]
async fn chat_and_stream_go_over_http_with_the_key_and_both_kinds_of_headers() {
    let provider = LmiProvider::over_http(
        "lmi",
        &config(container().await),
        std::sync::Arc::new(crate::ports::NoProviderSecrets),
    )
    .unwrap();
    let credentials = credentials();
    let ctx = CallContext {
        credentials: &credentials,
    };
    let mut request = super::fake::user("Hi");
    request.extra_headers = vec![ExtraHeaderEntry::set("x-trace", "t1")];

    let answer = provider.chat(&request, ctx).await.unwrap();
    assert_eq!(answer.choices[0].content, vec![ContentBlock::text_block("blue|t1")]);

    let stream = provider.chat_stream(&request, ctx).await.unwrap();
    let chunks: Vec<_> = stream.chunks.collect().await;
    let text: String = chunks
        .iter()
        .flat_map(|c| &c.as_ref().unwrap().choices)
        .flat_map(|c| &c.content)
        .map(|b| match b {
            ChunkBlock::Text { text } => text.as_str(),
            other => panic!("{other:?}"),
        })
        .collect();
    assert_eq!(text, "blue|t1!");
}

#[tokio::test]
async fn container_errors_keep_their_status_message_and_retry_after() {
    let provider = LmiProvider::over_http(
        "lmi",
        &config(container().await),
        std::sync::Arc::new(crate::ports::NoProviderSecrets),
    )
    .unwrap();
    let credentials = credentials();
    let ctx = CallContext {
        credentials: &credentials,
    };
    let err = provider.chat(&super::fake::user("x [lmi-424]"), ctx).await.unwrap_err();
    match &err {
        ProviderError::Http {
            status, message, body, ..
        } => {
            assert_eq!((*status, message.as_str()), (424, "bad input"));
            assert_eq!(body.as_ref().unwrap()["code"], 424);
        }
        other => panic!("{other:?}"),
    }
    assert!(!err.is_retryable());

    let err = provider
        .chat(&super::fake::user("[lmi-throttle]"), ctx)
        .await
        .unwrap_err();
    assert!(err.is_retryable());
    assert_eq!(err.retry_after(), Some(Duration::from_secs(2)));

    let none = HashMap::new();
    let err = provider
        .chat(&super::fake::user("Hi"), CallContext { credentials: &none })
        .await
        .unwrap_err();
    assert_eq!(err, ProviderError::MissingCredential("lmi_key".into()));
}
