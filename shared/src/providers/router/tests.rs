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
