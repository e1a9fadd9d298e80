//! Any OpenAI-compatible server (OpenAI, vLLM, TGI, Ollama, Together…): chat, streaming chat and
//! embeddings over `/chat/completions` and `/embeddings`; with `batch = "native"`, batch jobs
//! over its `/files` and `/batches` (see [`batch_api`]).

mod batch_api;
#[cfg(test)]
pub(crate) use batch_api::FILE_TRANSFER_TIMEOUT;
mod stream;

use super::api_key::ApiKeySource;
use super::extras::ConfiguredExtras;
use super::http_upstream::{http_client, HttpClientError, HttpUpstream};
use super::{
    CallContext, ChatProvider, ChatStreamProvider, EmbeddingProvider, Embeddings, ModelStream, ProviderError,
    ProviderHandle,
};
use crate::config::{BatchMode, OpenAiProviderConfig};
use crate::model::{ModelRequest, ModelResponse};
use crate::openai::chat::ChatCompletion;
use crate::openai::chat_body::{model_to_chat_body, offer_allowed_tools, reasoning_params_to_wire};
use crate::openai::embeddings::{EmbeddingRequest, EmbeddingUsage};
use crate::openai::from_model::completion_to_model;
use crate::ports::ProviderSecrets;
use async_trait::async_trait;
use serde::Deserialize;
use serde_json::{json, Value};
use std::sync::Arc;
use std::time::Duration;

#[derive(Debug, Clone)]
pub(crate) struct OpenAiProvider {
    config: OpenAiProviderConfig,
    upstream: HttpUpstream,
}

impl OpenAiProvider {
    /// `secrets` reads an `ssm::` key.
    pub fn new(
        name: impl Into<String>,
        config: OpenAiProviderConfig,
        secrets: Arc<dyn ProviderSecrets>,
    ) -> Result<Self, HttpClientError> {
        let client = http_client(Duration::from_millis(config.connect_timeout_ms))?;
        Ok(Self::with_client(name, config, client, secrets))
    }

    /// A provider sharing `client` (and its connection pool) with others; the client's connect
    /// timeout is used, not the config's.
    pub(crate) fn with_client(
        name: impl Into<String>,
        config: OpenAiProviderConfig,
        client: reqwest::Client,
        secrets: Arc<dyn ProviderSecrets>,
    ) -> Self {
        let upstream = HttpUpstream {
            provider: name.into(),
            client,
            api_key: ApiKeySource::new(&config.api_key_location, secrets),
            extras: ConfiguredExtras::from_config(&config.extra_body, &config.extra_headers),
            timeout: Duration::from_millis(config.timeout_ms),
        };
        Self { config, upstream }
    }

    /// Every capability; `n` is passed through, so the upstream answers all choices at once.
    /// With `batch = "native"` batch jobs run on the upstream's Batch API.
    pub fn handle(self) -> ProviderHandle {
        let name = self.upstream.provider.clone();
        let native_batch = self.config.batch == BatchMode::Native;
        let missing_env_key = self.upstream.api_key.missing_env_var().map(str::to_owned);
        let provider = Arc::new(self);
        let mut handle = ProviderHandle::full(name, Arc::clone(&provider)).with_native_choices();
        handle.missing_env_key = missing_env_key;
        if native_batch {
            handle.native_batch = Some(provider);
        }
        handle
    }

    fn url(&self, path: &str) -> String {
        format!("{}/{path}", self.config.api_base.trim_end_matches('/'))
    }

    /// The OpenAI body for `request`: its modelled fields and OpenAI pass-through fields, the
    /// upstream model name, the stream fields, then the `extra_body` edits in precedence order.
    fn upstream_chat_body(&self, request: &ModelRequest, stream: bool) -> Result<Value, ProviderError> {
        let mut body = model_to_chat_body(request, &self.config.model_name);
        offer_allowed_tools(request, &mut body);
        reasoning_params_to_wire(request, &mut body);
        if let Some(field) = self.config.max_tokens_field {
            let cap = body
                .remove("max_tokens")
                .or_else(|| body.remove("max_completion_tokens"));
            if let Some(cap) = cap {
                body.insert(field.key().to_owned(), cap);
            }
        }
        if stream {
            body.insert("stream".into(), Value::Bool(true));
            // Always ask for usage; the gateway drops the usage chunk if the client did not ask.
            body.insert("stream_options".into(), json!({"include_usage": true}));
        }
        let mut body = Value::Object(body);
        self.upstream
            .extras
            .edit_body(&mut body, &request.extra_body, &self.upstream.provider)?;
        Ok(body)
    }

    /// The chat call to send, and its body as text (the `raw_request` of the answer).
    async fn post_chat(
        &self,
        request: &ModelRequest,
        stream: bool,
        ctx: CallContext<'_>,
    ) -> Result<(reqwest::Request, String), ProviderError> {
        let body = self.upstream_chat_body(request, stream)?.to_string();
        let url = self.url("chat/completions");
        let http = self
            .upstream
            .post_json(&url, body.clone(), !stream, &request.extra_headers, ctx)
            .await?;
        Ok((http, body))
    }
}

#[async_trait]
impl ChatProvider for OpenAiProvider {
    async fn chat(&self, request: &ModelRequest, ctx: CallContext<'_>) -> Result<ModelResponse, ProviderError> {
        let (http, raw_request) = self.post_chat(request, false, ctx).await?;
        let response = self.upstream.send(http).await?;
        let bytes = response.bytes().await.map_err(|e| self.upstream.transport_error(&e))?;
        let mut answer = read_chat_answer(&bytes)?;
        answer.raw_request = Some(raw_request);
        Ok(answer)
    }
}

#[async_trait]
impl ChatStreamProvider for OpenAiProvider {
    async fn chat_stream(&self, request: &ModelRequest, ctx: CallContext<'_>) -> Result<ModelStream, ProviderError> {
        let (http, raw_request) = self.post_chat(request, true, ctx).await?;
        let timeout = self.upstream.timeout;
        let response = tokio::time::timeout(timeout, self.upstream.send(http))
            .await
            .map_err(|_| ProviderError::Timeout { after: timeout })??;
        let keep_raw = request.stream.is_some_and(|s| s.raw_chunks);
        Ok(ModelStream::new(stream::chunk_stream(response, timeout, keep_raw)).with_raw_request(Some(raw_request)))
    }
}

#[derive(Deserialize)]
struct UpstreamEmbeddings {
    data: Vec<UpstreamEmbedding>,
    #[serde(default)]
    usage: EmbeddingUsage,
}

#[derive(Deserialize)]
struct UpstreamEmbedding {
    #[serde(default)]
    index: usize,
    embedding: Vec<f32>,
}

#[async_trait]
impl EmbeddingProvider for OpenAiProvider {
    async fn embed(&self, request: &EmbeddingRequest, ctx: CallContext<'_>) -> Result<Embeddings, ProviderError> {
        let body = self.upstream_embeddings_body(request);
        let http = self
            .upstream
            .post_json(&self.url("embeddings"), body.to_string(), true, &[], ctx)
            .await?;
        let response = self.upstream.send(http).await?;
        let bytes = response.bytes().await.map_err(|e| self.upstream.transport_error(&e))?;
        let embeddings = read_embeddings(&bytes)?;
        if embeddings.vectors.len() != request.input.len() {
            return Err(ProviderError::InvalidResponse(format!(
                "expected {} embeddings, got {}",
                request.input.len(),
                embeddings.vectors.len()
            )));
        }
        Ok(embeddings)
    }
}

impl OpenAiProvider {
    /// The OpenAI embeddings body for `request`, with the upstream model name.
    fn upstream_embeddings_body(&self, request: &EmbeddingRequest) -> Value {
        let mut body = json!({
            "model": self.config.model_name,
            "input": request.input,
            "encoding_format": "float",
        });
        if let Some(dimensions) = request.dimensions {
            body["dimensions"] = json!(dimensions);
        }
        if let Some(user) = &request.user {
            body["user"] = json!(user);
        }
        body
    }
}

/// An upstream chat completion body as the answer; `raw_response` is the body as text.
fn read_chat_answer(bytes: &[u8]) -> Result<ModelResponse, ProviderError> {
    let completion: ChatCompletion =
        serde_json::from_slice(bytes).map_err(|e| ProviderError::InvalidResponse(format!("chat completion: {e}")))?;
    let raw = String::from_utf8_lossy(bytes).into_owned();
    Ok(completion_to_model(completion, Some(raw)))
}

/// An upstream embeddings body as vectors in input order.
fn read_embeddings(bytes: &[u8]) -> Result<Embeddings, ProviderError> {
    let mut parsed: UpstreamEmbeddings =
        serde_json::from_slice(bytes).map_err(|e| ProviderError::InvalidResponse(format!("embeddings: {e}")))?;
    parsed.data.sort_by_key(|d| d.index);
    Ok(Embeddings {
        vectors: parsed.data.into_iter().map(|d| d.embedding).collect(),
        usage: parsed.usage,
    })
}

#[cfg(test)]
mod tests;
