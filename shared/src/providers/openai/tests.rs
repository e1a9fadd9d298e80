//! The OpenAI-compatible provider against a local mock upstream.

use super::*;
use crate::config::CredentialLocation;
use crate::model::{ChunkBlock, ContentBlock, ExtraBodyEntry, ExtraHeaderEntry, ModelChunk};
use crate::openai::chat::ChatCompletionRequest;
use crate::openai::to_model::OpenAiChatRequest;
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::post;
use axum::{Json, Router};
use futures::StreamExt;
use std::collections::HashMap;
use std::sync::{Arc, Mutex};

#[derive(Default)]
pub(super) struct Seen {
    pub(super) bodies: Vec<Value>,
    auth: Vec<Option<String>>,
    team: Vec<Option<String>>,
    trace: Vec<Option<String>>,
}

async fn chat(State(seen): State<Arc<Mutex<Seen>>>, headers: HeaderMap, Json(body): Json<Value>) -> Response {
    {
        let mut seen = seen.lock().unwrap();
        seen.auth
            .push(headers.get("authorization").map(|v| v.to_str().unwrap().to_owned()));
        seen.team
            .push(headers.get("x-team").map(|v| v.to_str().unwrap().to_owned()));
        seen.trace
            .push(headers.get("x-trace").map(|v| v.to_str().unwrap().to_owned()));
        seen.bodies.push(body.clone());
    }
    if body["messages"][0]["content"] == "sleep" {
        tokio::time::sleep(Duration::from_secs(5)).await;
    }
    if body["messages"][0]["content"] == "fail" {
        return (
            StatusCode::TOO_MANY_REQUESTS,
            [("retry-after", "1")],
            Json(json!({"error": {"message": "slow down"}})),
        )
            .into_response();
    }
    // Like OpenAI: `n` choices, streamed interleaved, each carrying its index.
    let n = body["n"].as_u64().unwrap_or(1);
    if body["stream"] == true {
        let chunk = |content: &str, index: u64| {
            json!({"id": "up-1", "object": "chat.completion.chunk", "created": 1, "model": "up",
                   "choices": [{"index": index, "delta": {"content": content}, "finish_reason": null}]})
        };
        let usage = json!({"id": "up-1", "object": "chat.completion.chunk", "created": 1, "model": "up",
                           "choices": [], "usage": {"prompt_tokens": 1, "completion_tokens": 2 * n, "total_tokens": 1 + 2 * n}});
        let mut sse = String::new();
        for piece in ["Hel", "lo"] {
            for index in 0..n {
                sse.push_str(&format!("data: {}\n\n", chunk(piece, index)));
            }
        }
        sse.push_str(&format!("data: {usage}\n\ndata: [DONE]\n\n"));
        return ([("content-type", "text/event-stream")], sse).into_response();
    }
    let choices: Vec<Value> = (0..n)
        .map(|index| json!({"index": index, "message": {"role": "assistant", "content": "Hello"}, "finish_reason": "stop"}))
        .collect();
    Json(json!({
        "id": "up-1", "object": "chat.completion", "created": 1, "model": "up",
        "choices": choices,
        "usage": {"prompt_tokens": 1, "completion_tokens": n, "total_tokens": 1 + n},
        "some_vendor_field": true
    }))
    .into_response()
}

async fn embeddings(Json(body): Json<Value>) -> Json<Value> {
    let n = body["input"].as_array().map_or(1, Vec::len);
    let data: Vec<Value> = (0..n)
        .rev()
        .map(|i| json!({"index": i, "embedding": [i as f32, 0.5]}))
        .collect();
    Json(json!({"data": data, "usage": {"prompt_tokens": 4, "total_tokens": 4}}))
}

pub(super) async fn start_mock() -> (String, Arc<Mutex<Seen>>) {
    let seen = Arc::new(Mutex::new(Seen::default()));
    let app = Router::new()
        .route("/v1/chat/completions", post(chat))
        .route("/v1/embeddings", post(embeddings))
        .with_state(seen.clone());
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
    (format!("http://{addr}/v1"), seen)
}

pub(super) fn provider(api_base: String, location: CredentialLocation) -> OpenAiProvider {
    provider_with_timeout(api_base, location, 5_000)
}

fn provider_with_timeout(api_base: String, location: CredentialLocation, timeout_ms: u64) -> OpenAiProvider {
    let config = OpenAiProviderConfig {
        model_name: "upstream-model".into(),
        api_base,
        api_key_location: location,
        timeout_ms,
        connect_timeout_ms: 1_000,
        extra_body: Vec::new(),
        extra_headers: vec![crate::config::ExtraHeaderEntry {
            name: "x-team".into(),
            value: Some("ml".into()),
            delete: None,
        }],
        batch: crate::config::BatchMode::Workers,
        max_tokens_field: None,
    };
    OpenAiProvider::new("openai", config, Arc::new(crate::ports::NoProviderSecrets)).unwrap()
}

fn openai_request(raw: Value) -> ModelRequest {
    let typed: ChatCompletionRequest = serde_json::from_value(raw.clone()).unwrap();
    let Value::Object(raw) = raw else { unreachable!() };
    OpenAiChatRequest { typed, raw }.to_model()
}

pub(super) fn chat_request(content: &str) -> ModelRequest {
    openai_request(
        json!({"model": "alias", "messages": [{"role": "user", "content": content}],
                          "frequency_penalty": 0.5, "credentials": {"k": "secret"}}),
    )
}

fn first_text(response: &ModelResponse) -> Option<&str> {
    response.choices[0].content.iter().find_map(|block| match block {
        ContentBlock::Text { text } => Some(text.as_str()),
        _ => None,
    })
}

/// Text of every choice in a chunk, by choice index.
fn chunk_texts(chunk: &ModelChunk) -> Vec<(u32, String)> {
    chunk
        .choices
        .iter()
        .map(|choice| {
            let text = choice
                .content
                .iter()
                .filter_map(|block| match block {
                    ChunkBlock::Text { text } => Some(text.as_str()),
                    _ => None,
                })
                .collect();
            (choice.index, text)
        })
        .collect()
}

#[tokio::test]
async fn forwards_the_raw_body_with_the_upstream_model_and_dynamic_key() {
    let (base, seen) = start_mock().await;
    let provider = provider(base, CredentialLocation::Dynamic("k".into()));
    let credentials: HashMap<String, String> = [("k".to_owned(), "secret".to_owned())].into_iter().collect();
    let ctx = CallContext {
        credentials: &credentials,
    };
    let completion = provider.chat(&chat_request("hi"), ctx).await.unwrap();
    assert_eq!(first_text(&completion), Some("Hello"));
    assert!(completion
        .raw_response
        .as_deref()
        .unwrap()
        .contains("some_vendor_field"));
    let seen = seen.lock().unwrap();
    let body = &seen.bodies[0];
    assert_eq!(body["model"], "upstream-model");
    assert_eq!(body["frequency_penalty"], 0.5);
    assert!(body.get("credentials").is_none());
    assert_eq!(seen.auth[0].as_deref(), Some("Bearer secret"));
    assert_eq!(seen.team[0].as_deref(), Some("ml"));
}

#[tokio::test]
async fn missing_dynamic_credential_is_reported() {
    let (base, _) = start_mock().await;
    let provider = provider(base, CredentialLocation::Dynamic("k".into()));
    let none = HashMap::new();
    let err = provider
        .chat(&chat_request("hi"), CallContext { credentials: &none })
        .await
        .unwrap_err();
    assert_eq!(err, ProviderError::MissingCredential("k".into()));
}

#[tokio::test]
async fn upstream_errors_keep_status_message_and_retry_after() {
    let (base, _) = start_mock().await;
    let provider = provider(base, CredentialLocation::None);
    let none = HashMap::new();
    let err = provider
        .chat(&chat_request("fail"), CallContext { credentials: &none })
        .await
        .unwrap_err();
    assert_eq!(
        err,
        ProviderError::Http {
            status: 429,
            message: "slow down".into(),
            retry_after: Some(Duration::from_secs(1)),
            body: Some(json!({"error": {"message": "slow down"}})),
        }
    );
    assert!(err.is_retryable());
}

#[tokio::test]
async fn streams_chunks_until_done_and_asks_for_usage() {
    let (base, seen) = start_mock().await;
    let provider = provider(base, CredentialLocation::None);
    let none = HashMap::new();
    let stream = provider
        .chat_stream(&chat_request("hi"), CallContext { credentials: &none })
        .await
        .unwrap();
    let chunks: Vec<_> = stream.chunks.collect().await;
    assert_eq!(chunks.len(), 3);
    let text: String = chunks
        .iter()
        .flat_map(|c| chunk_texts(c.as_ref().unwrap()))
        .map(|(_, text)| text)
        .collect();
    assert_eq!(text, "Hello");
    let usage = chunks[2].as_ref().unwrap().usage.clone().unwrap();
    assert_eq!(usage.input_tokens + usage.output_tokens, 3);
    assert_eq!(seen.lock().unwrap().bodies[0]["stream_options"]["include_usage"], true);
}

#[tokio::test]
async fn n_is_passed_through_and_every_choice_comes_back_streamed_or_not() {
    let (base, seen) = start_mock().await;
    let provider = provider(base, CredentialLocation::None);
    let none = HashMap::new();
    let mut request = chat_request("hi");
    request.params.n = Some(3);
    let completion = provider
        .chat(&request, CallContext { credentials: &none })
        .await
        .unwrap();
    assert_eq!(
        completion.choices.iter().map(|c| c.index).collect::<Vec<_>>(),
        vec![0, 1, 2]
    );
    assert_eq!(completion.usage.output_tokens, 3);
    let chunks: Vec<_> = provider
        .chat_stream(&request, CallContext { credentials: &none })
        .await
        .unwrap()
        .chunks
        .collect()
        .await;
    let mut texts = vec![String::new(); 3];
    for chunk in &chunks {
        for (index, text) in chunk_texts(chunk.as_ref().unwrap()) {
            texts[index as usize].push_str(&text);
        }
    }
    assert_eq!(texts, vec!["Hello"; 3]);
    assert_eq!(
        chunks
            .last()
            .unwrap()
            .as_ref()
            .unwrap()
            .usage
            .as_ref()
            .unwrap()
            .output_tokens,
        6
    );
    let seen = seen.lock().unwrap();
    assert!(seen.bodies.iter().all(|body| body["n"] == 3), "{:?}", seen.bodies);
    assert_eq!(provider.handle().choices, crate::providers::ChoiceSupport::Native);
}

#[tokio::test]
async fn embeddings_come_back_in_input_order() {
    let (base, _) = start_mock().await;
    let provider = provider(base, CredentialLocation::None);
    let none = HashMap::new();
    let request: EmbeddingRequest = serde_json::from_value(json!({"model": "m", "input": ["a", "b", "c"]})).unwrap();
    let result = provider
        .embed(&request, CallContext { credentials: &none })
        .await
        .unwrap();
    assert_eq!(
        result.vectors.iter().map(|v| v[0]).collect::<Vec<_>>(),
        vec![0.0, 1.0, 2.0]
    );
    assert_eq!(result.usage.total_tokens, 4);
}

#[tokio::test]
async fn connection_refused_is_a_retryable_connection_error() {
    let provider = provider("http://127.0.0.1:9/v1".into(), CredentialLocation::None);
    let none = HashMap::new();
    let err = provider
        .chat(&chat_request("hi"), CallContext { credentials: &none })
        .await
        .unwrap_err();
    assert!(matches!(err, ProviderError::Connection(_)), "{err:?}");
    assert!(err.is_retryable());
}

#[test]
fn mid_stream_errors_are_errors() {
    assert!(stream::parse_chunk(r#"{"error": {"message": "overloaded"}}"#, false).is_err());
    assert!(stream::parse_chunk(r#"{"id": "x", "choices": []}"#, false).is_ok());
    let raw = r#"{"id": "x", "choices": []}"#;
    assert_eq!(stream::parse_chunk(raw, false).unwrap().raw_chunk, None);
    assert_eq!(stream::parse_chunk(raw, true).unwrap().raw_chunk.as_deref(), Some(raw));
}

#[tokio::test]
async fn slow_upstreams_time_out_for_whole_and_streamed_calls() {
    let (base, _) = start_mock().await;
    let provider = provider_with_timeout(base, CredentialLocation::None, 200);
    let none = HashMap::new();
    let err = provider
        .chat(&chat_request("sleep"), CallContext { credentials: &none })
        .await
        .unwrap_err();
    assert!(matches!(err, ProviderError::Timeout { .. }), "{err:?}");
    assert!(!err.is_retryable());
    let err = match provider
        .chat_stream(&chat_request("sleep"), CallContext { credentials: &none })
        .await
    {
        Err(err) => err,
        Ok(_) => panic!("stream should time out before its first byte"),
    };
    assert!(matches!(err, ProviderError::Timeout { .. }), "{err:?}");
}

#[tokio::test]
async fn env_credentials_that_are_not_set_are_a_clear_error() {
    let (base, _) = start_mock().await;
    let provider = provider(base, CredentialLocation::Env("NIMBUS_TEST_SURELY_UNSET_VAR".into()));
    let none = HashMap::new();
    let err = provider
        .chat(&chat_request("hi"), CallContext { credentials: &none })
        .await
        .unwrap_err();
    assert!(err.to_string().contains("NIMBUS_TEST_SURELY_UNSET_VAR"), "{err}");
}

#[tokio::test]
async fn unmodelled_client_parameters_reach_the_upstream() {
    let (base, seen) = start_mock().await;
    let provider = provider(base, CredentialLocation::None);
    let none = HashMap::new();
    let request = openai_request(
        json!({"model": "alias", "messages": [{"role": "user", "content": "hi"}],
        "top_k": 7, "store": true, "metadata": {"k": "v"}, "chat_template_kwargs": {"enable_thinking": false},
        "max_completion_tokens": 9, "user": "u-1"}),
    );
    provider
        .chat(&request, CallContext { credentials: &none })
        .await
        .unwrap();
    let seen = seen.lock().unwrap();
    let body = &seen.bodies[0];
    assert_eq!(body["top_k"], 7);
    assert_eq!(body["store"], true);
    assert_eq!(body["metadata"], json!({"k": "v"}));
    assert_eq!(body["chat_template_kwargs"], json!({"enable_thinking": false}));
    assert_eq!(body["max_completion_tokens"], 9);
    assert_eq!(body["user"], "u-1");
    assert!(body.get("max_tokens").is_none());
}

#[tokio::test]
async fn extra_body_and_extra_headers_are_applied_last() {
    let (base, seen) = start_mock().await;
    let provider = provider(base, CredentialLocation::None);
    let none = HashMap::new();
    let mut request = chat_request("hi");
    request.extra_body = vec![
        ExtraBodyEntry::delete("/frequency_penalty"),
        ExtraBodyEntry::set("/vendor/option", json!(1)),
    ];
    request.extra_headers = vec![
        ExtraHeaderEntry::set("x-trace", "t-1"),
        ExtraHeaderEntry::delete("X-Team"),
    ];
    let chunks: Vec<_> = provider
        .chat_stream(&request, CallContext { credentials: &none })
        .await
        .unwrap()
        .chunks
        .collect()
        .await;
    assert!(chunks.iter().all(Result::is_ok));
    let seen = seen.lock().unwrap();
    let body = &seen.bodies[0];
    assert!(body.get("frequency_penalty").is_none(), "{body}");
    assert_eq!(body["vendor"], json!({"option": 1}));
    assert_eq!(body["stream"], true);
    assert_eq!(seen.trace[0].as_deref(), Some("t-1"));
    assert_eq!(
        seen.team[0], None,
        "a header without a value removes the configured one"
    );
}

pub(super) fn layered_provider(api_base: String) -> OpenAiProvider {
    let mut config = provider(api_base, CredentialLocation::None).config;
    config.extra_body = vec![crate::config::ExtraBodyEntry {
        pointer: "/layer".into(),
        value: Some(json!("provider")),
        delete: None,
    }];
    config.extra_headers = vec![crate::config::ExtraHeaderEntry {
        name: "x-team".into(),
        value: Some("provider".into()),
        delete: None,
    }];
    OpenAiProvider::new("openai", config, Arc::new(crate::ports::NoProviderSecrets)).unwrap()
}

/// Variant entries, then the provider's, then the request's: the last to set a key wins, and
/// entries for another provider are skipped. The answer carries the body as sent.
#[tokio::test]
async fn extras_apply_variant_then_provider_then_request_and_skip_other_providers() {
    use crate::model::ExtraPlacement::BeforeProviderConfig;
    let (base, seen) = start_mock().await;
    let provider = layered_provider(base);
    let none = HashMap::new();
    let mut request = chat_request("hi");
    request.extra_body = vec![
        ExtraBodyEntry::set("/layer", json!("variant")).placed(BeforeProviderConfig),
        ExtraBodyEntry::set("/from_variant", json!(true)).placed(BeforeProviderConfig),
        ExtraBodyEntry::set("/elsewhere", json!(1)).for_provider("other"),
    ];
    request.extra_headers = vec![
        ExtraHeaderEntry::set("x-team", "variant").placed(BeforeProviderConfig),
        ExtraHeaderEntry::set("x-trace", "inference"),
    ];
    let answer = provider
        .chat(&request, CallContext { credentials: &none })
        .await
        .unwrap();
    request
        .extra_body
        .push(ExtraBodyEntry::set("/layer", json!("inference")).for_provider("openai"));
    request.extra_headers.push(ExtraHeaderEntry::set("x-team", "inference"));
    let stream = provider
        .chat_stream(&request, CallContext { credentials: &none })
        .await
        .unwrap();
    let stream_raw = stream.raw_request.clone();
    assert!(stream.chunks.collect::<Vec<_>>().await.iter().all(Result::is_ok));

    let seen = seen.lock().unwrap();
    let (first, second) = (&seen.bodies[0], &seen.bodies[1]);
    assert_eq!(first["layer"], "provider", "the provider's config beats the variant's");
    assert_eq!(first["from_variant"], true);
    assert!(first.get("elsewhere").is_none(), "{first}");
    assert_eq!(seen.team[0].as_deref(), Some("provider"));
    assert_eq!(seen.trace[0].as_deref(), Some("inference"));
    assert_eq!(
        second["layer"], "inference",
        "the request's entries beat the provider's"
    );
    assert_eq!(seen.team[1].as_deref(), Some("inference"));
    let as_sent = |raw: Option<&str>| serde_json::from_str::<Value>(raw.unwrap()).unwrap();
    assert_eq!(&as_sent(answer.raw_request.as_deref()), first);
    assert_eq!(&as_sent(stream_raw.as_deref()), second);
}

#[tokio::test]
async fn a_request_edit_that_cannot_apply_is_reported_without_calling_upstream() {
    let (base, seen) = start_mock().await;
    let provider = provider(base, CredentialLocation::None);
    let none = HashMap::new();
    let mut request = chat_request("hi");
    request.extra_body = vec![ExtraBodyEntry::set("/model/x", json!(1))];
    let err = provider
        .chat(&request, CallContext { credentials: &none })
        .await
        .unwrap_err();
    assert!(matches!(err, ProviderError::InvalidExtraBody(_)), "{err:?}");
    assert!(!err.is_retryable());
    assert!(seen.lock().unwrap().bodies.is_empty());
}

/// A parameter store that fails every read with `error`.
#[derive(Debug)]
struct FailingStore(crate::ports::SecretError);

#[async_trait::async_trait]
impl crate::ports::ProviderSecrets for FailingStore {
    async fn parameter(&self, _name: &str) -> Result<crate::ports::SecretValue, crate::ports::SecretError> {
        Err(self.0.clone())
    }
}

/// An `ssm::` key the store cannot give: a store briefly down is retried (like a connection
/// failure); a denied one is a configuration error whose text keeps the store's own message
/// (account, role) out; nothing reaches the upstream either way.
#[tokio::test]
async fn an_ssm_key_the_store_cannot_give_is_a_provider_error_without_the_stores_details() {
    use crate::ports::SecretError;
    let (base, seen) = start_mock().await;
    let name = "/nimbus/k".to_owned();
    let reason = "User: arn:aws:sts::123456789012:assumed-role/r is not authorized".to_owned();
    let cases = [
        (
            SecretError::Unavailable {
                name: name.clone(),
                reason: reason.clone(),
            },
            true,
        ),
        (
            SecretError::Denied {
                name: name.clone(),
                reason: reason.clone(),
            },
            false,
        ),
    ];
    for (error, retryable) in cases {
        let config = OpenAiProviderConfig {
            api_key_location: CredentialLocation::Ssm(name.clone()),
            ..OpenAiProviderConfig::for_model("m")
        };
        let config = OpenAiProviderConfig {
            api_base: base.clone(),
            ..config
        };
        let provider = OpenAiProvider::new("openai", config, Arc::new(FailingStore(error))).unwrap();
        let none = HashMap::new();
        let err = provider
            .chat(&chat_request("hi"), CallContext { credentials: &none })
            .await
            .unwrap_err();
        assert_eq!(err.is_retryable(), retryable, "{err:?}");
        let text = err.to_string();
        assert!(text.contains("`/nimbus/k`"), "{text}");
        assert!(!text.contains("123456789012"), "{text}");
    }
    assert!(seen.lock().unwrap().bodies.is_empty());
}

/// A provider whose bodies are looked at, never sent.
fn offline_provider(config: OpenAiProviderConfig) -> OpenAiProvider {
    OpenAiProvider::new("p", config, Arc::new(crate::ports::NoProviderSecrets)).unwrap()
}

#[test]
fn the_token_cap_goes_under_the_configured_key() {
    let request = |completion_spelling: bool| ModelRequest {
        model: "m".into(),
        params: crate::model::SamplingParams {
            max_tokens: Some(7),
            ..Default::default()
        },
        openai_pass_through: crate::model::OpenAiPassThrough {
            max_completion_tokens_spelling: completion_spelling,
            ..Default::default()
        },
        ..ModelRequest::default()
    };
    let provider = |field| {
        offline_provider(OpenAiProviderConfig {
            max_tokens_field: field,
            ..OpenAiProviderConfig::for_model("m")
        })
    };
    use crate::config::MaxTokensField;
    let cap_keys = |body: Value| {
        let object = body.as_object().cloned().unwrap_or_default();
        ["max_tokens", "max_completion_tokens"]
            .into_iter()
            .filter(|key| object.get(*key) == Some(&json!(7)))
            .collect::<Vec<_>>()
    };
    // Unset: the request's spelling (`/inference` asks for max_completion_tokens).
    let unset = provider(None);
    assert_eq!(
        cap_keys(unset.upstream_chat_body(&request(true), false).unwrap()),
        ["max_completion_tokens"]
    );
    assert_eq!(
        cap_keys(unset.upstream_chat_body(&request(false), false).unwrap()),
        ["max_tokens"]
    );
    let old_server = provider(Some(MaxTokensField::MaxTokens));
    assert_eq!(
        cap_keys(old_server.upstream_chat_body(&request(true), false).unwrap()),
        ["max_tokens"]
    );
    let openai = provider(Some(MaxTokensField::MaxCompletionTokens));
    assert_eq!(
        cap_keys(openai.upstream_chat_body(&request(false), false).unwrap()),
        ["max_completion_tokens"]
    );
}

#[test]
fn allowed_tools_go_as_openais_allowed_tools_choice_and_restrict_elsewhere() {
    let tool = |name: &str| crate::model::ToolDefinition {
        name: name.into(),
        description: None,
        parameters: Some(json!({"type": "object"})),
        strict: None,
    };
    let request = ModelRequest {
        model: "m".into(),
        tools: vec![tool("a"), tool("b")],
        tool_choice: Some(crate::model::ToolChoice::Required),
        allowed_tools: Some(vec!["b".into()]),
        ..ModelRequest::default()
    };
    let provider = offline_provider(OpenAiProviderConfig::for_model("m"));
    let body = provider.upstream_chat_body(&request, false).unwrap();
    let names: Vec<&str> = body["tools"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["function"]["name"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["a", "b"]);
    assert_eq!(
        body["tool_choice"],
        json!({"type": "allowed_tools", "allowed_tools": {"mode": "required",
            "tools": [{"type": "function", "function": {"name": "b"}}]}})
    );
    // A server without that tool choice (the plain body other providers send): only `b`.
    let plain = crate::openai::chat_body::model_to_chat_body(&request, "m");
    assert_eq!(plain["tools"].as_array().unwrap().len(), 1);
    assert_eq!(plain["tools"][0]["function"]["name"], "b");
    assert_eq!(plain["tool_choice"], json!("required"));
}

#[test]
fn reasoning_parameters_go_upstream_as_openai_fields() {
    let request = ModelRequest {
        model: "m".into(),
        params: crate::model::SamplingParams {
            reasoning_effort: Some("low".into()),
            service_tier: Some("flex".into()),
            verbosity: Some("high".into()),
            thinking_budget_tokens: Some(100),
            ..Default::default()
        },
        ..ModelRequest::default()
    };
    let provider = offline_provider(OpenAiProviderConfig::for_model("m"));
    let body = provider.upstream_chat_body(&request, false).unwrap();
    assert_eq!(body["reasoning_effort"], "low");
    assert_eq!(body["service_tier"], "flex");
    assert_eq!(body["verbosity"], "high");
    assert!(body.get("thinking_budget_tokens").is_none());
}
