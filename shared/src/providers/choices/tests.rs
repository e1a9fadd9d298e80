//! `n` choices through the router from providers that answer one choice per call, and from one
//! that answers them all natively.

use super::*;
use crate::model::{ChunkBlock, ContentBlock, Message, Role, SamplingParams};
use crate::providers::retry::RetryPolicy;
use crate::providers::router::{ModelRouter, RoutedModel};
use crate::providers::synthetic_stream::chunks_from_response;
use crate::providers::{ChatStreamProvider, ChoiceSupport, ProviderHandle};
use async_trait::async_trait;
use std::collections::HashMap;
use std::sync::Mutex;
use std::time::Duration;

/// Answers one choice per call, numbering its answers, and records the `n` each call carried.
#[derive(Default)]
struct OneAtATime {
    seen_n: Mutex<Vec<Option<u32>>>,
}

impl OneAtATime {
    fn answer(&self, request: &ModelRequest) -> ModelResponse {
        let mut seen = self.seen_n.lock().unwrap();
        seen.push(request.params.n);
        let mut completion = crate::providers::dummy::reply_for(request);
        completion.choices.truncate(1);
        completion.choices[0].content = vec![ContentBlock::text_block(format!("answer {}", seen.len()))];
        completion.usage = ModelUsage::new(5, 2);
        completion
    }
}

fn text_of(content: &[ContentBlock]) -> String {
    content.iter().filter_map(ContentBlock::text).collect()
}

fn chunk_text(content: &[ChunkBlock]) -> String {
    content
        .iter()
        .filter_map(|block| match block {
            ChunkBlock::Text { text } => Some(text.as_str()),
            _ => None,
        })
        .collect()
}

#[async_trait]
impl ChatProvider for OneAtATime {
    async fn chat(&self, request: &ModelRequest, _ctx: CallContext<'_>) -> Result<ModelResponse, ProviderError> {
        Ok(self.answer(request))
    }
}

#[async_trait]
impl ChatStreamProvider for OneAtATime {
    async fn chat_stream(&self, request: &ModelRequest, _ctx: CallContext<'_>) -> Result<ModelStream, ProviderError> {
        let chunks = chunks_from_response(&self.answer(request), 1, true);
        Ok(ModelStream::new(
            futures::stream::iter(chunks.into_iter().map(Ok)).boxed(),
        ))
    }
}

fn router(handle: ProviderHandle) -> ModelRouter {
    let policy = RetryPolicy {
        max_retries: 0,
        initial_backoff: Duration::from_millis(1),
        max_backoff: Duration::from_millis(1),
        max_retry_after: Duration::ZERO,
    };
    ModelRouter::new(
        vec![RoutedModel {
            name: "m".into(),
            providers: vec![handle],
        }],
        policy,
    )
}

fn request(n: u32) -> ModelRequest {
    ModelRequest {
        model: "m".into(),
        messages: vec![Message::new(Role::User, vec![ContentBlock::text_block("hi")])],
        params: SamplingParams {
            n: Some(n),
            ..SamplingParams::default()
        },
        ..ModelRequest::default()
    }
}

fn streaming_handle(provider: &Arc<OneAtATime>) -> ProviderHandle {
    ProviderHandle {
        name: "one".into(),
        chat: Some(provider.clone()),
        chat_stream: Some(provider.clone()),
        embeddings: None,
        choices: ChoiceSupport::OnePerCall,
        native_batch: None,
        missing_env_key: None,
        provider_type: "",
    }
}

#[tokio::test]
async fn a_one_per_call_provider_is_called_n_times_without_n() {
    let provider = Arc::new(OneAtATime::default());
    let router = router(ProviderHandle::chat_only("one", provider.clone()));
    let none = HashMap::new();
    let answer = router
        .chat(&request(3), CallContext { credentials: &none })
        .await
        .unwrap();
    let indexes: Vec<u32> = answer.choices.iter().map(|c| c.index).collect();
    assert_eq!(indexes, vec![0, 1, 2]);
    let mut contents: Vec<String> = answer.choices.iter().map(|c| text_of(&c.content)).collect();
    contents.sort();
    assert_eq!(contents, vec!["answer 1", "answer 2", "answer 3"]);
    assert_eq!(answer.usage, ModelUsage::new(15, 6), "usage of every call");
    assert_eq!(*provider.seen_n.lock().unwrap(), vec![None; 3]);
}

#[tokio::test]
async fn a_native_provider_is_called_once_with_n() {
    let provider = Arc::new(OneAtATime::default());
    let handle = ProviderHandle::chat_only("one", provider.clone()).with_native_choices();
    let none = HashMap::new();
    router(handle)
        .chat(&request(3), CallContext { credentials: &none })
        .await
        .unwrap();
    assert_eq!(*provider.seen_n.lock().unwrap(), vec![Some(3)]);
}

#[tokio::test]
async fn one_per_call_streams_are_merged_with_each_choice_index_and_one_usage_chunk() {
    let provider = Arc::new(OneAtATime::default());
    let none = HashMap::new();
    let chunks: Vec<ModelChunk> = router(streaming_handle(&provider))
        .chat_stream(&request(2), CallContext { credentials: &none })
        .await
        .unwrap()
        .chunks
        .map(Result::unwrap)
        .collect()
        .await;
    let mut texts = [String::new(), String::new()];
    let mut finishes = 0;
    for chunk in &chunks {
        for choice in &chunk.choices {
            texts[choice.index as usize].push_str(&chunk_text(&choice.content));
            finishes += usize::from(choice.finish_reason.is_some());
        }
    }
    texts.sort();
    assert_eq!(texts, ["answer 1".to_owned(), "answer 2".to_owned()]);
    assert_eq!(finishes, 2);
    let usage: Vec<&ModelUsage> = chunks.iter().filter_map(|c| c.usage.as_ref()).collect();
    assert_eq!(usage, vec![&ModelUsage::new(10, 4)], "one summed usage chunk");
    assert!(chunks.last().unwrap().choices.is_empty());
    assert_eq!(provider.seen_n.lock().unwrap().len(), 2);
}

#[tokio::test]
async fn a_chat_only_provider_streams_n_choices_through_the_synthetic_stream() {
    let provider = Arc::new(OneAtATime::default());
    let none = HashMap::new();
    let chunks: Vec<ModelChunk> = router(ProviderHandle::chat_only("one", provider))
        .chat_stream(&request(3), CallContext { credentials: &none })
        .await
        .unwrap()
        .chunks
        .map(Result::unwrap)
        .collect()
        .await;
    let indexes: std::collections::BTreeSet<u32> = chunks
        .iter()
        .flat_map(|c| c.choices.iter().map(|choice| choice.index))
        .collect();
    assert_eq!(indexes.into_iter().collect::<Vec<_>>(), vec![0, 1, 2]);
    assert_eq!(chunks.last().unwrap().usage, Some(ModelUsage::new(15, 6)));
}

#[tokio::test]
async fn an_error_in_one_stream_ends_the_merged_stream() {
    let failing: ChunkStream = futures::stream::iter(vec![Err(ProviderError::Connection("cut".into()))]).boxed();
    let fine: ChunkStream = futures::stream::pending().boxed();
    let items: Vec<_> = merged_streams(vec![failing, fine]).collect().await;
    assert!(matches!(items.as_slice(), [Err(ProviderError::Connection(_))]));
}
