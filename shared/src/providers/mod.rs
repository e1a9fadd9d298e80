//! Model providers. Every provider receives the provider-neutral [`ModelRequest`] and answers a
//! [`ModelResponse`] or [`ModelChunk`]s, translating to and from its own wire format. Each capability is its own trait: a provider implements the ones it supports
//! (chat, streaming chat, embeddings) and registers them in a [`ProviderHandle`]; nothing has an
//! "unsupported" stub. The router tries a model's providers in order with retries and fallback,
//! and asks a provider without native `n` support once per choice.

mod api_key;
pub mod choices;
pub mod dummy;
mod extras;
pub(crate) mod http_upstream;
pub mod lmi;
pub mod native_batch;
pub mod openai;
pub mod retry;
pub mod router;
pub(crate) mod synthetic_stream;

pub use crate::ports::provider_call::{CallContext, ProviderError};

use crate::model::{ModelChunk, ModelRequest, ModelResponse};
use crate::openai::embeddings::{EmbeddingRequest, EmbeddingUsage};
use async_trait::async_trait;
use futures::stream::BoxStream;
use native_batch::NativeBatchApi;
use std::sync::Arc;

/// Chunks of a streamed answer; an `Err` item ends the stream.
pub(crate) type ChunkStream = BoxStream<'static, Result<ModelChunk, ProviderError>>;

/// A streamed answer that has started: who answers, what was sent, and the chunks.
pub struct ModelStream {
    /// The name of the provider that answers, as configured in the model's `routing` (set by the
    /// router; empty straight from a provider).
    pub provider_name: String,
    /// The answering provider's `type` (set by the router).
    pub provider_type: String,
    /// The request body the provider sent on the wire; see [`ModelResponse::raw_request`].
    pub raw_request: Option<String>,
    pub chunks: ChunkStream,
}

impl ModelStream {
    /// Chunks with nothing known about the request that produced them.
    pub fn new(chunks: ChunkStream) -> Self {
        Self {
            provider_name: String::new(),
            provider_type: String::new(),
            raw_request: None,
            chunks,
        }
    }

    pub(crate) fn with_raw_request(mut self, raw_request: Option<String>) -> Self {
        self.raw_request = raw_request;
        self
    }
}

impl std::fmt::Debug for ModelStream {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ModelStream")
            .field("provider_name", &self.provider_name)
            .field("raw_request", &self.raw_request)
            .finish_non_exhaustive()
    }
}

/// Non-streamed chat.
#[async_trait]
pub trait ChatProvider: Send + Sync {
    async fn chat(&self, request: &ModelRequest, ctx: CallContext<'_>) -> Result<ModelResponse, ProviderError>;
}

/// Streamed chat. Providers without it are streamed by splitting their complete answer.
#[async_trait]
pub trait ChatStreamProvider: Send + Sync {
    async fn chat_stream(&self, request: &ModelRequest, ctx: CallContext<'_>) -> Result<ModelStream, ProviderError>;
}

/// Vectors for each input, in input order.
#[derive(Debug, Clone, PartialEq)]
pub struct Embeddings {
    pub vectors: Vec<Vec<f32>>,
    pub usage: EmbeddingUsage,
}

/// Embeddings.
#[async_trait]
pub trait EmbeddingProvider: Send + Sync {
    async fn embed(&self, request: &EmbeddingRequest, ctx: CallContext<'_>) -> Result<Embeddings, ProviderError>;
}

/// How a provider answers a request for `n` choices.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ChoiceSupport {
    /// It honours `n` itself: one call answers every choice (OpenAI-compatible servers, the dummy).
    Native,
    /// It answers one choice per call: the router calls it `n` times and joins the answers.
    OnePerCall,
}

impl ChoiceSupport {
    /// Whether `n` choices take `n` calls of a provider with this support.
    pub(crate) fn needs_one_call_per_choice(self, n: u32) -> bool {
        n > 1 && self == Self::OnePerCall
    }
}

/// One configured provider of one model and the capabilities it has.
#[derive(Clone)]
pub struct ProviderHandle {
    pub name: String,
    pub chat: Option<Arc<dyn ChatProvider>>,
    pub chat_stream: Option<Arc<dyn ChatStreamProvider>>,
    pub embeddings: Option<Arc<dyn EmbeddingProvider>>,
    pub choices: ChoiceSupport,
    /// The upstream's own batch API, when batch jobs of this provider run there
    /// (`batch = "native"`).
    pub native_batch: Option<Arc<dyn NativeBatchApi>>,
    /// The environment variable holding this provider's key, when it is not set: every call fails
    /// until it is, so `/v1/models` leaves out a model none of whose providers can be called.
    pub missing_env_key: Option<String>,
    /// The provider's configured `type` (`openai`, `dummy`…); empty for handles built by hand.
    pub provider_type: &'static str,
}

impl std::fmt::Debug for ProviderHandle {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ProviderHandle")
            .field("name", &self.name)
            .field("chat", &self.chat.is_some())
            .field("chat_stream", &self.chat_stream.is_some())
            .field("embeddings", &self.embeddings.is_some())
            .field("choices", &self.choices)
            .field("native_batch", &self.native_batch.is_some())
            .field("missing_env_key", &self.missing_env_key)
            .field("provider_type", &self.provider_type)
            .finish()
    }
}

impl ProviderHandle {
    /// A handle offering every capability of a provider that has them all.
    pub fn full<P>(name: impl Into<String>, provider: Arc<P>) -> Self
    where
        P: ChatProvider + ChatStreamProvider + EmbeddingProvider + 'static,
    {
        Self {
            name: name.into(),
            chat: Some(provider.clone()),
            chat_stream: Some(provider.clone()),
            embeddings: Some(provider),
            choices: ChoiceSupport::OnePerCall,
            native_batch: None,
            missing_env_key: None,
            provider_type: "",
        }
    }

    /// A handle offering only non-streamed chat, one choice per call.
    pub fn chat_only(name: impl Into<String>, provider: Arc<dyn ChatProvider>) -> Self {
        Self {
            name: name.into(),
            chat: Some(provider),
            chat_stream: None,
            embeddings: None,
            choices: ChoiceSupport::OnePerCall,
            native_batch: None,
            missing_env_key: None,
            provider_type: "",
        }
    }

    /// The provider answers `n` choices in one call.
    pub(crate) fn with_native_choices(mut self) -> Self {
        self.choices = ChoiceSupport::Native;
        self
    }
}
