//! What a submission is checked with before it is queued, from the configuration alone: whether
//! its model or function exists, and whether its `model_input` would pass its endpoint's own
//! checks. No model is called, so the API holds no model layer.

use super::submit::AsyncEndpoint;
use crate::config::Config;
use crate::inference::{validate_chat, validate_embeddings, InferenceError};
use crate::openai::chat::ChatCompletionRequest;
use crate::openai::credentials::take_credentials;
use crate::openai::embeddings::EmbeddingRequest;
use crate::openai::error::ApiError;
use crate::openai::json_body::parse_json_object;
use crate::tensorzero::function_calls::{FunctionChecks, FunctionError, InferenceRequest};
use serde_json::{Map, Value};
use std::collections::BTreeSet;

/// The configured models and functions a submission may name.
#[derive(Clone)]
pub struct SubmissionCheck {
    /// The configured models (a `provider::model` shorthand needs none).
    models: BTreeSet<String>,
    functions: FunctionChecks,
}

impl SubmissionCheck {
    pub fn new(config: &Config, functions: FunctionChecks) -> Self {
        Self {
            models: config.models.keys().cloned().collect(),
            functions,
        }
    }

    /// Whether `model` can be routed: a configured model or a valid shorthand (the router's rule).
    fn routes(&self, model: &str) -> bool {
        crate::config::names_a_model(model, |name| self.models.contains(name))
    }

    /// Whether `model_id` can be run on `endpoint` (checked at submission).
    pub fn knows(&self, endpoint: AsyncEndpoint, model_id: &str, model_input: &Map<String, Value>) -> bool {
        match endpoint {
            AsyncEndpoint::ChatCompletions | AsyncEndpoint::Embeddings => self.routes(model_id),
            AsyncEndpoint::Inference if model_input.contains_key("function_name") => {
                self.functions.functions().function(model_id).is_ok()
            }
            AsyncEndpoint::Inference => self.routes(model_id),
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
#[path = "check_tests.rs"]
mod tests;
