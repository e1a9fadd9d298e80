//! Provider keys kept in SSM Parameter Store (`api_key_location = "ssm::/…"`), against a moto
//! server: the whole gateway (the AWS stack's parameter adapter, the per-process cache the wiring
//! adds, the router) sends the SecureString's value as the upstream's bearer token, reads it once
//! per process, and answers a clear provider error when the parameter does not exist.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use async_trait::async_trait;
use axum::extract::State;
use axum::http::HeaderMap;
use axum::routing::post;
use axum::{Json, Router};
use nimbus_integration_tests::local_gateway::open_state;
use nimbus_integration_tests::moto::MotoServer;
use nimbus_shared::adapters::aws::SsmParameters;
use nimbus_shared::app::embedded;
use nimbus_shared::app::LoadedConfig;
use nimbus_shared::config::Config;
use nimbus_shared::http::inference_router;
use nimbus_shared::ports::{ProviderSecrets, SecretError, SecretValue};
use serde_json::{json, Value};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

const KEY_PARAMETER: &str = "/nimbus/openai-api-key";
const KEY: &str = "sk-from-ssm-123";

/// An OpenAI-compatible upstream that records each request's `Authorization` header.
async fn recording_upstream() -> (String, Arc<Mutex<Vec<Option<String>>>>) {
    async fn chat(State(seen): State<Arc<Mutex<Vec<Option<String>>>>>, headers: HeaderMap) -> Json<Value> {
        let auth = headers.get("authorization").map(|v| v.to_str().unwrap().to_owned());
        seen.lock().unwrap().push(auth);
        Json(json!({
            "id": "up-1", "object": "chat.completion", "created": 1, "model": "up",
            "choices": [{"index": 0, "message": {"role": "assistant", "content": "Hello"}, "finish_reason": "stop"}],
            "usage": {"prompt_tokens": 1, "completion_tokens": 1, "total_tokens": 2}
        }))
    }
    let seen = Arc::new(Mutex::new(Vec::new()));
    let app = Router::new()
        .route("/v1/chat/completions", post(chat))
        .with_state(Arc::clone(&seen));
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let address = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
    (format!("http://{address}/v1"), seen)
}

/// Counts the reads that reach SSM (under the cache the wiring puts in front).
#[derive(Debug)]
struct CountingStore {
    inner: SsmParameters,
    reads: Arc<AtomicUsize>,
}

#[async_trait]
impl ProviderSecrets for CountingStore {
    async fn parameter(&self, name: &str) -> Result<SecretValue, SecretError> {
        self.reads.fetch_add(1, Ordering::SeqCst);
        self.inner.parameter(name).await
    }
}

/// The gateway on `config`, keys from `store`, served on a loopback port: its base URL.
async fn gateway(config: &str, store: Arc<dyn ProviderSecrets>, data_dir: &std::path::Path) -> String {
    let loaded = LoadedConfig::without_files(Config::from_toml(config).unwrap()).unwrap();
    let adapters = embedded::adapters(data_dir).unwrap().with_provider_secrets(store);
    let state = open_state(&loaded, &adapters);
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let address = listener.local_addr().unwrap();
    let router = inference_router(state.host, state.inference);
    tokio::spawn(async move { axum::serve(listener, router).await.unwrap() });
    format!("http://{address}")
}

async fn chat(base: &str, model: &str) -> (u16, Value) {
    let response = reqwest::Client::new()
        .post(format!("{base}/v1/chat/completions"))
        .json(&json!({"model": model, "messages": [{"role": "user", "content": "hi"}]}))
        .send()
        .await
        .unwrap();
    (response.status().as_u16(), response.json().await.unwrap())
}

#[tokio::test]
async fn a_key_kept_in_ssm_reaches_the_upstream_read_once_and_a_missing_one_is_a_clear_error() {
    let moto = MotoServer::start().unwrap();
    let sdk_config = moto.sdk_config().await;
    aws_sdk_ssm::Client::new(&sdk_config)
        .put_parameter()
        .name(KEY_PARAMETER)
        .value(KEY)
        .r#type(aws_sdk_ssm::types::ParameterType::SecureString)
        .send()
        .await
        .unwrap();

    let (upstream, seen) = recording_upstream().await;
    let config = format!(
        r#"
[models.from-ssm]
routing = ["openai"]
[models.from-ssm.providers.openai]
type = "openai"
model_name = "up"
api_base = "{upstream}"
api_key_location = "ssm::{KEY_PARAMETER}"

[models.missing-key]
routing = ["openai"]
[models.missing-key.providers.openai]
type = "openai"
model_name = "up"
api_base = "{upstream}"
api_key_location = "ssm::/nimbus/absent-key"
"#
    );
    let reads = Arc::new(AtomicUsize::new(0));
    let store = Arc::new(CountingStore {
        inner: SsmParameters::new(&sdk_config),
        reads: Arc::clone(&reads),
    });
    let data_dir = tempfile::tempdir().unwrap();
    let base = gateway(&config, store, data_dir.path()).await;

    for _ in 0..3 {
        let (status, body) = chat(&base, "from-ssm").await;
        assert_eq!(status, 200, "{body}");
    }
    let expected = format!("Bearer {KEY}");
    assert_eq!(*seen.lock().unwrap(), vec![Some(expected.clone()); 3]);
    assert_eq!(reads.load(Ordering::SeqCst), 1, "one SSM read per key per process");

    // A parameter that does not exist: a provider error naming it, no upstream call, and the
    // next request asks SSM again (a failed read is not kept).
    let (status, body) = chat(&base, "missing-key").await;
    assert_eq!(status, 502, "{body}");
    let message = body["error"]["message"].as_str().unwrap();
    assert!(
        message.contains("the parameter `/nimbus/absent-key`, which does not exist"),
        "{message}"
    );
    assert!(!message.contains(KEY), "{message}");
    assert_eq!(seen.lock().unwrap().len(), 3);
    let before = reads.load(Ordering::SeqCst);
    assert_eq!(chat(&base, "missing-key").await.0, 502);
    assert!(reads.load(Ordering::SeqCst) > before);
}

/// The adapter alone: the SecureString comes back decrypted; a missing name is `NotFound`.
#[tokio::test]
async fn the_ssm_adapter_reads_secure_strings_and_names_missing_ones() {
    let moto = MotoServer::start().unwrap();
    let sdk_config = moto.sdk_config().await;
    aws_sdk_ssm::Client::new(&sdk_config)
        .put_parameter()
        .name("/nimbus/lmi-key")
        .value("lmi-secret\n")
        .r#type(aws_sdk_ssm::types::ParameterType::SecureString)
        .send()
        .await
        .unwrap();
    let store = SsmParameters::new(&sdk_config);
    assert_eq!(store.parameter("/nimbus/lmi-key").await.unwrap().expose(), "lmi-secret");
    let err = store.parameter("/nimbus/nope").await.unwrap_err();
    assert!(
        matches!(&err, SecretError::NotFound { name, .. } if name == "/nimbus/nope"),
        "{err:?}"
    );
}
