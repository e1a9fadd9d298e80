//! A `chat_completion` variant's keys (also the judge's, the fuser's and a DICL variant's model
//! call): templates, sampling parameters, json mode, retries and timeouts. A leaf: the variant
//! types (`functions.rs`) and DICL (`dicl.rs`) build on it.

use super::extras::{ExtraBodyEntry, ExtraHeaderEntry};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

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
    /// Reasoning models' effort (`minimal`, `low`, `medium`, `high`…), passed to OpenAI as is.
    #[serde(default)]
    pub reasoning_effort: Option<String>,
    #[serde(default)]
    pub service_tier: Option<ServiceTier>,
    /// A thinking budget, for providers that take one (none yet: OpenAI warns and ignores it).
    #[serde(default)]
    pub thinking_budget_tokens: Option<i32>,
    /// How long an answer should be (`low`, `medium`, `high`), passed to OpenAI as is.
    #[serde(default)]
    pub verbosity: Option<String>,
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

/// The processing tier asked of the provider (TensorZero's values).
#[derive(Debug, Clone, Copy, Serialize, Deserialize, PartialEq, Eq, utoipa::ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum ServiceTier {
    Auto,
    Default,
    Priority,
    Flex,
}

impl ServiceTier {
    pub(crate) fn as_str(self) -> &'static str {
        match self {
            Self::Auto => "auto",
            Self::Default => "default",
            Self::Priority => "priority",
            Self::Flex => "flex",
        }
    }
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

/// The roles whose legacy `*_schema` / `*_template` keys name the schema or template.
pub(crate) const LEGACY_ROLES: [&str; 3] = ["system", "user", "assistant"];

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
