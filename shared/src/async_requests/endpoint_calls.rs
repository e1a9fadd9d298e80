//! Running a request's `model_input` through the same layers as the synchronous API: the answer
//! is exactly what `/v1/chat/completions`, `/v1/embeddings` or `/inference` would have returned.

use super::classify::{function_failure, inference_failure, refused, RunFailure, MODEL_PREDICT_ERROR};
use super::submit::AsyncEndpoint;
use crate::inference::InferenceService;
use crate::openai::chat::ChatCompletionRequest;
use crate::openai::credentials::take_credentials;
use crate::openai::embeddings::EmbeddingRequest;
use crate::openai::error::ApiError;
use crate::openai::json_body::parse_json_object;
use crate::openai::to_model::OpenAiChatRequest;
use crate::ports::ProjectId;
use crate::tensorzero::function_calls::{FunctionService, InferenceReply, InferenceRequest};
use serde_json::{Map, Value};
use std::sync::Arc;

/// Runs model inputs for one project at a time.
#[derive(Clone)]
pub struct EndpointCalls {
    pub inference: Arc<InferenceService>,
    pub functions: Arc<FunctionService>,
}

impl EndpointCalls {
    /// Run `model_input` for `project`: the endpoint's JSON answer, or why it failed.
    pub(crate) async fn run(
        &self,
        project: &ProjectId,
        endpoint: AsyncEndpoint,
        model_input: &Map<String, Value>,
    ) -> Result<Value, RunFailure> {
        let mut body = model_input.clone();
        let answer = match endpoint {
            AsyncEndpoint::ChatCompletions => {
                let credentials = take_credentials(&mut body).map_err(refused)?;
                let parsed = parse_json_object::<ChatCompletionRequest>(body).map_err(refused)?;
                let request = OpenAiChatRequest {
                    typed: parsed.typed,
                    raw: parsed.raw,
                };
                let completion = self
                    .inference
                    .chat(&request, &credentials)
                    .await
                    .map_err(inference_failure)?;
                serde_json::to_value(&completion)
            }
            AsyncEndpoint::Embeddings => {
                let credentials = take_credentials(&mut body).map_err(refused)?;
                let parsed = parse_json_object::<EmbeddingRequest>(body).map_err(refused)?;
                let response = self
                    .inference
                    .embed(&parsed.typed, &credentials)
                    .await
                    .map_err(inference_failure)?;
                response.to_json_value()
            }
            AsyncEndpoint::Inference => {
                let request: InferenceRequest = serde_json::from_value(Value::Object(body))
                    .map_err(|e| refused(ApiError::invalid_request(e.to_string())))?;
                let functions = &self.functions;
                let call = request
                    .into_call(functions.now_ms(), || functions.new_id())
                    .map_err(|err| function_failure(&err))?;
                let result = functions
                    .infer(project, &call)
                    .await
                    .map_err(|err| function_failure(&err))?;
                serde_json::to_value(InferenceReply::new(&result, call.includes))
            }
        };
        answer.map_err(|e| RunFailure::new(MODEL_PREDICT_ERROR, format!("could not encode the answer: {e}"), false))
    }
}
