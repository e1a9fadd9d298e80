//! The inference business layer: validates requests, routes them to providers, and mints the id,
//! timestamp and model name of every answer.

mod validation;

use crate::openai::chat::{ChatCompletion, ChatCompletionChunk};
use crate::openai::embeddings::{EmbeddingData, EmbeddingRequest, EmbeddingResponse, EmbeddingVector, EncodingFormat};
use crate::openai::models::{ModelList, ModelObject};
use crate::ports::{Clock, IdSource};
use crate::providers::router::{ModelRouter, RoutingError};
use crate::providers::{CallContext, ChatRequest, ProviderError};
use futures::stream::BoxStream;
use futures::StreamExt;
use std::collections::HashMap;
use std::sync::Arc;

pub use validation::{validate_chat, validate_embeddings};

/// Why an inference request produced no answer.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum InferenceError {
    #[error("{message}")]
    InvalidRequest {
        message: String,
        param: Option<String>,
        /// OpenAI's code for the problem, e.g. `integer_above_max_value`.
        code: Option<&'static str>,
    },
    #[error("routing failed: {0:?}")]
    Routing(RoutingError),
}

impl InferenceError {
    pub fn invalid(message: impl Into<String>, param: impl Into<String>, code: &'static str) -> Self {
        Self::InvalidRequest {
            message: message.into(),
            param: Some(param.into()),
            code: Some(code),
        }
    }
}

impl From<RoutingError> for InferenceError {
    fn from(err: RoutingError) -> Self {
        Self::Routing(err)
    }
}

/// Streamed chunks as the client receives them; an `Err` item ends the stream.
pub type ClientChunkStream = BoxStream<'static, Result<ChatCompletionChunk, ProviderError>>;

pub struct InferenceService {
    router: ModelRouter,
    clock: Arc<dyn Clock>,
    ids: Arc<dyn IdSource>,
    /// Reported as every model's `created`: when this gateway loaded its configuration.
    models_created: i64,
}

impl InferenceService {
    pub fn new(router: ModelRouter, clock: Arc<dyn Clock>, ids: Arc<dyn IdSource>) -> Self {
        let models_created = clock.now_unix_s();
        Self {
            router,
            clock,
            ids,
            models_created,
        }
    }

    fn model_object(&self, id: &str) -> ModelObject {
        ModelObject {
            id: id.to_owned(),
            object: "model",
            created: self.models_created,
            owned_by: "nimbus".to_owned(),
        }
    }

    pub fn list_models(&self) -> ModelList {
        ModelList {
            object: "list",
            data: self.router.model_names().map(|name| self.model_object(name)).collect(),
        }
    }

    pub fn get_model(&self, id: &str) -> Result<ModelObject, InferenceError> {
        if self.router.contains(id) {
            Ok(self.model_object(id))
        } else {
            Err(RoutingError::ModelNotFound(id.to_owned()).into())
        }
    }

    pub async fn chat(
        &self,
        request: &ChatRequest,
        credentials: &HashMap<String, String>,
    ) -> Result<ChatCompletion, InferenceError> {
        validate_chat(&request.typed)?;
        let mut completion = self.router.chat(request, CallContext { credentials }).await?;
        completion.id = self.ids.prefixed("chatcmpl-");
        completion.object = "chat.completion".to_owned();
        completion.created = self.clock.now_unix_s();
        completion.model = request.typed.model.clone();
        Ok(completion)
    }

    /// A stream of chunks sharing one minted id; the usage chunk only when the client asked.
    pub async fn chat_stream(
        &self,
        request: &ChatRequest,
        credentials: &HashMap<String, String>,
    ) -> Result<ClientChunkStream, InferenceError> {
        validate_chat(&request.typed)?;
        let upstream = self.router.chat_stream(request, CallContext { credentials }).await?;
        let id = self.ids.prefixed("chatcmpl-");
        let created = self.clock.now_unix_s();
        let model = request.typed.model.clone();
        let include_usage = request.typed.wants_stream_usage();
        let stream = upstream.filter_map(move |item| {
            let item = match item {
                Err(err) => Some(Err(err)),
                Ok(mut chunk) => {
                    let usage_only = chunk.choices.is_empty();
                    if !include_usage {
                        chunk.usage = None;
                    }
                    if usage_only && chunk.usage.is_none() {
                        None
                    } else {
                        chunk.id = id.clone();
                        chunk.object = "chat.completion.chunk".to_owned();
                        chunk.created = created;
                        chunk.model = model.clone();
                        Some(Ok(chunk))
                    }
                }
            };
            futures::future::ready(item)
        });
        Ok(stream.boxed())
    }

    pub async fn embed(
        &self,
        request: &EmbeddingRequest,
        credentials: &HashMap<String, String>,
    ) -> Result<EmbeddingResponse, InferenceError> {
        validate_embeddings(request)?;
        let embeddings = self.router.embed(request, CallContext { credentials }).await?;
        let format = request.encoding_format.unwrap_or(EncodingFormat::Float);
        Ok(EmbeddingResponse {
            object: "list",
            data: embeddings
                .vectors
                .into_iter()
                .enumerate()
                .map(|(index, vector)| EmbeddingData {
                    object: "embedding",
                    index,
                    embedding: EmbeddingVector::encode(vector, format),
                })
                .collect(),
            model: request.model.clone(),
            usage: embeddings.usage,
        })
    }
}

#[cfg(test)]
mod tests;
