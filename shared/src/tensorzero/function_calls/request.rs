//! `POST /inference`'s body, in TensorZero's shape. The TensorZero client sends every key (most
//! as null or a default), so every key it knows is accepted here; an unknown key is refused, and a
//! key set to something Nimbus does not do is refused by [`InferenceRequest::check_supported`].

use super::input::FunctionInput;
use crate::config::functions::JsonMode;
use crate::config::CacheMode;
use crate::model::ToolChoice;
use serde::{Deserialize, Serialize};
use serde_json::Value;
use std::collections::{BTreeMap, HashMap};

#[derive(Debug, Clone, PartialEq, Default, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
#[schema(example = json!({"model_name": "dummy", "input": {"messages": [{"role": "user", "content": "Hello"}]}}))]
pub(crate) struct InferenceRequest {
    #[serde(default)]
    pub function_name: Option<String>,
    #[serde(default)]
    pub model_name: Option<String>,
    #[serde(default)]
    pub episode_id: Option<String>,
    #[serde(default)]
    pub namespace: Option<String>,
    pub input: FunctionInput,
    #[serde(default)]
    pub stream: Option<bool>,
    #[serde(default)]
    pub params: Option<InferenceParams>,
    #[serde(default)]
    pub variant_name: Option<String>,
    #[serde(default)]
    pub dryrun: Option<bool>,
    #[serde(default)]
    pub internal: Option<bool>,
    #[serde(default)]
    pub tags: Option<BTreeMap<String, String>>,
    #[serde(default)]
    pub additional_tools: Option<Vec<AdditionalTool>>,
    #[serde(default)]
    pub allowed_tools: Option<Vec<String>>,
    #[serde(default)]
    pub tool_choice: Option<ToolChoice>,
    #[serde(default)]
    pub parallel_tool_calls: Option<bool>,
    #[serde(default)]
    pub provider_tools: Option<Vec<Value>>,
    #[serde(default)]
    pub output_schema: Option<Value>,
    #[serde(default)]
    pub credentials: Option<HashMap<String, String>>,
    #[serde(default)]
    pub cache_options: Option<CacheOptions>,
    #[serde(default)]
    pub include_original_response: Option<bool>,
    #[serde(default)]
    pub include_raw_response: Option<bool>,
    #[serde(default)]
    pub include_raw_usage: Option<bool>,
    #[serde(default)]
    pub include_aggregated_response: Option<bool>,
    #[serde(default)]
    pub extra_body: Option<Vec<InferenceEdit>>,
    #[serde(default)]
    pub extra_headers: Option<Vec<InferenceEdit>>,
    #[serde(default)]
    pub internal_dynamic_variant_config: Option<Value>,
}

/// `params`: inference-time parameters per variant type.
#[derive(Debug, Clone, PartialEq, Default, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub(crate) struct InferenceParams {
    #[serde(default)]
    pub chat_completion: ChatCompletionParams,
}

/// `params.chat_completion`: these beat the variant's configuration.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct ChatCompletionParams {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub temperature: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_tokens: Option<u64>,
    /// TensorZero's seed is a `u32`: a negative or larger one is refused.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub seed: Option<u32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub top_p: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub presence_penalty: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub frequency_penalty: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub json_mode: Option<JsonMode>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stop_sequences: Option<Vec<String>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reasoning_effort: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub service_tier: Option<crate::config::functions::ServiceTier>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub thinking_budget_tokens: Option<i32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub verbosity: Option<String>,
}

/// A tool defined with the request (`parameters` is the schema itself).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub(crate) struct AdditionalTool {
    pub name: String,
    #[serde(default)]
    pub description: Option<String>,
    pub parameters: Value,
    #[serde(default)]
    pub strict: Option<bool>,
    /// The client adds `"type": "function"`.
    #[serde(default, rename = "type")]
    pub kind: Option<String>,
}

/// `cache_options`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub(crate) struct CacheOptions {
    #[serde(default)]
    pub enabled: Option<CacheMode>,
    #[serde(default)]
    pub max_age_s: Option<u64>,
}

/// One `extra_body` (`pointer`) or `extra_headers` (`name`) entry: where it applies (a variant,
/// a model and maybe one of its providers, or always) and the edit (`value`, or `delete: true`).
#[derive(Debug, Clone, PartialEq, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub(crate) struct InferenceEdit {
    #[serde(default)]
    pub variant_name: Option<String>,
    #[serde(default)]
    pub model_name: Option<String>,
    #[serde(default)]
    pub provider_name: Option<String>,
    #[serde(default)]
    pub model_provider_name: Option<String>,
    /// `extra_body`: the JSON Pointer edited.
    #[serde(default)]
    pub pointer: Option<String>,
    /// `extra_headers`: the header edited.
    #[serde(default)]
    pub name: Option<String>,
    #[serde(default)]
    pub value: Option<Value>,
    #[serde(default)]
    pub delete: Option<bool>,
}
