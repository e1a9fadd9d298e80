//! The LMI provider: one protocol over either transport (`type = "lmi"` over HTTP,
//! `type = "sagemaker"` through the SageMaker connector).

use super::chat_template::ChatTemplate;
use super::http_transport::HttpLmiTransport;
use super::request::{chat_body, embedding_body};
use super::response::{chat_answer, embedding_vectors};
use super::stream::chunk_stream;
use super::transport::{ByteStream, LmiTransport};
use crate::config::{LmiProviderConfig, LmiSchema, SageMakerProviderConfig};
use crate::model::{entries_for, ExtraHeaderEntry, ExtraPlacement, ModelRequest, ModelResponse};
use crate::openai::embeddings::{EmbeddingInput, EmbeddingRequest, EmbeddingUsage};
use crate::providers::extras::ConfiguredExtras;
use crate::providers::{
    CallContext, ChatProvider, ChatStreamProvider, ChoiceSupport, EmbeddingProvider, Embeddings, ModelStream,
    ProviderError, ProviderHandle,
};
use async_trait::async_trait;
use bytes::Bytes;
use serde_json::Value;
use std::sync::Arc;
use std::time::Duration;

/// How bodies reach the container.
#[derive(Debug, Clone)]
enum Carrier {
    /// Plain HTTP, which also sends the request's extra headers.
    Http(Arc<HttpLmiTransport>),
    /// Any other transport (SageMaker's), which sends no free-form headers.
    Port(Arc<dyn LmiTransport>),
}

#[derive(Debug)]
pub struct LmiProvider {
    name: String,
    schema: LmiSchema,
    /// Compiled at start-up for the prompt schemas.
    template: Option<ChatTemplate>,
    timeout: Duration,
    extras: ConfiguredExtras,
    carrier: Carrier,
}

impl LmiProvider {
    /// A `type = "lmi"` provider.
    pub fn over_http(name: impl Into<String>, config: &LmiProviderConfig) -> Result<Self, String> {
        let name = name.into();
        let transport = HttpLmiTransport::new(name.clone(), config)?;
        Self::build(
            name,
            config.schema,
            config.chat_template.as_deref(),
            Duration::from_millis(config.timeout_ms),
            ConfiguredExtras::from_config(&config.extra_body, &[]),
            Carrier::Http(Arc::new(transport)),
        )
    }

    /// A `type = "sagemaker"` provider over the transport the connector opened.
    pub fn over_sagemaker(
        name: impl Into<String>,
        config: &SageMakerProviderConfig,
        transport: Arc<dyn LmiTransport>,
    ) -> Result<Self, String> {
        Self::build(
            name.into(),
            config.schema,
            config.chat_template.as_deref(),
            Duration::from_millis(config.timeout_ms),
            ConfiguredExtras::from_config(&config.extra_body, &[]),
            Carrier::Port(transport),
        )
    }

    /// A provider of `schema` over any transport (the configured `extra_body` edits in `extras`).
    #[cfg(test)]
    pub(crate) fn with_transport(
        name: impl Into<String>,
        schema: LmiSchema,
        chat_template: Option<&str>,
        timeout: Duration,
        extras: ConfiguredExtras,
        transport: Arc<dyn LmiTransport>,
    ) -> Result<Self, String> {
        Self::build(
            name.into(),
            schema,
            chat_template,
            timeout,
            extras,
            Carrier::Port(transport),
        )
    }

    fn build(
        name: String,
        schema: LmiSchema,
        chat_template: Option<&str>,
        timeout: Duration,
        extras: ConfiguredExtras,
        carrier: Carrier,
    ) -> Result<Self, String> {
        let template = if schema.uses_chat_template() {
            Some(ChatTemplate::compile(chat_template)?)
        } else {
            None
        };
        Ok(Self {
            name,
            schema,
            template,
            timeout,
            extras,
            carrier,
        })
    }

    /// Embedding models embed; the others chat (streamed or not), one choice per call.
    pub fn handle(self) -> ProviderHandle {
        let name = self.name.clone();
        let embeds = self.schema == LmiSchema::Embedding;
        let provider = Arc::new(self);
        ProviderHandle {
            name,
            chat: (!embeds).then(|| provider.clone() as Arc<dyn ChatProvider>),
            chat_stream: (!embeds).then(|| provider.clone() as Arc<dyn ChatStreamProvider>),
            embeddings: embeds.then_some(provider as Arc<dyn EmbeddingProvider>),
            choices: ChoiceSupport::OnePerCall,
        }
    }

    /// The body to send for `request`, after the `extra_body` edits, as text.
    fn chat_request_body(&self, request: &ModelRequest, stream: bool) -> Result<String, ProviderError> {
        let mut body = chat_body(self.schema, self.template.as_ref(), request, stream)?;
        self.extras.edit_body(&mut body, &request.extra_body, &self.name)?;
        Ok(body.to_string())
    }

    /// The request's headers for this provider; a transport without free-form headers refuses them.
    fn request_headers<'a>(&self, headers: &'a [ExtraHeaderEntry]) -> Result<&'a [ExtraHeaderEntry], ProviderError> {
        if let Carrier::Port(_) = self.carrier {
            let placements = [
                ExtraPlacement::BeforeProviderConfig,
                ExtraPlacement::AfterProviderConfig,
            ];
            if placements
                .into_iter()
                .any(|placement| entries_for(headers, &self.name, placement).next().is_some())
            {
                return Err(ProviderError::UnsupportedParameter {
                    param: "extra_headers".to_owned(),
                    message: "this provider's transport sends no extra headers".to_owned(),
                });
            }
        }
        Ok(headers)
    }

    async fn invoke(
        &self,
        body: String,
        headers: &[ExtraHeaderEntry],
        ctx: CallContext<'_>,
    ) -> Result<Bytes, ProviderError> {
        let headers = self.request_headers(headers)?;
        match &self.carrier {
            Carrier::Http(http) => http.invoke_with_headers(Bytes::from(body), headers, ctx).await,
            Carrier::Port(port) => port.invoke(Bytes::from(body), ctx).await,
        }
    }

    async fn invoke_stream(
        &self,
        body: String,
        headers: &[ExtraHeaderEntry],
        ctx: CallContext<'_>,
    ) -> Result<ByteStream, ProviderError> {
        let headers = self.request_headers(headers)?;
        let start = async {
            match &self.carrier {
                Carrier::Http(http) => http.invoke_stream_with_headers(Bytes::from(body), headers, ctx).await,
                Carrier::Port(port) => port.invoke_stream(Bytes::from(body), ctx).await,
            }
        };
        tokio::time::timeout(self.timeout, start)
            .await
            .map_err(|_| ProviderError::Timeout { after: self.timeout })?
    }
}

#[async_trait]
impl ChatProvider for LmiProvider {
    async fn chat(&self, request: &ModelRequest, ctx: CallContext<'_>) -> Result<ModelResponse, ProviderError> {
        let body = self.chat_request_body(request, false)?;
        let answer = self.invoke(body.clone(), &request.extra_headers, ctx).await?;
        let mut response = chat_answer(self.schema, &answer)?;
        response.raw_request = Some(body);
        Ok(response)
    }
}

#[async_trait]
impl ChatStreamProvider for LmiProvider {
    async fn chat_stream(&self, request: &ModelRequest, ctx: CallContext<'_>) -> Result<ModelStream, ProviderError> {
        let body = self.chat_request_body(request, true)?;
        let bytes = self.invoke_stream(body.clone(), &request.extra_headers, ctx).await?;
        let chunks = chunk_stream(bytes, self.schema, self.timeout);
        Ok(ModelStream::new(chunks).with_raw_request(Some(body)))
    }
}

#[async_trait]
impl EmbeddingProvider for LmiProvider {
    async fn embed(&self, request: &EmbeddingRequest, ctx: CallContext<'_>) -> Result<Embeddings, ProviderError> {
        if request.dimensions.is_some() {
            return Err(ProviderError::UnsupportedParameter {
                param: "dimensions".to_owned(),
                message: "an LMI embedding model answers vectors of its own size".to_owned(),
            });
        }
        if request.user.is_some() {
            return Err(ProviderError::UnsupportedParameter {
                param: "user".to_owned(),
                message: "LMI containers take no end-user identifier".to_owned(),
            });
        }
        let mut body = embedding_body(&request.input)?;
        self.extras.edit_body(&mut body, &[], &self.name)?;
        let expected = match &request.input {
            EmbeddingInput::Texts(texts) => texts.len(),
            _ => 1,
        };
        let answer = self.invoke(Value::to_string(&body), &[], ctx).await?;
        Ok(Embeddings {
            vectors: embedding_vectors(&answer, expected)?,
            // LMI embedding containers report no token counts.
            usage: EmbeddingUsage::default(),
        })
    }
}
