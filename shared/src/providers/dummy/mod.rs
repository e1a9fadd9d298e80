//! The deterministic `dummy` provider: answers derived from the input, no network, no keys.
//! It supports chat (`n` choices, JSON answers valid against a requested schema), streaming and
//! embeddings; latency and failure are configurable.

mod reply;
mod schema_instance;
mod vectors;

use super::{
    CallContext, ChatProvider, ChatStreamProvider, ChunkStream, EmbeddingProvider, Embeddings, ProviderError,
    ProviderHandle,
};
use crate::config::DummyProviderConfig;
use crate::model::{ModelRequest, ModelResponse};
use crate::openai::embeddings::{EmbeddingRequest, EmbeddingUsage};
use async_trait::async_trait;
use futures::StreamExt;
use serde_json::json;
use std::sync::Arc;
use std::time::Duration;

pub use reply::{count_tokens, reply_for};
pub use schema_instance::instance_for;
pub use vectors::embedding_for;

#[derive(Debug, Clone)]
pub struct DummyProvider {
    name: String,
    config: DummyProviderConfig,
}

impl DummyProvider {
    pub fn new(name: impl Into<String>, config: DummyProviderConfig) -> Self {
        Self {
            name: name.into(),
            config,
        }
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
        self.wait_and_maybe_fail().await?;
        Ok(reply_for(request))
    }
}

#[async_trait]
impl ChatStreamProvider for DummyProvider {
    async fn chat_stream(&self, request: &ModelRequest, _ctx: CallContext<'_>) -> Result<ChunkStream, ProviderError> {
        self.wait_and_maybe_fail().await?;
        let completion = reply_for(request);
        // One word per chunk, so clients see a real multi-chunk stream.
        let chunks = super::synthetic_stream::chunks_from_response(&completion, 1, true);
        Ok(futures::stream::iter(chunks.into_iter().map(Ok)).boxed())
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
