//! Non-streamed answers of every schema, finish reasons, usage, and in-band errors.

use super::fake::{ctx, provider, user, FakeTransport};
use crate::config::LmiSchema;
use crate::model::{ContentBlock, FinishReason, ModelResponse, ModelUsage};
use crate::providers::lmi::MODEL_ERROR_STATUS;
use crate::providers::{ChatProvider, ProviderError};
use serde_json::json;

async fn answer(schema: LmiSchema, body: &str) -> Result<ModelResponse, ProviderError> {
    provider(schema, FakeTransport::answering(body))
        .chat(&user("Hi"), ctx())
        .await
}

fn text(response: &ModelResponse) -> &str {
    match &response.choices[0].content[..] {
        [ContentBlock::Text { text }] => text,
        other => panic!("{other:?}"),
    }
}

#[tokio::test]
async fn a_rolling_batch_answer_gives_text_finish_and_usage_from_details() {
    let body = json!({"generated_text": "Hello from LMI", "details": {
        "finish_reason": "eos_token", "generated_tokens": 3, "inputs": "x",
        "tokens": [{"id": 1, "text": "Hello"}, {"id": 2, "text": " from"}, {"id": 3, "text": " LMI"}],
        "prefill": [{"id": 9, "text": "a"}, {"id": 10, "text": "b"}]
    }})
    .to_string();
    let response = answer(LmiSchema::RollingBatch, &body).await.unwrap();
    assert_eq!(text(&response), "Hello from LMI");
    assert_eq!(response.choices[0].finish_reason, Some(FinishReason::Stop));
    assert_eq!(response.usage, ModelUsage::new(2, 3));
    assert_eq!(response.raw_response.as_deref(), Some(body.as_str()));
    let raw_request: serde_json::Value = serde_json::from_str(response.raw_request.as_deref().unwrap()).unwrap();
    assert_eq!(raw_request["parameters"]["details"], true);
    assert!(!response.id.is_empty());
}

#[tokio::test]
async fn a_tgi_array_answer_and_the_finish_reason_typo_are_read() {
    let body = r#"[{"generated_text": "Hi", "details": {"finish reason": "length", "generated_tokens": 8}}]"#;
    let response = answer(LmiSchema::TgiCompat, body).await.unwrap();
    assert_eq!(text(&response), "Hi");
    assert_eq!(response.choices[0].finish_reason, Some(FinishReason::Length));
    // No prefill: no prompt tokens are known.
    assert_eq!(response.usage, ModelUsage::new(0, 8));
}

#[tokio::test]
async fn stop_sequence_is_a_stop_sequence_finish() {
    let body = r#"{"generated_text": "Hi", "details": {"finish_reason": "stop_sequence", "generated_tokens": 1}}"#;
    let response = answer(LmiSchema::RollingBatch, body).await.unwrap();
    assert_eq!(response.choices[0].finish_reason, Some(FinishReason::StopSequence));
}

#[tokio::test]
async fn a_dynamic_batch_list_answer_gives_its_first_text() {
    let response = answer(LmiSchema::DynamicBatch, r#"[{"generated_text": "Deep"}]"#)
        .await
        .unwrap();
    assert_eq!(text(&response), "Deep");
    assert_eq!(response.choices[0].finish_reason, Some(FinishReason::Stop));
    assert_eq!(response.usage, ModelUsage::new(0, 0));
}

#[tokio::test]
async fn a_chat_completion_answer_is_read_as_openai() {
    let body = json!({"id": "chatcmpl-1", "object": "chat.completion", "created": 1, "model": "lmi",
        "choices": [{"index": 0, "message": {"role": "assistant", "content": "Hello"}, "finish_reason": "length"}],
        "usage": {"prompt_tokens": 4, "completion_tokens": 1, "total_tokens": 5}})
    .to_string();
    let response = answer(LmiSchema::Chat, &body).await.unwrap();
    assert_eq!(text(&response), "Hello");
    assert_eq!(response.choices[0].finish_reason, Some(FinishReason::Length));
    assert_eq!(response.usage, ModelUsage::new(4, 1));
}

#[tokio::test]
async fn an_error_finish_on_a_200_is_a_provider_error_not_an_empty_answer() {
    let body = r#"{"generated_text": "", "details": {"finish_reason": "error", "generated_tokens": null, "inputs": null, "tokens": null}}"#;
    for schema in [LmiSchema::RollingBatch, LmiSchema::TgiCompat] {
        let err = answer(schema, body).await.unwrap_err();
        match &err {
            ProviderError::Http { status, message, .. } => {
                assert_eq!(*status, MODEL_ERROR_STATUS);
                assert!(message.contains("error"), "{message}");
            }
            other => panic!("{other:?}"),
        }
        assert!(!err.is_retryable());
    }
    let typo = r#"[{"generated_text": "", "details": {"finish reason": "error"}}]"#;
    assert!(answer(LmiSchema::TgiCompat, typo).await.is_err());
}

#[tokio::test]
async fn an_answer_that_is_not_lmi_is_invalid() {
    let err = answer(LmiSchema::RollingBatch, r#"{"outputs": 1}"#).await.unwrap_err();
    assert!(matches!(err, ProviderError::InvalidResponse(_)), "{err:?}");
}

#[tokio::test]
async fn chat_answers_read_lmis_own_finish_reasons() {
    for (reason, expected) in [
        ("eos_token", FinishReason::Stop),
        ("stop_sequence", FinishReason::StopSequence),
    ] {
        let body = json!({"id": "c", "object": "chat.completion", "created": 1, "model": "lmi",
            "choices": [{"index": 0, "message": {"role": "assistant", "content": "Hi"}, "finish_reason": reason}]})
        .to_string();
        let response = answer(LmiSchema::Chat, &body).await.unwrap();
        assert_eq!(response.choices[0].finish_reason, Some(expected), "{reason}");
    }
}

#[tokio::test]
async fn an_error_object_on_a_200_keeps_the_models_message_and_code() {
    let body = r#"{"error": "Input validation failed: max_new_tokens too large", "code": 400}"#;
    for schema in [LmiSchema::RollingBatch, LmiSchema::Chat, LmiSchema::DynamicBatch] {
        match answer(schema, body).await.unwrap_err() {
            ProviderError::Http { status, message, .. } => {
                assert_eq!(status, 400);
                assert_eq!(message, "Input validation failed: max_new_tokens too large");
            }
            other => panic!("{other:?}"),
        }
    }
}
