//! The LMI provider: one protocol over either transport (`type = "lmi"` over HTTP,
//! `type = "sagemaker"` through the SageMaker connector).

use super::chat_template::{ChatTemplate, ChatTemplateError};
use super::http_transport::HttpLmiTransport;
use super::request::{chat_body, embedding_body};
use super::response::{chat_answer, embedding_vectors};
use super::stream::chunk_stream;
use crate::config::{ExtraBodyEntry, LmiProviderConfig, LmiSchema, SageMakerProviderConfig};
use crate::model::{ExtraHeaderEntry, ModelRequest, ModelResponse};
use crate::openai::embeddings::{EmbeddingInput, EmbeddingRequest, EmbeddingUsage};
use crate::ports::lmi_transport::{LmiByteStream, LmiTransport};
use crate::ports::ProviderSecrets;
use crate::providers::extras::ConfiguredExtras;
use crate::providers::http_upstream::HttpClientError;
use crate::providers::{
    CallContext, ChatProvider, ChatStreamProvider, ChoiceSupport, EmbeddingProvider, Embeddings, ModelStream,
    ProviderError, ProviderHandle,
};
use async_trait::async_trait;
use bytes::Bytes;
use serde_json::Value;
use std::sync::Arc;
use std::time::Duration;

/// Why an LMI provider could not be built.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub(crate) enum LmiBuildError {
    #[error(transparent)]
    Template(#[from] ChatTemplateError),
    #[error(transparent)]
    HttpClient(#[from] HttpClientError),
}

/// What the provider adds to every body, from its configuration.
#[derive(Debug, Clone, Default)]
pub(crate) struct BodySettings {
    /// Configured `extra_body` edits.
    pub extras: ConfiguredExtras,
    /// The token cap sent when the request names none.
    pub default_max_new_tokens: Option<u64>,
}

impl BodySettings {
    /// A provider's configured `extra_body` and `default_max_new_tokens`.
    fn configured(extra_body: &[ExtraBodyEntry], default_max_new_tokens: Option<u64>) -> Self {
        Self {
            extras: ConfiguredExtras::from_config(extra_body, &[]),
            default_max_new_tokens,
        }
    }
}

#[derive(Debug)]
pub(crate) struct LmiProvider {
    name: String,
    schema: LmiSchema,
    /// Compiled at start-up for the prompt schemas.
    template: Option<ChatTemplate>,
    timeout: Duration,
    settings: BodySettings,
    transport: Arc<dyn LmiTransport>,
}

impl LmiProvider {
    /// A `type = "lmi"` provider; `secrets` reads an `ssm::` key.
    pub(crate) fn over_http(
        name: impl Into<String>,
        config: &LmiProviderConfig,
        secrets: Arc<dyn ProviderSecrets>,
    ) -> Result<Self, LmiBuildError> {
        let name = name.into();
        let transport = HttpLmiTransport::new(name.clone(), config, secrets)?;
        Self::with_transport(
            name,
            config.schema,
            config.chat_template.as_deref(),
            Duration::from_millis(config.timeout_ms),
            BodySettings::configured(&config.extra_body, config.default_max_new_tokens),
            Arc::new(transport),
        )
    }

    /// A `type = "sagemaker"` provider over the transport the connector opened.
    pub(crate) fn over_sagemaker(
        name: impl Into<String>,
        config: &SageMakerProviderConfig,
        transport: Arc<dyn LmiTransport>,
    ) -> Result<Self, LmiBuildError> {
        Self::with_transport(
            name.into(),
            config.schema,
            config.chat_template.as_deref(),
            Duration::from_millis(config.timeout_ms),
            BodySettings::configured(&config.extra_body, config.default_max_new_tokens),
            transport,
        )
    }

    /// A provider of `schema` over any transport.
    pub(crate) fn with_transport(
        name: impl Into<String>,
        schema: LmiSchema,
        chat_template: Option<&str>,
        timeout: Duration,
        settings: BodySettings,
        transport: Arc<dyn LmiTransport>,
    ) -> Result<Self, LmiBuildError> {
        let template = if schema.uses_chat_template() {
            Some(ChatTemplate::compile(chat_template)?)
        } else {
            None
        };
        Ok(Self {
            name: name.into(),
            schema,
            template,
            timeout,
            settings,
            transport,
        })
    }

    /// Embedding models embed; the others chat (streamed or not), one choice per call.
    pub fn handle(self) -> ProviderHandle {
        let name = self.name.clone();
        let embeds = self.schema == LmiSchema::Embedding;
        let missing_env_key = self.transport.missing_env_key().map(str::to_owned);
        let provider = Arc::new(self);
        ProviderHandle {
            name,
            chat: (!embeds).then(|| provider.clone() as Arc<dyn ChatProvider>),
            chat_stream: (!embeds).then(|| provider.clone() as Arc<dyn ChatStreamProvider>),
            embeddings: embeds.then_some(provider as Arc<dyn EmbeddingProvider>),
            choices: ChoiceSupport::OnePerCall,
            native_batch: None,
            missing_env_key,
            provider_type: "",
        }
    }

    /// The body to send for `request`, after the `extra_body` edits, as text.
    fn chat_request_body(&self, request: &ModelRequest, stream: bool) -> Result<String, ProviderError> {
        let mut body = chat_body(
            self.schema,
            self.template.as_ref(),
            request,
            stream,
            self.settings.default_max_new_tokens,
        )?;
        self.settings
            .extras
            .edit_body(&mut body, &request.extra_body, &self.name)?;
        Ok(body.to_string())
    }

    /// The stream's start, within the timeout.
    async fn invoke_stream(
        &self,
        body: String,
        headers: &[ExtraHeaderEntry],
        ctx: CallContext<'_>,
    ) -> Result<LmiByteStream, ProviderError> {
        let start = self.transport.invoke_stream(Bytes::from(body), headers, ctx);
        tokio::time::timeout(self.timeout, start)
            .await
            .map_err(|_| ProviderError::Timeout { after: self.timeout })?
    }
}

#[async_trait]
impl ChatProvider for LmiProvider {
    async fn chat(&self, request: &ModelRequest, ctx: CallContext<'_>) -> Result<ModelResponse, ProviderError> {
        let body = self.chat_request_body(request, false)?;
        let answer = self
            .transport
            .invoke(Bytes::from(body.clone()), &request.extra_headers, ctx)
            .await?;
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
        self.settings.extras.edit_body(&mut body, &[], &self.name)?;
        let expected = match &request.input {
            EmbeddingInput::Texts(texts) => texts.len(),
            _ => 1,
        };
        let answer = self
            .transport
            .invoke(Bytes::from(Value::to_string(&body)), &[], ctx)
            .await?;
        Ok(Embeddings {
            vectors: embedding_vectors(&answer, expected)?,
            // LMI embedding containers report no token counts.
            usage: EmbeddingUsage::default(),
        })
    }
}
