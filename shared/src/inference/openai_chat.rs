//! The OpenAI chat surface of the inference service: validate the OpenAI request, translate it
//! into the neutral [`ModelRequest`](crate::model::ModelRequest), route it, and render the neutral
//! answer as the OpenAI completion or chunks.

use super::{validate_chat, ClientChunkStream, InferenceError, InferenceService};
use crate::openai::chat::ChatCompletion;
use crate::openai::from_model::{model_to_chunk, model_to_completion, AnswerIdentity};
use crate::openai::to_model::OpenAiChatRequest;
use futures::StreamExt;
use std::collections::HashMap;

impl InferenceService {
    /// A complete answer with a minted id, the current time and the requested model name.
    pub async fn chat(
        &self,
        request: &OpenAiChatRequest,
        credentials: &HashMap<String, String>,
    ) -> Result<ChatCompletion, InferenceError> {
        validate_chat(&request.typed)?;
        let model_request = request.to_model();
        let response = self.model_chat(&model_request, credentials).await?;
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

    /// A stream of chunks sharing one minted id; the usage chunk only when the client asked.
    pub(crate) async fn chat_stream(
        &self,
        request: &OpenAiChatRequest,
        credentials: &HashMap<String, String>,
    ) -> Result<ClientChunkStream, InferenceError> {
        validate_chat(&request.typed)?;
        let model_request = request.to_model();
        let upstream = self.model_chat_stream(&model_request, credentials).await?;
        let id = self.ids.prefixed("chatcmpl-");
        let created = self.clock.now_unix_s();
        let model = model_request.model.clone();
        let include_usage = model_request.wants_stream_usage();
        let stream = upstream.chunks.filter_map(move |item| {
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
                        let identity = AnswerIdentity {
                            id: &id,
                            created,
                            model: &model,
                        };
                        Some(Ok(model_to_chunk(chunk, identity)))
                    }
                }
            };
            futures::future::ready(item)
        });
        Ok(stream.boxed())
    }
}
