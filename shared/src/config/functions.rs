//! `[functions.F]` and `[functions.F.variants.V]`: TensorZero-style functions as parsed from the
//! TOML. Paths to templates and schemas are kept as written (relative to the config file); the
//! function layer (`crate::tensorzero`) reads and compiles them.

/// Variants share the entry types with providers.
pub(crate) use super::extras::{ExtraBodyEntry, ExtraHeaderEntry};
pub use super::variants::{BestOfNConfig, MixtureOfNConfig, VariantConfig};
/// `none`, `auto`, `required` or `{ specific = "tool" }`: the model request's own type.
pub(crate) use crate::model::ToolChoice;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// One function: what the caller sends (schemas), what it returns (chat or json) and the
/// variants that can serve it.
#[derive(Debug, Clone, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct FunctionConfig {
    #[serde(rename = "type")]
    pub kind: FunctionKind,
    #[serde(default)]
    pub description: Option<String>,
    /// Legacy form of `schemas.system.path`.
    #[serde(default)]
    pub system_schema: Option<String>,
    /// Legacy form of `schemas.user.path`.
    #[serde(default)]
    pub user_schema: Option<String>,
    /// Legacy form of `schemas.assistant.path`.
    #[serde(default)]
    pub assistant_schema: Option<String>,
    #[serde(default)]
    pub schemas: BTreeMap<String, PathEntry>,
    /// json functions only: the schema the answer must match (default `{}`).
    #[serde(default)]
    pub output_schema: Option<String>,
    /// chat functions only: names of `[tools.T]` the model may call.
    #[serde(default)]
    pub tools: Vec<String>,
    #[serde(default)]
    pub tool_choice: Option<ToolChoice>,
    #[serde(default)]
    pub parallel_tool_calls: Option<bool>,
    #[serde(default)]
    pub variants: BTreeMap<String, VariantConfig>,
    #[serde(default)]
    pub experimentation: Option<ExperimentationConfig>,
}

#[derive(Debug, Clone, Copy, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "snake_case")]
pub enum FunctionKind {
    Chat,
    Json,
}

/// `{ path = "..." }`, the form of named schemas and templates.
#[derive(Debug, Clone, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct PathEntry {
    pub path: String,
}

/// A `chat_completion` variant: one model call with templates and parameters.
#[derive(Debug, Clone, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct ChatCompletionConfig {
    /// A `[models.M]` name or a `provider::model` shorthand.
    pub model: String,
    /// Legacy sampling weight: > 0 candidate, unset fallback, 0 never drawn.
    #[serde(default)]
    pub weight: Option<f64>,
    /// Legacy form of `templates.system.path`.
    #[serde(default)]
    pub system_template: Option<String>,
    #[serde(default)]
    pub user_template: Option<String>,
    #[serde(default)]
    pub assistant_template: Option<String>,
    #[serde(default)]
    pub templates: BTreeMap<String, PathEntry>,
    #[serde(default)]
    pub temperature: Option<f64>,
    #[serde(default)]
    pub top_p: Option<f64>,
    #[serde(default)]
    pub max_tokens: Option<u32>,
    #[serde(default)]
    pub presence_penalty: Option<f64>,
    #[serde(default)]
    pub frequency_penalty: Option<f64>,
    #[serde(default)]
    pub seed: Option<u32>,
    #[serde(default)]
    pub stop_sequences: Option<Vec<String>>,
    /// json functions only; unset means `strict` there.
    #[serde(default)]
    pub json_mode: Option<JsonMode>,
    #[serde(default)]
    pub retries: RetriesConfig,
    #[serde(default)]
    pub extra_body: Vec<ExtraBodyEntry>,
    #[serde(default)]
    pub extra_headers: Vec<ExtraHeaderEntry>,
    #[serde(default)]
    pub timeouts: Option<VariantTimeouts>,
}

#[derive(Debug, Clone, Copy, Serialize, Deserialize, PartialEq, Eq, utoipa::ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum JsonMode {
    Off,
    On,
    Strict,
    Tool,
}

/// Truncated exponential backoff between attempts of one variant.
#[derive(Debug, Clone, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct RetriesConfig {
    #[serde(default)]
    pub num_retries: u32,
    #[serde(default = "default_max_delay_s")]
    pub max_delay_s: f64,
}

impl Default for RetriesConfig {
    fn default() -> Self {
        Self {
            num_retries: 0,
            max_delay_s: default_max_delay_s(),
        }
    }
}

fn default_max_delay_s() -> f64 {
    10.0
}

#[derive(Debug, Clone, Deserialize, PartialEq, Default)]
#[serde(deny_unknown_fields)]
pub struct VariantTimeouts {
    #[serde(default)]
    pub non_streaming: Option<NonStreamingTimeouts>,
    #[serde(default)]
    pub streaming: Option<StreamingTimeouts>,
}

#[derive(Debug, Clone, Deserialize, PartialEq, Default)]
#[serde(deny_unknown_fields)]
pub struct NonStreamingTimeouts {
    #[serde(default)]
    pub total_ms: Option<u64>,
}

#[derive(Debug, Clone, Deserialize, PartialEq, Default)]
#[serde(deny_unknown_fields)]
pub struct StreamingTimeouts {
    #[serde(default)]
    pub ttft_ms: Option<u64>,
    #[serde(default)]
    pub total_ms: Option<u64>,
}

/// `[functions.F.experimentation]`; `type` selects the kind (only `static` today).
#[derive(Debug, Clone, Deserialize, PartialEq)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum ExperimentationConfig {
    Static(StaticExperimentation),
}

#[derive(Debug, Clone, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct StaticExperimentation {
    #[serde(default)]
    pub candidate_variants: CandidateVariants,
    /// Tried in order once every candidate has failed.
    #[serde(default)]
    pub fallback_variants: Vec<String>,
}

/// A list (drawn uniformly) or a `{ variant = weight }` table (weights normalised).
#[derive(Debug, Clone, Deserialize, PartialEq)]
#[serde(untagged)]
pub enum CandidateVariants {
    List(Vec<String>),
    Weights(BTreeMap<String, f64>),
}

impl Default for CandidateVariants {
    fn default() -> Self {
        Self::List(Vec::new())
    }
}

/// The roles whose legacy `*_schema` / `*_template` keys name the schema or template.
pub(crate) const LEGACY_ROLES: [&str; 3] = ["system", "user", "assistant"];

impl FunctionConfig {
    /// Every schema by name, legacy keys folded in: `(name, key path suffix, file path)`.
    pub(crate) fn schema_paths(&self) -> Vec<(String, String, &str)> {
        let legacy = [&self.system_schema, &self.user_schema, &self.assistant_schema];
        let mut paths = Vec::new();
        for (role, path) in LEGACY_ROLES.iter().zip(legacy) {
            if let Some(path) = path {
                paths.push(((*role).to_owned(), format!("{role}_schema"), path.as_str()));
            }
        }
        for (name, entry) in &self.schemas {
            paths.push((name.clone(), format!("schemas.{name}.path"), entry.path.as_str()));
        }
        paths
    }
}

impl ChatCompletionConfig {
    /// Every template by name, legacy keys folded in: `(name, key path suffix, file path)`.
    pub(crate) fn template_paths(&self) -> Vec<(String, String, &str)> {
        let legacy = [&self.system_template, &self.user_template, &self.assistant_template];
        let mut paths = Vec::new();
        for (role, path) in LEGACY_ROLES.iter().zip(legacy) {
            if let Some(path) = path {
                paths.push(((*role).to_owned(), format!("{role}_template"), path.as_str()));
            }
        }
        for (name, entry) in &self.templates {
            paths.push((name.clone(), format!("templates.{name}.path"), entry.path.as_str()));
        }
        paths
    }
}
