//! The deterministic `dummy` provider: answers derived from the input, no network, no keys.
//! It supports chat (`n` choices, JSON answers valid against a requested schema), streaming and
//! embeddings; latency and failure are configurable. Its answers carry as `raw_request` the
//! OpenAI-style chat body the call stands for, with `extra_body` applied as a real provider would
//! (the edits do not change the answer); `extra_headers` are checked, then dropped.

mod reply;
mod schema_instance;
mod vectors;

use super::extras::ConfiguredExtras;
use super::{
    CallContext, ChatProvider, ChatStreamProvider, EmbeddingProvider, Embeddings, ModelStream, ProviderError,
    ProviderHandle,
};
use crate::config::DummyProviderConfig;
use crate::model::{ModelRequest, ModelResponse};
use crate::openai::chat_body::model_to_chat_body;
use crate::openai::embeddings::{EmbeddingRequest, EmbeddingUsage};
use async_trait::async_trait;
use futures::StreamExt;
use serde_json::{json, Value};
use std::sync::Arc;
use std::time::Duration;

pub(crate) use reply::{count_tokens, reply_for};
pub(crate) use vectors::embedding_for;

#[derive(Debug, Clone)]
pub(crate) struct DummyProvider {
    name: String,
    config: DummyProviderConfig,
    extras: ConfiguredExtras,
}

impl DummyProvider {
    pub fn new(name: impl Into<String>, config: DummyProviderConfig) -> Self {
        let extras = ConfiguredExtras::from_config(&config.extra_body, &config.extra_headers);
        Self {
            name: name.into(),
            config,
            extras,
        }
    }

    /// The OpenAI-style body an OpenAI-compatible provider would send for `request` (naming the
    /// gateway model), with every `extra_body` edit that applies to this provider. Headers are
    /// applied to nothing, so that an edit a real provider would refuse is refused here too.
    fn raw_request(&self, request: &ModelRequest, stream: bool) -> Result<String, ProviderError> {
        self.extras
            .edit_headers(&mut http::HeaderMap::new(), &request.extra_headers, &self.name)?;
        let mut body = model_to_chat_body(request, &request.model);
        if stream {
            body.insert("stream".into(), Value::Bool(true));
        }
        let mut body = Value::Object(body);
        self.extras.edit_body(&mut body, &request.extra_body, &self.name)?;
        Ok(body.to_string())
    }

    /// Register every capability; it answers `n` choices itself.
    pub fn handle(self) -> ProviderHandle {
        let name = self.name.clone();
        ProviderHandle::full(name, Arc::new(self)).with_native_choices()
    }

    async fn wait_and_maybe_fail(&self) -> Result<(), ProviderError> {
        if self.config.latency_ms > 0 {
            tokio::time::sleep(Duration::from_millis(self.config.latency_ms)).await;
        }
        match self.config.fail_with_status {
            Some(status) => {
                let message = format!("dummy provider `{}` failed as configured (HTTP {status})", self.name);
                // The body an OpenAI-compatible server sends with an error status.
                let kind = if status >= 500 {
                    "server_error"
                } else {
                    "invalid_request_error"
                };
                let body = json!({"error": {"message": message, "type": kind, "param": null, "code": null}});
                Err(ProviderError::Http {
                    status,
                    message,
                    retry_after: None,
                    body: Some(body),
                })
            }
            None => Ok(()),
        }
    }
}

#[async_trait]
impl ChatProvider for DummyProvider {
    async fn chat(&self, request: &ModelRequest, _ctx: CallContext<'_>) -> Result<ModelResponse, ProviderError> {
        let raw_request = self.raw_request(request, false)?;
        self.wait_and_maybe_fail().await?;
        let mut answer = reply_for(request);
        answer.raw_request = Some(raw_request);
        Ok(answer)
    }
}

#[async_trait]
impl ChatStreamProvider for DummyProvider {
    async fn chat_stream(&self, request: &ModelRequest, _ctx: CallContext<'_>) -> Result<ModelStream, ProviderError> {
        let raw_request = self.raw_request(request, true)?;
        self.wait_and_maybe_fail().await?;
        let completion = reply_for(request);
        // One word per chunk, so clients see a real multi-chunk stream.
        let chunks = super::synthetic_stream::chunks_from_response(&completion, 1, true);
        let chunks = futures::stream::iter(chunks.into_iter().map(Ok)).boxed();
        Ok(ModelStream::new(chunks).with_raw_request(Some(raw_request)))
    }
}

#[async_trait]
impl EmbeddingProvider for DummyProvider {
    async fn embed(&self, request: &EmbeddingRequest, _ctx: CallContext<'_>) -> Result<Embeddings, ProviderError> {
        self.wait_and_maybe_fail().await?;
        let dimensions = request
            .dimensions
            .map(|d| usize::try_from(d).unwrap_or(usize::MAX))
            .unwrap_or(self.config.embedding_dimensions);
        let texts = request.input.as_texts();
        let tokens: u64 = texts.iter().map(|t| count_tokens(t)).sum();
        Ok(Embeddings {
            vectors: texts.iter().map(|t| embedding_for(t, dimensions)).collect(),
            usage: EmbeddingUsage {
                prompt_tokens: tokens,
                total_tokens: tokens,
            },
        })
    }
}
