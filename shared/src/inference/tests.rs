use super::*;
use crate::config::DummyProviderConfig;
use crate::openai::chat::ChatCompletionRequest;
use crate::openai::to_model::OpenAiChatRequest;
use crate::ports::{SystemClock, UuidV7Ids};
use crate::providers::dummy::DummyProvider;
use crate::providers::retry::RetryPolicy;
use crate::providers::router::RoutedModel;
use futures::StreamExt;
use serde_json::json;
use std::time::Duration;

fn service() -> InferenceService {
    let dummy = DummyProvider::new(
        "d",
        DummyProviderConfig {
            embedding_dimensions: 4,
            ..Default::default()
        },
    )
    .handle();
    let router = ModelRouter::new(
        vec![RoutedModel {
            name: "dummy".into(),
            providers: vec![dummy],
        }],
        RetryPolicy {
            max_retries: 0,
            initial_backoff: Duration::from_millis(1),
            max_backoff: Duration::from_millis(1),
            max_retry_after: Duration::ZERO,
        },
    );
    InferenceService::new(router, Arc::new(SystemClock), Arc::new(UuidV7Ids))
}

fn chat(body: serde_json::Value) -> OpenAiChatRequest {
    let typed: ChatCompletionRequest = serde_json::from_value(body).unwrap();
    OpenAiChatRequest::from_typed(typed)
}

#[tokio::test]
async fn answers_get_minted_ids_and_the_requested_model() {
    let svc = service();
    let none = HashMap::new();
    let answer = svc
        .chat(
            &chat(json!({"model": "dummy", "messages": [{"role": "user", "content": "hi"}]})),
            &none,
        )
        .await
        .unwrap();
    assert!(answer.id.starts_with("chatcmpl-"));
    assert_eq!(answer.model, "dummy");
    assert!(answer.created > 1_700_000_000);
}

#[tokio::test]
async fn stream_usage_chunk_only_when_asked() {
    let svc = service();
    let none = HashMap::new();
    let body = json!({"model": "dummy", "stream": true, "messages": [{"role": "user", "content": "one two three"}]});
    let chunks: Vec<_> = svc
        .chat_stream(&chat(body.clone()), &none)
        .await
        .unwrap()
        .collect()
        .await;
    assert!(chunks.iter().all(|c| c.as_ref().unwrap().usage.is_none()));
    assert!(chunks.len() > 3);
    let ids: std::collections::HashSet<_> = chunks.iter().map(|c| c.as_ref().unwrap().id.clone()).collect();
    assert_eq!(ids.len(), 1);

    let mut with_usage = body;
    with_usage["stream_options"] = json!({"include_usage": true});
    let chunks: Vec<_> = svc.chat_stream(&chat(with_usage), &none).await.unwrap().collect().await;
    let last = chunks.last().unwrap().as_ref().unwrap();
    assert!(last.choices.is_empty());
    assert!(last.usage.as_ref().unwrap().total_tokens > 0);
}

#[tokio::test]
async fn invalid_requests_name_the_parameter() {
    let svc = service();
    let none = HashMap::new();
    for (body, param) in [
        (json!({"model": "dummy", "messages": []}), "messages"),
        (
            json!({"model": "dummy", "n": 129, "messages": [{"role": "user", "content": "x"}]}),
            "n",
        ),
        (
            json!({"model": "dummy", "temperature": 3.0, "messages": [{"role": "user", "content": "x"}]}),
            "temperature",
        ),
        (
            json!({"model": "dummy", "tool_choice": {"type": "function", "function": {"name": "f"}},
                "messages": [{"role": "user", "content": "x"}]}),
            "tool_choice",
        ),
    ] {
        match svc.chat(&chat(body), &none).await {
            Err(InferenceError::InvalidRequest { param: got, .. }) => {
                assert_eq!(got.as_deref(), Some(param))
            }
            other => panic!("expected invalid request for {param}, got {other:?}"),
        }
    }
}

#[tokio::test]
async fn n_choices_come_back_numbered_with_usage_for_all_of_them() {
    let svc = service();
    let none = HashMap::new();
    let body = |n: u32| json!({"model": "dummy", "n": n, "messages": [{"role": "user", "content": "one two three"}]});
    let one = svc.chat(&chat(body(1)), &none).await.unwrap();
    let three = svc.chat(&chat(body(3)), &none).await.unwrap();
    let indexes: Vec<u32> = three.choices.iter().map(|c| c.index).collect();
    assert_eq!(indexes, vec![0, 1, 2]);
    let contents: std::collections::HashSet<_> = three.choices.iter().map(|c| c.message.content.clone()).collect();
    assert_eq!(contents.len(), 3, "each choice differs");
    assert_eq!(
        three.choices[0], one.choices[0],
        "the first choice does not depend on n"
    );
    assert_eq!(three.usage.prompt_tokens, one.usage.prompt_tokens);
    assert_eq!(three.usage.completion_tokens, 3 * one.usage.completion_tokens);

    let mut streamed = body(2);
    streamed["stream"] = json!(true);
    let chunks: Vec<_> = svc.chat_stream(&chat(streamed), &none).await.unwrap().collect().await;
    let mut texts = [String::new(), String::new()];
    for chunk in chunks {
        for choice in chunk.unwrap().choices {
            texts[choice.index as usize].push_str(choice.delta.content.as_deref().unwrap_or_default());
        }
    }
    assert_eq!(texts[0], three.choices[0].message.content.clone().unwrap());
    assert_eq!(texts[1], three.choices[1].message.content.clone().unwrap());
}

#[tokio::test]
async fn embeddings_encode_float_and_base64_alike() {
    let svc = service();
    let none = HashMap::new();
    let request = |format: &str| -> EmbeddingRequest {
        serde_json::from_value(json!({"model": "dummy", "input": ["a", "b"], "encoding_format": format})).unwrap()
    };
    let floats = svc.embed(&request("float"), &none).await.unwrap();
    let b64 = svc.embed(&request("base64"), &none).await.unwrap();
    assert_eq!(floats.data.len(), 2);
    let EmbeddingVector::Float(vector) = &floats.data[1].embedding else {
        panic!()
    };
    assert_eq!(vector.len(), 4);
    assert_eq!(
        EmbeddingVector::encode(vector.clone(), EncodingFormat::Base64),
        b64.data[1].embedding
    );
    let empty: EmbeddingRequest = serde_json::from_value(json!({"model": "dummy", "input": []})).unwrap();
    assert!(matches!(
        svc.embed(&empty, &none).await,
        Err(InferenceError::InvalidRequest { .. })
    ));
}
