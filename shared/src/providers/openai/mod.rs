//! Any OpenAI-compatible server (OpenAI, vLLM, TGI, Ollama, Together…): chat, streaming chat and
//! embeddings over `/chat/completions` and `/embeddings`.

mod stream;

use super::api_key::ApiKeySource;
use super::extras::ConfiguredExtras;
use super::retry::retry_after_from_headers;
use super::{
    CallContext, ChatProvider, ChatStreamProvider, EmbeddingProvider, Embeddings, ModelStream, ProviderError,
    ProviderHandle,
};
use crate::config::OpenAiProviderConfig;
use crate::model::{ExtraHeaderEntry, ModelRequest, ModelResponse};
use crate::openai::chat::ChatCompletion;
use crate::openai::chat_body::model_to_chat_body;
use crate::openai::embeddings::{EmbeddingRequest, EmbeddingUsage};
use crate::openai::from_model::completion_to_model;
use async_trait::async_trait;
use serde::Deserialize;
use serde_json::{json, Value};
use std::sync::Arc;
use std::time::Duration;

#[derive(Debug, Clone)]
pub struct OpenAiProvider {
    name: String,
    config: OpenAiProviderConfig,
    client: reqwest::Client,
    api_key: ApiKeySource,
    extras: ConfiguredExtras,
}

/// The HTTP client of one provider (connection pooling, no Nagle delay).
pub fn http_client(connect_timeout: Duration) -> Result<reqwest::Client, String> {
    reqwest::Client::builder()
        .tcp_nodelay(true)
        .connect_timeout(connect_timeout)
        .pool_idle_timeout(Duration::from_secs(60))
        .user_agent(concat!("nimbus/", env!("CARGO_PKG_VERSION")))
        .build()
        .map_err(|e| e.to_string())
}

impl OpenAiProvider {
    pub fn new(name: impl Into<String>, config: OpenAiProviderConfig) -> Result<Self, String> {
        let client = http_client(Duration::from_millis(config.connect_timeout_ms))?;
        Ok(Self::with_client(name, config, client))
    }

    /// A provider sharing `client` (and its connection pool) with others; the client's connect
    /// timeout is used, not the config's.
    pub fn with_client(name: impl Into<String>, config: OpenAiProviderConfig, client: reqwest::Client) -> Self {
        let api_key = ApiKeySource::new(&config.api_key_location);
        let extras = ConfiguredExtras::from_config(&config.extra_body, &config.extra_headers);
        Self {
            name: name.into(),
            config,
            client,
            api_key,
            extras,
        }
    }

    /// Every capability; `n` is passed through, so the upstream answers all choices at once.
    pub fn handle(self) -> ProviderHandle {
        let name = self.name.clone();
        ProviderHandle::full(name, Arc::new(self)).with_native_choices()
    }

    fn url(&self, path: &str) -> String {
        format!("{}/{path}", self.config.api_base.trim_end_matches('/'))
    }

    /// A JSON POST of `body` with the API key, then the headers: the request's placed before the
    /// configured ones, the configured ones, the request's placed after (a header without a value
    /// removes it).
    fn post(
        &self,
        path: &str,
        body: String,
        ctx: CallContext<'_>,
        timeout: Option<Duration>,
        extra_headers: &[ExtraHeaderEntry],
    ) -> Result<reqwest::Request, ProviderError> {
        let mut builder = self
            .client
            .post(self.url(path))
            .header(http::header::CONTENT_TYPE, "application/json")
            .body(body);
        if let Some(timeout) = timeout {
            builder = builder.timeout(timeout);
        }
        if let Some(key) = self.api_key.key(&self.name, ctx)? {
            builder = builder.bearer_auth(key);
        }
        let mut request = builder.build().map_err(|e| self.transport_error(&e))?;
        self.extras
            .edit_headers(request.headers_mut(), extra_headers, &self.name)?;
        Ok(request)
    }

    fn timeout(&self) -> Duration {
        Duration::from_millis(self.config.timeout_ms)
    }

    async fn send(&self, request: reqwest::Request) -> Result<reqwest::Response, ProviderError> {
        let response = self
            .client
            .execute(request)
            .await
            .map_err(|e| self.transport_error(&e))?;
        if response.status().is_success() {
            return Ok(response);
        }
        Err(error_from_response(response).await)
    }

    fn transport_error(&self, err: &reqwest::Error) -> ProviderError {
        if err.is_timeout() {
            ProviderError::Timeout { after: self.timeout() }
        } else {
            ProviderError::Connection(error_chain(err))
        }
    }

    /// The OpenAI body for `request`: its modelled fields and OpenAI pass-through fields, the
    /// upstream model name, the stream fields, then the `extra_body` edits in precedence order.
    fn chat_body(&self, request: &ModelRequest, stream: bool) -> Result<Value, ProviderError> {
        let mut body = model_to_chat_body(request, &self.config.model_name);
        if stream {
            body.insert("stream".into(), Value::Bool(true));
            // Always ask for usage; the gateway drops the usage chunk if the client did not ask.
            body.insert("stream_options".into(), json!({"include_usage": true}));
        }
        let mut body = Value::Object(body);
        self.extras.edit_body(&mut body, &request.extra_body, &self.name)?;
        Ok(body)
    }

    /// The chat call to send, and its body as text (the `raw_request` of the answer).
    fn post_chat(
        &self,
        request: &ModelRequest,
        stream: bool,
        ctx: CallContext<'_>,
    ) -> Result<(reqwest::Request, String), ProviderError> {
        let timeout = (!stream).then(|| self.timeout());
        let body = self.chat_body(request, stream)?.to_string();
        let http = self.post("chat/completions", body.clone(), ctx, timeout, &request.extra_headers)?;
        Ok((http, body))
    }
}

fn error_chain(err: &dyn std::error::Error) -> String {
    let mut message = err.to_string();
    let mut source = err.source();
    while let Some(inner) = source {
        message.push_str(": ");
        message.push_str(&inner.to_string());
        source = inner.source();
    }
    message
}

/// The largest error body kept as JSON (larger ones keep only their message).
const MAX_KEPT_ERROR_BODY: usize = 64 * 1024;

/// Turn a non-2xx answer into [`ProviderError::Http`], keeping the provider's own message.
async fn error_from_response(response: reqwest::Response) -> ProviderError {
    let status = response.status().as_u16();
    let retry_after = retry_after_from_headers(response.headers());
    let text = response.text().await.unwrap_or_default();
    let body = (text.len() <= MAX_KEPT_ERROR_BODY)
        .then(|| serde_json::from_str::<Value>(&text).ok())
        .flatten();
    ProviderError::Http {
        status,
        body,
        message: upstream_error_message(&text).unwrap_or_else(|| {
            if text.trim().is_empty() {
                format!("HTTP {status} with an empty body")
            } else {
                text.chars().take(2000).collect()
            }
        }),
        retry_after,
    }
}

/// `error.message` (or a string `error`/`message`) from an OpenAI-style error body.
pub(crate) fn upstream_error_message(text: &str) -> Option<String> {
    let value: Value = serde_json::from_str(text).ok()?;
    let error = value.get("error").unwrap_or(&value);
    error
        .get("message")
        .and_then(Value::as_str)
        .or_else(|| error.as_str())
        .map(str::to_owned)
}

#[async_trait]
impl ChatProvider for OpenAiProvider {
    async fn chat(&self, request: &ModelRequest, ctx: CallContext<'_>) -> Result<ModelResponse, ProviderError> {
        let (http, raw_request) = self.post_chat(request, false, ctx)?;
        let response = self.send(http).await?;
        let bytes = response.bytes().await.map_err(|e| self.transport_error(&e))?;
        let completion: ChatCompletion = serde_json::from_slice(&bytes)
            .map_err(|e| ProviderError::InvalidResponse(format!("chat completion: {e}")))?;
        let raw = String::from_utf8_lossy(&bytes).into_owned();
        let mut answer = completion_to_model(completion, Some(raw));
        answer.raw_request = Some(raw_request);
        Ok(answer)
    }
}

#[async_trait]
impl ChatStreamProvider for OpenAiProvider {
    async fn chat_stream(&self, request: &ModelRequest, ctx: CallContext<'_>) -> Result<ModelStream, ProviderError> {
        let (http, raw_request) = self.post_chat(request, true, ctx)?;
        let timeout = self.timeout();
        let response = tokio::time::timeout(timeout, self.send(http))
            .await
            .map_err(|_| ProviderError::Timeout { after: timeout })??;
        Ok(ModelStream::new(stream::chunk_stream(response, timeout)).with_raw_request(Some(raw_request)))
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
        let http = self.post("embeddings", body.to_string(), ctx, Some(self.timeout()), &[])?;
        let response = self.send(http).await?;
        let bytes = response.bytes().await.map_err(|e| self.transport_error(&e))?;
        let mut parsed: UpstreamEmbeddings =
            serde_json::from_slice(&bytes).map_err(|e| ProviderError::InvalidResponse(format!("embeddings: {e}")))?;
        if parsed.data.len() != request.input.len() {
            return Err(ProviderError::InvalidResponse(format!(
                "expected {} embeddings, got {}",
                request.input.len(),
                parsed.data.len()
            )));
        }
        parsed.data.sort_by_key(|d| d.index);
        Ok(Embeddings {
            vectors: parsed.data.into_iter().map(|d| d.embedding).collect(),
            usage: parsed.usage,
        })
    }
}

#[cfg(test)]
mod tests;
