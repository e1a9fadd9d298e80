//! Request bodies of every schema, the parameter mapping, and what is refused.

use super::fake::{ctx, provider, user, FakeTransport};
use crate::config::LmiSchema;
use crate::model::{ExtraBodyEntry, ModelRequest, OutputMode, SamplingParams, StreamOptions, ToolDefinition};
use crate::openai::embeddings::{EmbeddingInput, EmbeddingRequest};
use crate::providers::{ChatProvider, ChatStreamProvider, EmbeddingProvider, ProviderError};
use futures::StreamExt;
use serde_json::{json, Value};
use std::collections::BTreeMap;

const ROLLING_ANSWER: &str =
    r#"{"generated_text": "Hi", "details": {"finish_reason": "eos_token", "generated_tokens": 1}}"#;

async fn sent_body(schema: LmiSchema, request: &ModelRequest) -> Value {
    let transport = FakeTransport::answering(match schema {
        LmiSchema::DynamicBatch | LmiSchema::TgiCompat => r#"[{"generated_text": "Hi"}]"#,
        LmiSchema::Chat => {
            r#"{"id": "c", "choices": [{"index": 0, "message": {"role": "assistant", "content": "Hi"}, "finish_reason": "stop"}]}"#
        }
        _ => ROLLING_ANSWER,
    });
    provider(schema, transport.clone()).chat(request, ctx()).await.unwrap();
    transport.last_body()
}

async fn refusal(schema: LmiSchema, request: &ModelRequest) -> (String, String) {
    let transport = FakeTransport::answering(ROLLING_ANSWER);
    match provider(schema, transport.clone())
        .chat(request, ctx())
        .await
        .unwrap_err()
    {
        ProviderError::UnsupportedParameter { param, message } => {
            assert!(transport.sent.lock().unwrap().is_empty(), "nothing is sent");
            (param, message)
        }
        other => panic!("{other:?}"),
    }
}

fn sampled() -> ModelRequest {
    let mut request = user("Hi");
    request.params = SamplingParams {
        temperature: Some(0.7),
        top_p: Some(0.9),
        max_tokens: Some(64),
        presence_penalty: Some(0.1),
        frequency_penalty: Some(0.2),
        seed: Some(7),
        stop_sequences: vec!["\n\n".into()],
        ..SamplingParams::default()
    };
    request
}

#[tokio::test]
async fn rolling_batch_sends_the_rendered_prompt_with_mapped_parameters_and_details() {
    let body = sent_body(LmiSchema::RollingBatch, &sampled()).await;
    assert_eq!(
        body,
        json!({
            "inputs": "<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n",
            "parameters": {
                "max_new_tokens": 64, "temperature": 0.7, "do_sample": true, "top_p": 0.9, "seed": 7,
                "presence_penalty": 0.1, "frequency_penalty": 0.2, "stop_sequences": ["\n\n"], "details": true
            }
        })
    );
}

#[tokio::test]
async fn tgi_compat_sends_the_rolling_batch_body() {
    let body = sent_body(LmiSchema::TgiCompat, &sampled()).await;
    assert_eq!(
        body["inputs"],
        sent_body(LmiSchema::RollingBatch, &sampled()).await["inputs"]
    );
    assert_eq!(body["parameters"]["details"], true);
}

#[tokio::test]
async fn dynamic_batch_sends_a_list_of_one_prompt_without_details() {
    let body = sent_body(LmiSchema::DynamicBatch, &sampled()).await;
    assert!(
        body["inputs"].as_array().is_some_and(|inputs| inputs.len() == 1),
        "{body}"
    );
    assert_eq!(body["parameters"]["max_new_tokens"], 64);
    assert!(body["parameters"].get("details").is_none(), "{body}");
}

#[tokio::test]
async fn temperature_zero_is_greedy_without_a_temperature() {
    let mut request = user("Hi");
    request.params.temperature = Some(0.0);
    let body = sent_body(LmiSchema::RollingBatch, &request).await;
    assert_eq!(body["parameters"], json!({"do_sample": false, "details": true}));
}

#[tokio::test]
async fn streaming_asks_for_a_stream() {
    for schema in [LmiSchema::RollingBatch, LmiSchema::TgiCompat, LmiSchema::DynamicBatch] {
        let transport = FakeTransport::streaming(&[r#"{"token": {"id": 1, "text": "x"}, "generated_text": "x"}"#]);
        let mut request = user("Hi");
        request.stream = Some(StreamOptions {
            include_usage: true,
            ..StreamOptions::default()
        });
        let stream = provider(schema, transport.clone())
            .chat_stream(&request, ctx())
            .await
            .unwrap();
        let _: Vec<_> = stream.chunks.collect().await;
        assert_eq!(transport.last_body()["stream"], true, "{schema:?}");
    }
}

#[tokio::test]
async fn the_chat_schema_sends_the_openai_body_without_a_model_and_keeps_tools() {
    let mut request = sampled();
    request.tools = vec![ToolDefinition {
        name: "f".into(),
        description: None,
        parameters: None,
        strict: None,
    }];
    let body = sent_body(LmiSchema::Chat, &request).await;
    assert!(body.get("model").is_none(), "{body}");
    assert_eq!(body["messages"], json!([{"role": "user", "content": "Hi"}]));
    assert_eq!(body["max_tokens"], 64);
    assert_eq!(body["tools"][0]["function"]["name"], "f");

    let transport = FakeTransport::streaming(&["data: [DONE]\n"]);
    let stream = provider(LmiSchema::Chat, transport.clone())
        .chat_stream(&user("Hi"), ctx())
        .await
        .unwrap();
    let _: Vec<_> = stream.chunks.collect().await;
    let body = transport.last_body();
    assert_eq!(body["stream"], true);
    assert_eq!(body["stream_options"], json!({"include_usage": true}));
}

#[tokio::test]
async fn lmi_generation_parameters_pass_through_into_parameters() {
    let mut request = user("Hi");
    request.openai_pass_through.fields.insert("top_k".into(), json!(40));
    request
        .openai_pass_through
        .fields
        .insert("repetition_penalty".into(), json!(1.1));
    let body = sent_body(LmiSchema::RollingBatch, &request).await;
    assert_eq!(body["parameters"]["top_k"], 40);
    assert_eq!(body["parameters"]["repetition_penalty"], 1.1);
}

#[tokio::test]
async fn extra_body_edits_the_lmi_body() {
    let mut request = user("Hi");
    request.extra_body = vec![ExtraBodyEntry::set("/parameters/top_k", json!(5))];
    let body = sent_body(LmiSchema::RollingBatch, &request).await;
    assert_eq!(body["parameters"]["top_k"], 5);
}

#[tokio::test]
async fn what_a_prompt_cannot_carry_is_refused_naming_the_parameter() {
    let mut cases: Vec<(&str, ModelRequest)> = Vec::new();
    let mut r = user("Hi");
    r.tools = vec![ToolDefinition {
        name: "f".into(),
        description: None,
        parameters: None,
        strict: None,
    }];
    cases.push(("tools", r));
    let mut r = user("Hi");
    r.output = OutputMode::JsonObject;
    cases.push(("response_format", r));
    let mut r = user("Hi");
    r.params.logit_bias = Some(BTreeMap::from([("1".to_owned(), 1.0)]));
    cases.push(("logit_bias", r));
    let mut r = user("Hi");
    r.params.top_logprobs = Some(2);
    cases.push(("top_logprobs", r));
    let mut r = user("Hi");
    r.params.logprobs = Some(true);
    cases.push(("logprobs", r));
    let mut r = user("Hi");
    r.params.user = Some("u".into());
    cases.push(("user", r));
    let mut r = user("Hi");
    r.openai_pass_through
        .fields
        .insert("reasoning_effort".into(), json!("low"));
    cases.push(("reasoning_effort", r));
    for schema in [LmiSchema::RollingBatch, LmiSchema::DynamicBatch] {
        for (param, request) in &cases {
            assert_eq!(refusal(schema, request).await.0, *param, "{schema:?}");
        }
    }
}

#[tokio::test]
async fn embeddings_send_the_texts_and_read_the_vectors() {
    let transport = FakeTransport::answering("[[0.5, 1.0], [2.0, 3.0]]");
    let request = EmbeddingRequest {
        model: "m".into(),
        input: EmbeddingInput::Texts(vec!["a".into(), "b".into()]),
        encoding_format: None,
        dimensions: None,
        user: None,
    };
    let answer = provider(LmiSchema::Embedding, transport.clone())
        .embed(&request, ctx())
        .await
        .unwrap();
    assert_eq!(transport.last_body(), json!({"inputs": ["a", "b"]}));
    assert_eq!(answer.vectors, vec![vec![0.5, 1.0], vec![2.0, 3.0]]);

    let tokens = EmbeddingRequest {
        input: EmbeddingInput::Tokens(vec![1, 2]),
        ..request
    };
    let err = provider(LmiSchema::Embedding, transport)
        .embed(&tokens, ctx())
        .await
        .unwrap_err();
    assert!(
        matches!(&err, ProviderError::UnsupportedParameter { param, .. } if param == "input"),
        "{err:?}"
    );
}

#[test]
fn an_embedding_model_offers_only_embeddings_and_the_others_only_chat() {
    let handle = provider(LmiSchema::Embedding, FakeTransport::answering("[]")).handle();
    assert!(handle.embeddings.is_some() && handle.chat.is_none() && handle.chat_stream.is_none());
    let handle = provider(LmiSchema::TgiCompat, FakeTransport::answering("[]")).handle();
    assert!(handle.embeddings.is_none() && handle.chat.is_some() && handle.chat_stream.is_some());
}

#[tokio::test]
async fn a_raw_prompt_is_sent_as_is_without_the_chat_template() {
    let mut request = user("<|im_start|>user\nHi<|im_end|>\n");
    request.raw_prompt = true;
    for schema in [LmiSchema::RollingBatch, LmiSchema::TgiCompat] {
        let body = sent_body(schema, &request).await;
        assert_eq!(body["inputs"], "<|im_start|>user\nHi<|im_end|>\n");
    }
    let body = sent_body(LmiSchema::DynamicBatch, &request).await;
    assert_eq!(body["inputs"], json!(["<|im_start|>user\nHi<|im_end|>\n"]));
    // Without the flag the same text is wrapped in the template again.
    request.raw_prompt = false;
    let body = sent_body(LmiSchema::RollingBatch, &request).await;
    assert!(body["inputs"]
        .as_str()
        .unwrap()
        .starts_with("<|im_start|>user\n<|im_start|>user"));
}

#[tokio::test]
async fn parallel_tool_calls_are_refused_on_prompt_schemas() {
    let mut request = user("Hi");
    request.parallel_tool_calls = Some(true);
    let (param, _) = refusal(LmiSchema::RollingBatch, &request).await;
    assert_eq!(param, "parallel_tool_calls");
}

#[tokio::test]
async fn the_configured_default_token_cap_is_sent_when_the_request_names_none() {
    let config: crate::config::SageMakerProviderConfig =
        toml::from_str("endpoint_name = \"e\"\ndefault_max_new_tokens = 256").unwrap();
    let mut capped = user("Hi");
    capped.params.max_tokens = Some(8);
    for (schema, answer, pointer) in [
        (LmiSchema::RollingBatch, ROLLING_ANSWER, "/parameters/max_new_tokens"),
        (
            LmiSchema::Chat,
            r#"{"id": "c", "choices": [{"index": 0, "message": {"role": "assistant", "content": "Hi"}, "finish_reason": "stop"}]}"#,
            "/max_tokens",
        ),
    ] {
        let config = crate::config::SageMakerProviderConfig {
            schema,
            ..config.clone()
        };
        let transport = FakeTransport::answering(answer);
        let provider = crate::providers::lmi::LmiProvider::over_sagemaker("sm", &config, transport.clone()).unwrap();
        provider.chat(&user("Hi"), ctx()).await.unwrap();
        assert_eq!(transport.last_body().pointer(pointer), Some(&json!(256)), "{schema:?}");
        provider.chat(&capped, ctx()).await.unwrap();
        assert_eq!(transport.last_body().pointer(pointer), Some(&json!(8)), "{schema:?}");
    }
}
