use super::*;
use crate::model::{ChunkBlock, ContentBlock, Message, Role};
use crate::providers::ChatProvider;
use async_trait::async_trait;
use serde_json::json;
use std::collections::{HashMap, VecDeque};
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// Answers from a script of results, recording each call.
struct Scripted {
    script: Mutex<VecDeque<Result<&'static str, ProviderError>>>,
    calls: Mutex<u32>,
}

impl Scripted {
    fn new(script: Vec<Result<&'static str, ProviderError>>) -> Arc<Self> {
        Arc::new(Self {
            script: Mutex::new(script.into()),
            calls: Mutex::new(0),
        })
    }
    fn calls(&self) -> u32 {
        *self.calls.lock().unwrap()
    }
}

#[async_trait]
impl ChatProvider for Scripted {
    async fn chat(&self, request: &ModelRequest, _ctx: CallContext<'_>) -> Result<ModelResponse, ProviderError> {
        *self.calls.lock().unwrap() += 1;
        let next = self.script.lock().unwrap().pop_front().unwrap_or(Ok("default"));
        let text = next?;
        let mut completion = crate::providers::dummy::reply_for(request);
        completion.choices[0].content = vec![ContentBlock::text_block(text)];
        completion.raw_request = Some(r#"{"scripted":true}"#.to_owned());
        Ok(completion)
    }
}

fn chat_only(name: &str, provider: Arc<Scripted>) -> ProviderHandle {
    ProviderHandle::chat_only(name, provider)
}

fn router(providers: Vec<ProviderHandle>, max_retries: u32) -> ModelRouter {
    let policy = RetryPolicy {
        max_retries,
        initial_backoff: Duration::from_millis(1),
        max_backoff: Duration::from_millis(2),
        max_retry_after: Duration::from_millis(50),
    };
    ModelRouter::new(
        vec![RoutedModel {
            name: "m".into(),
            providers,
        }],
        policy,
    )
}

fn request() -> ModelRequest {
    ModelRequest {
        model: "m".into(),
        messages: vec![Message::new(Role::User, vec![ContentBlock::text_block("hi")])],
        ..ModelRequest::default()
    }
}

fn http(status: u16) -> ProviderError {
    ProviderError::Http {
        status,
        message: format!("status {status}"),
        retry_after: None,
        body: None,
    }
}

fn content(c: &ModelResponse) -> String {
    c.choices[0].content.iter().filter_map(ContentBlock::text).collect()
}

#[tokio::test]
async fn retries_retryable_errors_on_the_same_provider() {
    let first = Scripted::new(vec![Err(http(503)), Err(http(429)), Ok("third time")]);
    let router = router(vec![chat_only("a", first.clone())], 2);
    let none = HashMap::new();
    let answer = router
        .chat(&request(), CallContext { credentials: &none })
        .await
        .unwrap();
    assert_eq!(content(&answer), "third time");
    assert_eq!(first.calls(), 3);
}

#[tokio::test]
async fn falls_back_after_retries_and_skips_retries_for_client_errors() {
    let a = Scripted::new(vec![Err(http(500)), Err(http(500))]);
    let b = Scripted::new(vec![Err(http(400))]);
    let c = Scripted::new(vec![Ok("from c")]);
    let router = router(
        vec![
            chat_only("a", a.clone()),
            chat_only("b", b.clone()),
            chat_only("c", c.clone()),
        ],
        1,
    );
    let none = HashMap::new();
    let answer = router
        .chat(&request(), CallContext { credentials: &none })
        .await
        .unwrap();
    assert_eq!(content(&answer), "from c");
    assert_eq!((a.calls(), b.calls(), c.calls()), (2, 1, 1));
}

#[tokio::test]
async fn reports_every_provider_failure() {
    let a = Scripted::new(vec![Err(http(500))]);
    let b = Scripted::new(vec![Err(ProviderError::Timeout {
        after: Duration::from_secs(1),
    })]);
    let router = router(vec![chat_only("a", a), chat_only("b", b)], 0);
    let none = HashMap::new();
    let err = router
        .chat(&request(), CallContext { credentials: &none })
        .await
        .unwrap_err();
    let RoutingError::AllFailed { failures, .. } = err else {
        panic!("{err:?}")
    };
    assert_eq!(
        failures.iter().map(|f| f.provider.as_str()).collect::<Vec<_>>(),
        vec!["a", "b"]
    );
}

#[tokio::test]
async fn a_long_retry_after_moves_on_instead_of_waiting() {
    let slow = ProviderError::Http {
        status: 429,
        message: "later".into(),
        retry_after: Some(Duration::from_secs(3600)),
        body: None,
    };
    let a = Scripted::new(vec![Err(slow)]);
    let b = Scripted::new(vec![Ok("b")]);
    let router = router(vec![chat_only("a", a.clone()), chat_only("b", b)], 3);
    let none = HashMap::new();
    let answer = router
        .chat(&request(), CallContext { credentials: &none })
        .await
        .unwrap();
    assert_eq!(content(&answer), "b");
    assert_eq!(a.calls(), 1);
}

#[tokio::test]
async fn missing_capability_and_model_are_distinct_errors() {
    let router = router(vec![chat_only("a", Scripted::new(vec![]))], 0);
    let none = HashMap::new();
    let embed: EmbeddingRequest = serde_json::from_value(json!({"model": "m", "input": "x"})).unwrap();
    assert!(matches!(
        router.embed(&embed, CallContext { credentials: &none }).await,
        Err(RoutingError::Unsupported { .. })
    ));
    let mut other = request();
    other.model = "nope".into();
    assert_eq!(
        router
            .chat(&other, CallContext { credentials: &none })
            .await
            .unwrap_err(),
        RoutingError::ModelNotFound("nope".into())
    );
}

#[tokio::test]
async fn chat_only_providers_still_stream() {
    use futures::StreamExt;
    let router = router(vec![chat_only("a", Scripted::new(vec![Ok("streamed words here")]))], 0);
    let none = HashMap::new();
    let chunks: Vec<_> = router
        .chat_stream(&request(), CallContext { credentials: &none })
        .await
        .unwrap()
        .chunks
        .collect()
        .await;
    let text: String = chunks
        .iter()
        .flat_map(|c| {
            c.as_ref()
                .unwrap()
                .choices
                .iter()
                .flat_map(|choice| choice.content.iter())
        })
        .filter_map(|block| match block {
            ChunkBlock::Text { text } => Some(text.as_str()),
            _ => None,
        })
        .collect();
    assert_eq!(text, "streamed words here");
}

fn dummy_request(model: &str) -> ModelRequest {
    ModelRequest {
        model: model.into(),
        ..request()
    }
}

#[tokio::test]
async fn shorthand_models_are_routed_built_once_and_kept() {
    let router = router(vec![chat_only("a", Scripted::new(vec![]))], 0);
    let none = HashMap::new();
    let ctx = CallContext { credentials: &none };
    let first = router.chat(&dummy_request("dummy::anything"), ctx).await.unwrap();
    assert_eq!(first.provider_name, "dummy");
    assert!(!content(&first).is_empty());
    assert_eq!(router.cached_shorthand_count(), 1);
    let kept = router.model("dummy::anything").unwrap();
    assert!(
        Arc::ptr_eq(&kept, &router.model("dummy::anything").unwrap()),
        "built once"
    );
    router.chat(&dummy_request("dummy::anything"), ctx).await.unwrap();
    assert_eq!(router.cached_shorthand_count(), 1);
    // An `openai::` shorthand is built without calling anyone.
    let openai = router.model("openai::gpt-4o-mini").unwrap();
    assert_eq!(openai.providers[0].name, "openai");
    assert!(router.routes("openai::gpt-4o-mini") && router.routes("m") && !router.routes("nope"));
    // Shorthand models are not listed.
    assert_eq!(router.model_names().collect::<Vec<_>>(), vec!["m"]);
}

#[tokio::test]
async fn unknown_shorthand_providers_and_plain_names_are_not_found() {
    let router = router(vec![chat_only("a", Scripted::new(vec![]))], 0);
    let none = HashMap::new();
    for name in ["nope", "anthropic::claude", "dummy::", "::x"] {
        assert_eq!(
            router
                .chat(&dummy_request(name), CallContext { credentials: &none })
                .await
                .unwrap_err(),
            RoutingError::ModelNotFound(name.into()),
            "{name}"
        );
    }
    assert_eq!(router.cached_shorthand_count(), 0);
}

#[tokio::test]
async fn a_configured_model_wins_over_the_shorthand_of_the_same_name() {
    let configured = Scripted::new(vec![Ok("configured")]);
    let router = ModelRouter::new(
        vec![RoutedModel {
            name: "dummy::echo".into(),
            providers: vec![chat_only("mine", configured.clone())],
        }],
        RetryPolicy::from(&crate::config::RetryConfig::default()),
    );
    let none = HashMap::new();
    let answer = router
        .chat(&dummy_request("dummy::echo"), CallContext { credentials: &none })
        .await
        .unwrap();
    assert_eq!(content(&answer), "configured");
    assert_eq!(answer.provider_name, "mine");
    assert_eq!(configured.calls(), 1);
    assert_eq!(router.cached_shorthand_count(), 0);
}

#[tokio::test]
async fn the_shorthand_cache_is_bounded_and_later_models_still_route() {
    let router = router(vec![chat_only("a", Scripted::new(vec![]))], 0);
    for i in 0..SHORTHAND_CACHE_LIMIT + 5 {
        router.model(&format!("dummy::m{i}")).unwrap();
    }
    assert_eq!(router.cached_shorthand_count(), SHORTHAND_CACHE_LIMIT);
    let none = HashMap::new();
    let answer = router
        .chat(&dummy_request("dummy::one-more"), CallContext { credentials: &none })
        .await
        .unwrap();
    assert_eq!(answer.provider_name, "dummy");
    assert_eq!(router.cached_shorthand_count(), SHORTHAND_CACHE_LIMIT);
    let long = format!("dummy::{}", "x".repeat(MAX_CACHED_NAME_LEN));
    assert!(router.model(&long).is_ok());
}

#[tokio::test]
async fn answers_name_the_provider_that_gave_them_after_fallback() {
    let none = HashMap::new();
    let ctx = CallContext { credentials: &none };
    let a_fails_b_answers = || {
        let a = Scripted::new(vec![Err(http(500))]);
        let b = Scripted::new(vec![Ok("from b")]);
        router(vec![chat_only("a", a), chat_only("b", b)], 0)
    };
    let answer = a_fails_b_answers().chat(&request(), ctx).await.unwrap();
    assert_eq!(
        (answer.provider_name.as_str(), content(&answer).as_str()),
        ("b", "from b")
    );
    let stream = a_fails_b_answers().chat_stream(&request(), ctx).await.unwrap();
    assert_eq!(stream.provider_name, "b");
    // A chat-only provider's stream keeps the raw request of the answer it was split from.
    assert_eq!(stream.raw_request.as_deref(), Some(r#"{"scripted":true}"#));
}

/// The dummy records the body it stands for, with `extra_body` applied, streamed or not.
#[tokio::test]
async fn the_dummy_records_its_raw_request_on_chat_and_stream() {
    use crate::model::{ExtraBodyEntry, ExtraPlacement};
    let router = router(vec![chat_only("a", Scripted::new(vec![]))], 0);
    let none = HashMap::new();
    let ctx = CallContext { credentials: &none };
    let mut request = dummy_request("dummy::echo");
    request.params.temperature = Some(0.5);
    request.extra_body = vec![
        ExtraBodyEntry::set("/vendor", json!("v")),
        ExtraBodyEntry::set("/other", json!(1)).for_provider("elsewhere"),
        ExtraBodyEntry::delete("/temperature").placed(ExtraPlacement::BeforeProviderConfig),
    ];
    let answer = router.chat(&request, ctx).await.unwrap();
    let raw: serde_json::Value = serde_json::from_str(answer.raw_request.as_deref().unwrap()).unwrap();
    assert_eq!(raw["model"], "dummy::echo");
    assert_eq!(raw["messages"][0]["content"], "hi");
    assert_eq!(raw["vendor"], "v");
    assert!(raw.get("other").is_none() && raw.get("temperature").is_none(), "{raw}");
    let stream = router.chat_stream(&request, ctx).await.unwrap();
    assert_eq!(stream.provider_name, "dummy");
    let raw: serde_json::Value = serde_json::from_str(stream.raw_request.as_deref().unwrap()).unwrap();
    assert_eq!(
        (raw["stream"].clone(), raw["vendor"].clone()),
        (json!(true), json!("v"))
    );
    // Edits a real provider would refuse are refused by the dummy too.
    let refused = |err: RoutingError| match err {
        RoutingError::AllFailed { mut failures, .. } => failures.remove(0).error,
        other => panic!("{other:?}"),
    };
    request.extra_headers = vec![crate::model::ExtraHeaderEntry::set("bad name", "v")];
    let err = refused(router.chat(&request, ctx).await.unwrap_err());
    assert!(matches!(err, ProviderError::InvalidExtraHeader(_)), "{err:?}");
    request.extra_headers.clear();
    request.extra_body = vec![ExtraBodyEntry::set("/model/x", json!(1))];
    let err = refused(router.chat(&request, ctx).await.unwrap_err());
    assert!(matches!(err, ProviderError::InvalidExtraBody(_)), "{err:?}");
}

#[tokio::test]
async fn native_batch_is_the_first_native_provider_of_a_configured_model() {
    let config = crate::config::Config::from_toml(
        r#"
[models.mixed]
routing = ["sync", "fake", "native-a", "native-b"]
[models.mixed.providers.sync]
type = "openai"
model_name = "x"
[models.mixed.providers.fake]
type = "dummy"
[models.mixed.providers.native-a]
type = "openai"
model_name = "x"
batch = "native"
[models.mixed.providers.native-b]
type = "openai"
model_name = "x"
batch = "native"

[models.workers]
routing = ["sync"]
[models.workers.providers.sync]
type = "openai"
model_name = "x"
"#,
    )
    .unwrap();
    let secrets: Arc<dyn ProviderSecrets> = Arc::new(NoProviderSecrets);
    let deps = ProviderDeps {
        shared_client: None,
        sagemaker: None,
        secrets: &secrets,
    };
    let models = config
        .models
        .iter()
        .map(|(name, model)| routed_model(name, model, deps).unwrap())
        .collect();
    let router = ModelRouter::new(models, RetryPolicy::from(&config.gateway.retries));
    let target = router.native_batch("mixed").unwrap();
    assert_eq!(target.provider, "native-a");
    assert!(router.native_batch("workers").is_none());
    assert!(router.native_batch("openai::gpt-4o-mini").is_none());
    assert!(router.native_batch("nope").is_none());
}

#[tokio::test]
async fn calls_retries_fallbacks_and_tokens_are_measured_without_shorthand_names() {
    let metrics = Arc::new(crate::adapters::embedded::PrometheusMetrics::new());
    let first = Scripted::new(vec![Err(http(503)), Err(http(400))]);
    let second = Scripted::new(vec![Ok("second")]);
    let router = router(vec![chat_only("a", first), chat_only("b", second)], 1)
        .with_metrics(Arc::clone(&metrics) as Arc<dyn MetricsSink>);
    let none = HashMap::new();
    let answer = router
        .chat(&request(), CallContext { credentials: &none })
        .await
        .unwrap();
    let shorthand = router
        .chat(
            &dummy_request("dummy::some-client-chosen-name"),
            CallContext { credentials: &none },
        )
        .await
        .unwrap();

    let text = metrics.prometheus_text().unwrap();
    let has = |line: &str| assert!(text.contains(line), "{line} missing from:\n{text}");
    has("nimbus_provider_calls_total{model=\"m\",outcome=\"retryable_error\",provider=\"a\"} 1\n");
    has("nimbus_provider_calls_total{model=\"m\",outcome=\"error\",provider=\"a\"} 1\n");
    has("nimbus_provider_calls_total{model=\"m\",outcome=\"ok\",provider=\"b\"} 1\n");
    has("nimbus_provider_retries_total{model=\"m\",provider=\"a\"} 1\n");
    has("nimbus_provider_fallbacks_total{model=\"m\",provider=\"b\"} 1\n");
    let tokens = |c: &ModelResponse, direction: &str, provider: &str, model: &str| {
        let value = if direction == "in" {
            c.usage.input_tokens
        } else {
            c.usage.output_tokens
        };
        format!("nimbus_tokens_total{{direction=\"{direction}\",model=\"{model}\",provider=\"{provider}\"}} {value}\n")
    };
    has(&tokens(&answer, "in", "b", "m"));
    has(&tokens(&answer, "out", "b", "m"));
    has(&tokens(&shorthand, "out", &shorthand.provider_name, "shorthand"));
    assert!(!text.contains("some-client-chosen-name"), "{text}");
    has("nimbus_provider_call_duration_seconds_count{model=\"m\",outcome=\"ok\",provider=\"b\"} 1\n");
}

/// A streamed answer's tokens are counted from its usage chunk, once, when the stream is done.
#[tokio::test]
async fn streamed_tokens_are_counted_from_the_usage_chunk_when_the_stream_ends() {
    use futures::StreamExt;
    let metrics = Arc::new(crate::adapters::embedded::PrometheusMetrics::new());
    let router = router(vec![chat_only("b", Scripted::new(vec![Ok("streamed")]))], 0)
        .with_metrics(Arc::clone(&metrics) as Arc<dyn MetricsSink>);
    let none = HashMap::new();
    let stream = router
        .chat_stream(&request(), CallContext { credentials: &none })
        .await
        .unwrap();
    let chunks: Vec<_> = stream.chunks.collect().await;
    let usage = chunks
        .iter()
        .rev()
        .find_map(|chunk| chunk.as_ref().unwrap().usage.clone())
        .unwrap();
    let text = metrics.prometheus_text().unwrap();
    for (direction, value) in [("in", usage.input_tokens), ("out", usage.output_tokens)] {
        let line = format!("nimbus_tokens_total{{direction=\"{direction}\",model=\"m\",provider=\"b\"}} {value}\n");
        assert!(text.contains(&line), "{line} missing from:\n{text}");
    }
}

#[tokio::test]
async fn tensorzero_requests_make_one_attempt_per_provider_unless_configured() {
    let none = HashMap::new();
    let inference = ModelRequest {
        retries: RetryScope::Inference,
        ..request()
    };
    let once = Scripted::new(vec![Err(http(503)), Ok("second")]);
    let router_a = router(vec![chat_only("a", once.clone())], 2);
    router_a
        .chat(&inference, CallContext { credentials: &none })
        .await
        .unwrap_err();
    assert_eq!(once.calls(), 1);
    // The same failure on the OpenAI-style routes is retried (`max_retries`).
    let retried = Scripted::new(vec![Err(http(503)), Ok("second")]);
    let router_b = router(vec![chat_only("a", retried.clone())], 2);
    router_b
        .chat(&request(), CallContext { credentials: &none })
        .await
        .unwrap();
    assert_eq!(retried.calls(), 2);
    // `inference_max_retries` asks for retries on TensorZero's routes too.
    let configured = Scripted::new(vec![Err(http(503)), Ok("second")]);
    let router_c = router(vec![chat_only("a", configured.clone())], 0).with_inference_retries(1);
    router_c
        .chat(&inference, CallContext { credentials: &none })
        .await
        .unwrap();
    assert_eq!(configured.calls(), 2);
}

#[tokio::test]
async fn answers_name_the_providers_type() {
    let config = crate::config::Config::from_toml(
        "[models.m]\nrouting = [\"mine\"]\n[models.m.providers.mine]\ntype = \"dummy\"\n",
    )
    .unwrap();
    let secrets: Arc<dyn ProviderSecrets> = Arc::new(NoProviderSecrets);
    let deps = ProviderDeps {
        shared_client: None,
        sagemaker: None,
        secrets: &secrets,
    };
    let models = vec![routed_model("m", &config.models["m"], deps).unwrap()];
    let router = ModelRouter::new(models, RetryPolicy::from(&config.gateway.retries));
    let none = HashMap::new();
    let answer = router
        .chat(&request(), CallContext { credentials: &none })
        .await
        .unwrap();
    assert_eq!(
        (answer.provider_name.as_str(), answer.provider_type.as_str()),
        ("mine", "dummy")
    );
}
