//! Requests and answers of a provider's own batch API, for batch lines of models served by a
//! provider marked `batch = "native"`: the same validation and translation as the synchronous
//! calls, with the provider's batch API carrying the request instead of a direct call.

use super::{embedding_response, validate_chat, validate_embeddings, InferenceError, InferenceService};
use crate::openai::chat::ChatCompletion;
use crate::openai::embeddings::{EmbeddingRequest, EmbeddingResponse};
use crate::openai::from_model::{model_to_completion, AnswerIdentity};
use crate::openai::to_model::OpenAiChatRequest;
use crate::providers::router::NativeBatchTarget;
use crate::providers::router::{ProviderFailure, RoutingError};
use crate::providers::ProviderError;
use serde_json::Value;

impl InferenceService {
    /// The request line `body` for a chat request: checked as the synchronous call checks it.
    pub(crate) fn native_chat_body(
        &self,
        request: &OpenAiChatRequest,
        target: &NativeBatchTarget,
    ) -> Result<Value, InferenceError> {
        validate_chat(&request.typed)?;
        let model_request = request.to_model();
        target
            .api
            .chat_body(&model_request)
            .map_err(|error| one_failure(&model_request.model, &target.provider, error))
    }

    /// The completion a chat request line answers from its provider's batch output, with a
    /// minted id, the current time and the requested model name, as the synchronous call answers.
    pub(crate) fn native_chat_completion(
        &self,
        request: &OpenAiChatRequest,
        target: &NativeBatchTarget,
        body: &Value,
    ) -> Result<ChatCompletion, InferenceError> {
        let model_request = request.to_model();
        let response = target
            .api
            .chat_answer(body)
            .map_err(|error| one_failure(&model_request.model, &target.provider, error))?;
        let id = self.ids.prefixed("chatcmpl-");
        Ok(model_to_completion(
            response,
            AnswerIdentity {
                id: &id,
                created: self.clock.now_unix_s(),
                model: &model_request.model,
            },
        ))
    }

    /// The request line `body` for an embeddings request.
    pub(crate) fn native_embeddings_body(
        &self,
        request: &EmbeddingRequest,
        target: &NativeBatchTarget,
    ) -> Result<Value, InferenceError> {
        validate_embeddings(request)?;
        target
            .api
            .embeddings_body(request)
            .map_err(|error| one_failure(&request.model, &target.provider, error))
    }

    /// The embeddings answer of a request line from its provider's batch output.
    pub(crate) fn native_embedding_response(
        &self,
        request: &EmbeddingRequest,
        target: &NativeBatchTarget,
        body: &Value,
    ) -> Result<EmbeddingResponse, InferenceError> {
        let embeddings = target
            .api
            .embeddings_answer(body)
            .map_err(|error| one_failure(&request.model, &target.provider, error))?;
        Ok(embedding_response(request, embeddings))
    }
}

/// A provider's failure for one request, as the router reports a model whose one provider failed.
pub(crate) fn one_failure(model: &str, provider: &str, error: ProviderError) -> InferenceError {
    InferenceError::Routing(RoutingError::AllFailed {
        model: model.to_owned(),
        failures: vec![ProviderFailure {
            provider: provider.to_owned(),
            attempts: 1,
            error,
        }],
    })
}
