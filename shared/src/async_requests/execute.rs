//! Running a request's `model_input` through the same layers as the synchronous API: the answer
//! is exactly what `/v1/chat/completions`, `/v1/embeddings` or `/inference` would have returned.

use super::classify::{function_failure, inference_failure, refused, RunFailure, MODEL_PREDICT_ERROR};
use super::submit::AsyncEndpoint;
use crate::inference::{validate_chat, validate_embeddings, InferenceError, InferenceService};
use crate::openai::chat::ChatCompletionRequest;
use crate::openai::credentials::take_credentials;
use crate::openai::embeddings::EmbeddingRequest;
use crate::openai::error::ApiError;
use crate::openai::json_body::parse_json_object;
use crate::openai::to_model::OpenAiChatRequest;
use crate::ports::ProjectId;
use crate::tensorzero::function_calls::{FunctionError, FunctionService, InferenceReply, InferenceRequest};
use serde_json::{Map, Value};
use std::sync::Arc;

/// Runs model inputs for one project at a time.
#[derive(Clone)]
pub struct AsyncExecutor {
    pub inference: Arc<InferenceService>,
    pub functions: Arc<FunctionService>,
}

impl AsyncExecutor {
    /// Whether `model_id` can be run on `endpoint` (checked at submission).
    pub fn knows(&self, endpoint: AsyncEndpoint, model_id: &str, model_input: &Map<String, Value>) -> bool {
        match endpoint {
            AsyncEndpoint::ChatCompletions | AsyncEndpoint::Embeddings => self.inference.can_route(model_id),
            AsyncEndpoint::Inference if model_input.contains_key("function_name") => {
                self.functions.functions().function(model_id).is_ok()
            }
            AsyncEndpoint::Inference => self.inference.can_route(model_id),
        }
    }

    /// Check `model_input` as its endpoint would, without running it: the first problem, with the
    /// field it names (relative to `model_input`).
    pub fn check(
        &self,
        endpoint: AsyncEndpoint,
        model_input: &Map<String, Value>,
    ) -> Result<(), (Option<String>, String)> {
        let mut body = model_input.clone();
        match endpoint {
            // The synchronous endpoint's own checks (OpenAI's bounds included), so a body it would
            // refuse is refused here, not after waiting in the queue.
            AsyncEndpoint::ChatCompletions => {
                take_credentials(&mut body).map_err(api_problem)?;
                let parsed = parse_json_object::<ChatCompletionRequest>(body).map_err(api_problem)?;
                validate_chat(&parsed.typed).map_err(inference_problem)?;
            }
            AsyncEndpoint::Embeddings => {
                take_credentials(&mut body).map_err(api_problem)?;
                let parsed = parse_json_object::<EmbeddingRequest>(body).map_err(api_problem)?;
                validate_embeddings(&parsed.typed).map_err(inference_problem)?;
            }
            AsyncEndpoint::Inference => {
                let request: InferenceRequest =
                    serde_path_to_error::deserialize(Value::Object(body)).map_err(|err| {
                        let path = err.path().to_string();
                        let field = (path != ".").then_some(path);
                        (field, err.inner().to_string())
                    })?;
                let functions = &self.functions;
                let call = request
                    .into_call(functions.now_ms(), || functions.new_id())
                    .map_err(|err| (None, err.to_string()))?;
                // Everything `/inference` checks before it calls a model (input schemas, the
                // variant, templates, tools, the output schema), so a request that would fail
                // with MODEL_INVALID_INPUT is refused now, not after waiting in the queue.
                functions
                    .check(&call)
                    .map_err(|err| (function_field(&err), err.to_string()))?;
            }
        }
        Ok(())
    }

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

/// The field of `model_input` a function error is about: the variant or function it names, or
/// the field its message starts with (`` `input.system` failed validation: … ``).
fn function_field(error: &FunctionError) -> Option<String> {
    match error {
        FunctionError::UnknownVariant { .. } => Some("variant_name".to_owned()),
        FunctionError::UnknownFunction(_) => Some("function_name".to_owned()),
        FunctionError::InvalidRequest(message) => message
            .strip_prefix('`')
            .and_then(|rest| rest.split_once('`'))
            .map(|(field, _)| field)
            .filter(|field| !field.is_empty() && field.len() <= 200 && !field.contains(char::is_whitespace))
            .map(str::to_owned),
        _ => None,
    }
}

fn api_problem(error: ApiError) -> (Option<String>, String) {
    (error.param.clone(), error.message)
}

fn inference_problem(error: InferenceError) -> (Option<String>, String) {
    api_problem(ApiError::from(error))
}

#[cfg(test)]
#[path = "execute_tests.rs"]
mod tests;
