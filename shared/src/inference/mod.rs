//! The inference business layer: validates requests, translates them into the provider-neutral
//! [`ModelRequest`], routes them to providers, and mints the id, timestamp and model name of every
//! answer.

mod native_batch;
mod openai_chat;
mod validation;

use crate::model::{ModelRequest, ModelResponse};
use crate::openai::chat::ChatCompletionChunk;
use crate::openai::embeddings::{EmbeddingData, EmbeddingRequest, EmbeddingResponse, EmbeddingVector, EncodingFormat};
use crate::openai::models::{ModelList, ModelObject};
use crate::ports::{Clock, IdSource};
use crate::providers::router::{ModelRouter, NativeBatchTarget, RoutingError};
use crate::providers::{CallContext, Embeddings, ModelStream, ProviderError};
use futures::stream::BoxStream;
use std::collections::HashMap;
use std::sync::Arc;

pub(crate) use native_batch::one_failure;
pub(crate) use validation::{validate_chat, validate_embeddings};

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
pub(crate) type ClientChunkStream = BoxStream<'static, Result<ChatCompletionChunk, ProviderError>>;

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

    pub(crate) fn list_models(&self) -> ModelList {
        ModelList {
            object: "list",
            data: self
                .router
                .callable_model_names()
                .map(|name| self.model_object(name))
                .collect(),
        }
    }

    /// Whether requests naming `model` can be routed: a configured model or a `provider::model`
    /// shorthand (which [`Self::list_models`] and [`Self::get_model`] do not show).
    pub(crate) fn can_route(&self, model: &str) -> bool {
        self.router.routes(model)
    }

    /// Where batch jobs of configured model `model` run on a provider's own batch API, if they do.
    pub fn native_batch(&self, model: &str) -> Option<NativeBatchTarget> {
        self.router.native_batch(model)
    }

    /// A model [`Self::list_models`] lists (a configured model none of whose providers has its
    /// key is as unknown here as there).
    pub(crate) fn get_model(&self, id: &str) -> Result<ModelObject, InferenceError> {
        if self.router.callable_model_names().any(|name| name == id) {
            Ok(self.model_object(id))
        } else {
            Err(RoutingError::ModelNotFound(id.to_owned()).into())
        }
    }

    /// A neutral request routed to the model's providers (entry points validate first).
    pub(crate) async fn model_chat(
        &self,
        request: &ModelRequest,
        credentials: &HashMap<String, String>,
    ) -> Result<ModelResponse, InferenceError> {
        Ok(self.router.chat(request, CallContext { credentials }).await?)
    }

    /// A neutral request streamed from the model's providers.
    pub(crate) async fn model_chat_stream(
        &self,
        request: &ModelRequest,
        credentials: &HashMap<String, String>,
    ) -> Result<ModelStream, InferenceError> {
        Ok(self.router.chat_stream(request, CallContext { credentials }).await?)
    }

    pub async fn embed(
        &self,
        request: &EmbeddingRequest,
        credentials: &HashMap<String, String>,
    ) -> Result<EmbeddingResponse, InferenceError> {
        validate_embeddings(request)?;
        let embeddings = self.router.embed(request, CallContext { credentials }).await?;
        Ok(embedding_response(request, embeddings))
    }
}

/// The OpenAI answer to `request` from the provider's vectors.
fn embedding_response(request: &EmbeddingRequest, embeddings: Embeddings) -> EmbeddingResponse {
    let format = request.encoding_format.unwrap_or(EncodingFormat::Float);
    EmbeddingResponse {
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
    }
}

#[cfg(test)]
mod tests;
