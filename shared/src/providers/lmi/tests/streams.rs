//! Streamed answers: lines reassembled from bytes split anywhere, every schema's lines, errors.

use crate::config::LmiSchema;
use crate::model::{ChunkBlock, FinishReason, ModelChunk, ModelUsage};
use crate::providers::lmi::stream::chunk_stream;
use crate::providers::lmi::MODEL_ERROR_STATUS;
use crate::providers::ProviderError;
use bytes::Bytes;
use futures::StreamExt;
use std::time::Duration;

const ROLLING: &str = concat!(
    "{\"token\": {\"id\": 1, \"text\": \"Hello\", \"log_prob\": -0.1}}\n",
    "{\"token\": {\"id\": 2, \"text\": \" fr\u{e9}m\", \"log_prob\": -0.2}}\n",
    "{\"token\": {\"id\": 3, \"text\": \" LMI\", \"log_prob\": -0.3}, \"generated_text\": \"Hello fr\u{e9}m LMI\", ",
    "\"details\": {\"finish_reason\": \"eos_token\", \"generated_tokens\": 3, \"inputs\": \"x\", ",
    "\"prefill\": [{\"id\": 7, \"text\": \"a\"}, {\"id\": 8, \"text\": \"b\"}]}}\n"
);

async fn chunks_of(schema: LmiSchema, pieces: Vec<Vec<u8>>) -> Vec<Result<ModelChunk, ProviderError>> {
    let bytes = futures::stream::iter(pieces.into_iter().map(|p| Ok(Bytes::from(p)))).boxed();
    chunk_stream(bytes, schema, Duration::from_secs(5)).collect().await
}

async fn chunks(schema: LmiSchema, text: &str) -> Vec<Result<ModelChunk, ProviderError>> {
    chunks_of(schema, vec![text.as_bytes().to_vec()]).await
}

fn texts(chunks: &[Result<ModelChunk, ProviderError>]) -> String {
    chunks
        .iter()
        .filter_map(|c| c.as_ref().ok())
        .flat_map(|c| &c.choices)
        .flat_map(|c| &c.content)
        .map(|block| match block {
            ChunkBlock::Text { text } => text.as_str(),
            other => panic!("{other:?}"),
        })
        .collect()
}

fn finish(chunks: &[Result<ModelChunk, ProviderError>]) -> Option<FinishReason> {
    chunks
        .iter()
        .filter_map(|c| c.as_ref().ok())
        .flat_map(|c| &c.choices)
        .find_map(|c| c.finish_reason)
}

fn usage(chunks: &[Result<ModelChunk, ProviderError>]) -> Option<ModelUsage> {
    chunks
        .iter()
        .filter_map(|c| c.as_ref().ok())
        .find_map(|c| c.usage.clone())
}

#[tokio::test]
async fn token_lines_become_text_then_the_last_line_gives_finish_and_usage() {
    let out = chunks(LmiSchema::RollingBatch, ROLLING).await;
    assert!(out.iter().all(Result::is_ok), "{out:?}");
    assert_eq!(texts(&out), "Hello fr\u{e9}m LMI");
    assert_eq!(finish(&out), Some(FinishReason::Stop));
    assert_eq!(usage(&out), Some(ModelUsage::new(2, 3)));
    let first = out[0].as_ref().unwrap();
    assert!(first.choices[0].starts_message);
    // The usage chunk is last and has no choices.
    let last = out.last().unwrap().as_ref().unwrap();
    assert!(last.choices.is_empty() && last.usage.is_some());
}

#[tokio::test]
async fn a_line_split_at_any_byte_is_reassembled() {
    let bytes = ROLLING.as_bytes();
    let whole = chunks(LmiSchema::RollingBatch, ROLLING).await;
    for at in 1..bytes.len() {
        let out = chunks_of(
            LmiSchema::RollingBatch,
            vec![bytes[..at].to_vec(), bytes[at..].to_vec()],
        )
        .await;
        assert_eq!(out, whole, "split at byte {at}");
    }
    // One byte at a time.
    let out = chunks_of(LmiSchema::RollingBatch, bytes.iter().map(|b| vec![*b]).collect()).await;
    assert_eq!(out, whole);
}

#[tokio::test]
async fn sse_data_prefixes_comments_and_events_are_handled() {
    let sse: String = ROLLING
        .lines()
        .map(|line| format!(": keep-alive\nevent: message\ndata:{line}\r\n\r\n"))
        .collect();
    let out = chunks(LmiSchema::TgiCompat, &sse).await;
    assert_eq!(out, chunks(LmiSchema::RollingBatch, ROLLING).await);
    let spaced: String = ROLLING.lines().map(|line| format!("data: {line}\n\n")).collect();
    assert_eq!(
        texts(&chunks(LmiSchema::TgiCompat, &spaced).await),
        "Hello fr\u{e9}m LMI"
    );
}

#[tokio::test]
async fn the_finish_reason_typo_and_a_missing_newline_at_the_end_are_read() {
    let body = "{\"token\": {\"id\": 1, \"text\": \"Hi\"}}\n{\"token\": {\"id\": 2, \"text\": \"!\"}, \
                \"generated_text\": \"Hi!\", \"details\": {\"finish reason\": \"length\", \"generated_tokens\": 2}}";
    let out = chunks(LmiSchema::RollingBatch, body).await;
    assert_eq!(texts(&out), "Hi!");
    assert_eq!(finish(&out), Some(FinishReason::Length));
    assert_eq!(usage(&out), Some(ModelUsage::new(0, 2)));
}

#[tokio::test]
async fn an_error_token_mid_stream_is_an_error_item_after_the_good_tokens() {
    let body = concat!(
        "{\"token\": {\"id\": 1, \"text\": \"Hello\"}}\n",
        "{\"token\": {\"id\": -1, \"text\": \"\", \"log_prob\": -1, \"special_token\": true}, \"generated_text\": \"\", ",
        "\"details\": {\"finish_reason\": \"error\", \"generated_tokens\": null, \"inputs\": null}}\n",
        "{\"token\": {\"id\": 2, \"text\": \"never\"}}\n"
    );
    let out = chunks(LmiSchema::RollingBatch, body).await;
    assert_eq!(out.len(), 2, "{out:?}");
    assert_eq!(texts(&out[..1]), "Hello");
    match &out[1] {
        Err(ProviderError::Http { status, .. }) => assert_eq!(*status, MODEL_ERROR_STATUS),
        other => panic!("{other:?}"),
    }
}

#[tokio::test]
async fn an_error_object_in_the_stream_is_an_error_with_its_message() {
    let out = chunks(LmiSchema::RollingBatch, "{\"error\": \"boom\", \"code\": 424}\n").await;
    match &out[..] {
        [Err(ProviderError::Http { status, message, .. })] => {
            assert_eq!((*status, message.as_str()), (424, "boom"));
        }
        other => panic!("{other:?}"),
    }
}

#[tokio::test]
async fn dynamic_batch_outputs_lines_stream_text_and_end_with_a_counted_usage() {
    let out = chunks(
        LmiSchema::DynamicBatch,
        "{\"outputs\": [\"This\"]}\n{\"outputs\": [\" is\"]}\n",
    )
    .await;
    assert_eq!(texts(&out), "This is");
    assert_eq!(finish(&out), Some(FinishReason::Stop));
    assert_eq!(usage(&out), Some(ModelUsage::new(0, 2)));
}

#[tokio::test]
async fn chat_chunks_are_read_as_openai_chunks_with_or_without_data_prefix() {
    let chunk = |content: &str| {
        format!(
            "{{\"id\": \"c\", \"object\": \"chat.completion.chunk\", \"created\": 1, \"model\": \"m\", \
             \"choices\": [{{\"index\": 0, \"delta\": {{\"content\": \"{content}\"}}, \"finish_reason\": null}}]}}"
        )
    };
    let usage_line = "{\"id\": \"c\", \"object\": \"chat.completion.chunk\", \"created\": 1, \"model\": \"m\", \
                      \"choices\": [], \"usage\": {\"prompt_tokens\": 3, \"completion_tokens\": 2, \"total_tokens\": 5}}";
    let lines = format!("{}\n{}\n{usage_line}\n[DONE]\n", chunk("He"), chunk("y"));
    let out = chunks(LmiSchema::Chat, &lines).await;
    assert_eq!(texts(&out), "Hey");
    assert_eq!(usage(&out), Some(ModelUsage::new(3, 2)));
    let sse = format!("data: {}\n\ndata: {}\n\ndata: [DONE]\n\n", chunk("He"), chunk("y"));
    assert_eq!(texts(&chunks(LmiSchema::Chat, &sse).await), "Hey");
}

#[tokio::test]
async fn a_json_value_written_over_several_lines_is_joined() {
    let pretty = "data: {\n  \"token\": {\"id\": 5, \"text\": \"ok\"},\n  \"generated_text\": \"ok\",\n  \
                  \"details\": {\"finish_reason\": \"length\", \"generated_tokens\": 1}\n}\n";
    let out = chunks(LmiSchema::TgiCompat, pretty).await;
    assert_eq!(texts(&out), "ok");
    assert_eq!(finish(&out), Some(FinishReason::Length));
}

#[tokio::test]
async fn silence_longer_than_the_timeout_ends_the_stream_with_a_timeout() {
    let first = futures::stream::iter([Ok(Bytes::from_static(b"{\"token\": {\"id\": 1, \"text\": \"a\"}}\n"))]);
    let bytes = first.chain(futures::stream::pending()).boxed();
    let out: Vec<_> = chunk_stream(bytes, LmiSchema::RollingBatch, Duration::from_millis(50))
        .collect()
        .await;
    assert_eq!(texts(&out[..1]), "a");
    assert!(matches!(out[1], Err(ProviderError::Timeout { .. })), "{out:?}");
}

#[tokio::test]
async fn a_broken_byte_stream_ends_with_its_error() {
    let bytes = futures::stream::iter([
        Ok(Bytes::from_static(b"{\"token\": {\"id\": 1, \"text\": \"a\"}}\n{\"tok")),
        Err(ProviderError::Connection("reset".into())),
    ])
    .boxed();
    let out: Vec<_> = chunk_stream(bytes, LmiSchema::RollingBatch, Duration::from_secs(5))
        .collect()
        .await;
    assert_eq!(texts(&out[..1]), "a");
    assert_eq!(out[1], Err(ProviderError::Connection("reset".into())));
    assert_eq!(out.len(), 2);
}

#[tokio::test]
async fn special_tokens_add_no_text() {
    let body = "data: {\"token\": {\"id\": 1, \"text\": \"Hi\", \"special\": false}}\n\n\
                data: {\"token\": {\"id\": 2, \"text\": \"</s>\", \"special\": true}, \"generated_text\": \"Hi\", \
                \"details\": {\"finish_reason\": \"eos_token\", \"generated_tokens\": 2}}\n\n";
    let out = chunks(LmiSchema::TgiCompat, body).await;
    assert_eq!(texts(&out), "Hi");
    assert_eq!(usage(&out), Some(ModelUsage::new(0, 2)));
}

#[tokio::test]
async fn a_rolling_or_tgi_stream_without_its_last_line_is_an_error() {
    let cut = "{\"token\": {\"id\": 1, \"text\": \"Hello\"}}\n";
    for schema in [LmiSchema::RollingBatch, LmiSchema::TgiCompat] {
        let out = chunks(schema, cut).await;
        assert_eq!(texts(&out), "Hello");
        assert!(
            matches!(out.last(), Some(Err(ProviderError::Connection(_)))),
            "{schema:?}: {out:?}"
        );
        assert_eq!(finish(&out), None);
    }
}

#[tokio::test]
async fn chat_chunks_read_lmis_own_finish_reasons() {
    let line = "{\"id\": \"c\", \"object\": \"chat.completion.chunk\", \"created\": 1, \"model\": \"m\", \
                \"choices\": [{\"index\": 0, \"delta\": {\"content\": \"!\"}, \"finish_reason\": \"stop_sequence\"}]}\n";
    let out = chunks(LmiSchema::Chat, line).await;
    assert_eq!(finish(&out), Some(FinishReason::StopSequence));
}
