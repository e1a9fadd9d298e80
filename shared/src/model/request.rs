//! The request every provider receives.

use super::content::Message;
use super::extra::{ExtraBodyEntry, ExtraHeaderEntry};
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};
use std::collections::BTreeMap;

/// One call to a model, independent of the API it came in on and of the provider that answers.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
pub struct ModelRequest {
    /// The gateway model to route to (not the provider's own model name).
    pub model: String,
    /// Instructions that open the conversation.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub system: Option<String>,
    /// The leading instructions came as a `developer` message.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub system_is_developer: bool,
    pub messages: Vec<Message>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub tools: Vec<ToolDefinition>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tool_choice: Option<ToolChoice>,
    /// The names, among `tools`, the model may call (TensorZero's `allowed_tools`). Providers
    /// that can say so (OpenAI's `allowed_tools` tool choice) send every tool with this list;
    /// others send only these tools. `None`: every tool is allowed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub allowed_tools: Option<Vec<String>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub parallel_tool_calls: Option<bool>,
    #[serde(default)]
    pub output: OutputMode,
    #[serde(default)]
    pub params: SamplingParams,
    /// Streamed answers are wanted (and with what).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stream: Option<StreamOptions>,
    /// Edits of the provider's wire body, applied last.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub extra_body: Vec<ExtraBodyEntry>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub extra_headers: Vec<ExtraHeaderEntry>,
    #[serde(default, skip_serializing_if = "OpenAiPassThrough::is_empty")]
    pub openai_pass_through: OpenAiPassThrough,
    /// The conversation is one user message holding a complete, already formatted prompt (the LMI
    /// API's `inputs`): prompt-schema providers send it as is, without their chat template.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub raw_prompt: bool,
    /// Which retry default the router applies to each provider. Not part of the request's
    /// meaning (nor of its cache key): never serialized.
    #[serde(skip)]
    pub retries: RetryScope,
}

/// Whose provider-retry setting applies to a request.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum RetryScope {
    /// `[gateway.retries] max_retries` (the OpenAI-style routes).
    #[default]
    Gateway,
    /// `[gateway.retries] inference_max_retries` (TensorZero's routes: one attempt by default).
    Inference,
}

impl ModelRequest {
    /// How many choices are wanted (at least 1).
    pub(crate) fn choice_count(&self) -> u32 {
        self.params.n.unwrap_or(1).max(1)
    }

    pub(crate) fn wants_stream_usage(&self) -> bool {
        self.stream.is_some_and(|s| s.include_usage)
    }
}

/// Options of a streamed answer.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct StreamOptions {
    /// The client wants a final usage chunk.
    pub include_usage: bool,
    /// Keep each chunk as the provider sent it ([`ModelChunk::raw_chunk`](super::ModelChunk)):
    /// TensorZero's `include_original_response` on a stream. Off by default (a copy per chunk).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub raw_chunks: bool,
}

/// A tool the model may call.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ToolDefinition {
    pub name: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub description: Option<String>,
    /// JSON Schema of the arguments.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub parameters: Option<Value>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub strict: Option<bool>,
}

/// Whether and which tool the model must call.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum ToolChoice {
    None,
    Auto,
    Required,
    /// This tool, by name.
    Specific(String),
}

/// The shape of the answer.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum OutputMode {
    /// Free text (also when the client named no format).
    #[default]
    Text,
    /// Any JSON object.
    JsonObject,
    /// JSON valid against `schema`.
    JsonSchema {
        name: String,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        description: Option<String>,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        schema: Option<Value>,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        strict: Option<bool>,
    },
}

/// Generation parameters. `None` leaves the provider's default.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
pub struct SamplingParams {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub temperature: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub top_p: Option<f64>,
    /// The cap on generated tokens.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_tokens: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub presence_penalty: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub frequency_penalty: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub seed: Option<i64>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub stop_sequences: Vec<String>,
    /// Choices to answer.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub n: Option<u32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub logprobs: Option<bool>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub top_logprobs: Option<u32>,
    /// Token id (as text) → bias.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub logit_bias: Option<BTreeMap<String, f64>>,
    /// The end user, for the provider's abuse monitoring.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub user: Option<String>,
    /// Reasoning models' effort; OpenAI takes it as is.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reasoning_effort: Option<String>,
    /// `auto`, `default`, `priority` or `flex`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub service_tier: Option<String>,
    /// A thinking budget in tokens, for providers that take one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub thinking_budget_tokens: Option<i32>,
    /// How long the answer should be; OpenAI takes it as is.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub verbosity: Option<String>,
}

/// What an OpenAI client sent that the gateway does not model, kept so that OpenAI clients lose
/// nothing. Only the OpenAI-compatible provider reads it; other providers ignore it. Never put
/// modelled fields in `fields`.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
pub struct OpenAiPassThrough {
    /// Top-level body fields (e.g. `store`, `metadata`, `reasoning_effort`, `service_tier`, a
    /// server's own extensions), forwarded as the client sent them.
    #[serde(default, skip_serializing_if = "Map::is_empty")]
    pub fields: Map<String, Value>,
    /// The client spelled the token cap `max_completion_tokens` (not `max_tokens`): the upstream
    /// gets the same spelling, since some servers know only one of the two.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub max_completion_tokens_spelling: bool,
}

impl OpenAiPassThrough {
    pub fn is_empty(&self) -> bool {
        self.fields.is_empty() && !self.max_completion_tokens_spelling
    }
}
