//! The LMI API Nimbus serves (`/invocations`, `/predictions/{model}`): DJL Serving / LMI request
//! schemas translated into the neutral [`ModelRequest`](crate::model::ModelRequest), and the
//! neutral answers rendered in LMI's response shapes.
//!
//! - `{"inputs": "…", "parameters", "stream"}` (rolling batch) → `{"generated_text", "details"?}`,
//!   a one-element array with `tgi_compat`; streamed as token lines.
//! - `{"inputs": ["…", …]}` (dynamic batch) → `[{"generated_text"}, …]` in input order; streamed
//!   as `{"outputs": […]}` lines.
//! - A body with `messages` (LMI chat) → OpenAI `chat.completion`; streamed as
//!   `chat.completion.chunk` lines.
//!
//! Streamed answers are a stream of JSON objects ([`LmiAnswer::Lines`]); the HTTP layer frames
//! them as JSON lines or SSE. A failure after the stream started becomes LMI's error line.

mod params;
mod render;
mod request;
mod stream;

#[cfg(test)]
pub(crate) use params::GenerationParameters;
pub(crate) use request::{Inputs, LmiRequest, RollingRequest};

use crate::config::{LmiApiConfig, LmiOutputFormatter};
use crate::inference::{InferenceError, InferenceService};
use crate::model::{ModelRequest, ModelResponse};
use crate::openai::credentials::take_credentials;
use crate::openai::json_body::parse_json_object;
use crate::openai::to_model::OpenAiChatRequest;
use crate::providers::ChunkStream;
use crate::user_text::excerpt;
use futures::stream::BoxStream;
use futures::{StreamExt, TryStreamExt};
use serde_json::{Map, Value};
use std::collections::HashMap;
use std::future::Future;
use std::sync::Arc;

/// The header SageMaker multi-model endpoints name the model in.
pub(crate) const TARGET_MODEL_HEADER: &str = "X-Amzn-SageMaker-Target-Model";

/// Prompts of one dynamic batch answered at the same time, at most.
const MAX_CONCURRENT_PROMPTS: usize = 8;

/// Why an LMI request produced no answer.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum LmiApiError {
    /// The request does not follow LMI's schema (LMI answers these with 424).
    #[error("{0}")]
    Invalid(String),
    /// `/invocations` named no model and the configuration has no default.
    #[error(
        "No model named: send the `{TARGET_MODEL_HEADER}` header, call `/predictions/{{model}}`, or set `[lmi_api] default_model` in the configuration."
    )]
    NoModel,
    #[error("The model `{}` does not exist or you do not have access to it.", excerpt(.0))]
    UnknownModel(String),
    /// The inference layer's error (chat validation, routing, every provider failing).
    #[error("{0}")]
    Inference(InferenceError),
    /// The answer could not be rendered (a gateway fault, not the client's nor the model's).
    #[error("The answer could not be rendered as JSON: {0}")]
    Render(String),
}

impl LmiApiError {
    pub(crate) fn invalid(message: impl Into<String>) -> Self {
        Self::Invalid(message.into())
    }
}

impl From<InferenceError> for LmiApiError {
    fn from(err: InferenceError) -> Self {
        Self::Inference(err)
    }
}

/// Where the request named its model.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ModelTarget {
    /// `/predictions/{model}`.
    Path(String),
    /// `/invocations`: the target-model header's value, if sent.
    Header(Option<String>),
}

/// How a streamed answer's objects are framed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LineFraming {
    JsonLines,
    Sse,
}

/// An answer: one JSON value, or a stream of JSON objects (failures already rendered as LMI's
/// error lines).
pub enum LmiAnswer {
    Json(Value),
    Lines {
        lines: BoxStream<'static, Value>,
        framing: LineFraming,
    },
}

impl std::fmt::Debug for LmiAnswer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Json(value) => f.debug_tuple("Json").field(value).finish(),
            Self::Lines { framing, .. } => f.debug_struct("Lines").field("framing", framing).finish(),
        }
    }
}

/// The LMI API over the inference layer.
pub struct LmiApi {
    inference: Arc<InferenceService>,
    config: LmiApiConfig,
}

impl LmiApi {
    pub fn new(inference: Arc<InferenceService>, config: LmiApiConfig) -> Self {
        Self { inference, config }
    }

    /// Answer `body` (a JSON object) on the model `target` names. `wants_sse`: the client sent
    /// `Accept: text/event-stream`.
    pub async fn invoke(
        &self,
        target: ModelTarget,
        body: Map<String, Value>,
        wants_sse: bool,
    ) -> Result<LmiAnswer, LmiApiError> {
        let model = self.resolve_model(target)?;
        let framing = self.framing(wants_sse);
        match LmiRequest::parse(body)? {
            LmiRequest::Chat(raw) => self.chat(&model, raw, framing).await,
            LmiRequest::Rolling(request) => self.rolling(&model, *request, framing).await,
        }
    }

    fn resolve_model(&self, target: ModelTarget) -> Result<String, LmiApiError> {
        let model = match target {
            ModelTarget::Path(model) => model,
            ModelTarget::Header(Some(model)) if !model.trim().is_empty() => model,
            ModelTarget::Header(_) => self.config.default_model.clone().ok_or(LmiApiError::NoModel)?,
        };
        if self.inference.can_route(&model) {
            Ok(model)
        } else {
            Err(LmiApiError::UnknownModel(model))
        }
    }

    /// SSE when the client asks for it, the configuration says so, or (unless configured
    /// otherwise) in TGI-compatible mode; JSON lines else.
    fn framing(&self, wants_sse: bool) -> LineFraming {
        let configured = self.config.output_formatter.unwrap_or(if self.config.tgi_compat {
            LmiOutputFormatter::Sse
        } else {
            LmiOutputFormatter::Jsonlines
        });
        if wants_sse || configured == LmiOutputFormatter::Sse {
            LineFraming::Sse
        } else {
            LineFraming::JsonLines
        }
    }

    async fn chat(
        &self,
        model: &str,
        mut raw: Map<String, Value>,
        framing: LineFraming,
    ) -> Result<LmiAnswer, LmiApiError> {
        raw.insert("model".to_owned(), Value::String(model.to_owned()));
        let credentials = take_credentials(&mut raw).map_err(|e| LmiApiError::invalid(e.message))?;
        let parsed = parse_json_object(raw).map_err(|e| LmiApiError::invalid(e.message))?;
        let request = OpenAiChatRequest {
            typed: parsed.typed,
            raw: parsed.raw,
        };
        if request.typed.wants_stream() {
            let chunks = self.inference.chat_stream(&request, &credentials).await?;
            return Ok(LmiAnswer::Lines {
                lines: stream::chat_lines(chunks),
                framing,
            });
        }
        let completion = self.inference.chat(&request, &credentials).await?;
        Ok(LmiAnswer::Json(render::to_json(&completion)?))
    }

    async fn rolling(
        &self,
        model: &str,
        request: RollingRequest,
        framing: LineFraming,
    ) -> Result<LmiAnswer, LmiApiError> {
        let no_credentials = HashMap::new();
        let parameters = &request.parameters;
        match (&request.inputs, request.stream) {
            (Inputs::One(prompt), false) => {
                let model_request = parameters.model_request(model, prompt, false);
                let response = self.inference.model_chat(&model_request, &no_credentials).await?;
                let answer = render::rolling_answer(&response, prompt, parameters);
                Ok(LmiAnswer::Json(if self.config.tgi_compat {
                    Value::Array(vec![answer])
                } else {
                    answer
                }))
            }
            (Inputs::One(prompt), true) => {
                let model_request = parameters.model_request(model, prompt, true);
                let upstream = self
                    .inference
                    .model_chat_stream(&model_request, &no_credentials)
                    .await?;
                let last_line = stream::LastLine {
                    return_full_text: parameters.return_full_text,
                    details: parameters.details || self.config.tgi_compat,
                };
                let lines = stream::token_lines(upstream.chunks, prompt.clone(), last_line);
                Ok(LmiAnswer::Lines { lines, framing })
            }
            (Inputs::Many(prompts), false) => {
                let calls: Vec<_> = prompts
                    .iter()
                    .map(|p| parameters.model_request(model, p, false))
                    .collect();
                let responses: Vec<_> = futures::stream::iter(calls.into_iter().map(|r| self.answer(r)))
                    .buffered(MAX_CONCURRENT_PROMPTS)
                    .try_collect()
                    .await?;
                let answers = responses
                    .iter()
                    .zip(prompts)
                    .map(|(response, prompt)| render::batch_answer(response, prompt, parameters))
                    .collect();
                Ok(LmiAnswer::Json(Value::Array(answers)))
            }
            (Inputs::Many(prompts), true) => {
                let calls: Vec<_> = prompts
                    .iter()
                    .map(|p| parameters.model_request(model, p, true))
                    .collect();
                let streams: Vec<_> = futures::stream::iter(calls.into_iter().map(|r| self.answer_stream(r)))
                    .buffered(MAX_CONCURRENT_PROMPTS)
                    .try_collect()
                    .await?;
                Ok(LmiAnswer::Lines {
                    lines: stream::outputs_lines(streams),
                    framing,
                })
            }
        }
    }
}

impl LmiApi {
    /// One prompt of a dynamic batch (owned, so that the batch's calls run side by side).
    fn answer(
        &self,
        request: ModelRequest,
    ) -> impl Future<Output = Result<ModelResponse, InferenceError>> + Send + 'static {
        let inference = Arc::clone(&self.inference);
        async move { inference.model_chat(&request, &HashMap::new()).await }
    }

    fn answer_stream(
        &self,
        request: ModelRequest,
    ) -> impl Future<Output = Result<ChunkStream, InferenceError>> + Send + 'static {
        let inference = Arc::clone(&self.inference);
        async move {
            let stream = inference.model_chat_stream(&request, &HashMap::new()).await?;
            Ok(stream.chunks)
        }
    }
}

#[cfg(test)]
mod tests;
