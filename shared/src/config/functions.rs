//! `[functions.F]` and `[functions.F.variants.V]`: TensorZero-style functions as parsed from the
//! TOML. Paths to templates and schemas are kept as written (relative to the config file); the
//! function layer (`crate::tensorzero`) reads and compiles them.

pub(crate) use super::chat_completion::LEGACY_ROLES;
/// A `chat_completion` variant's keys live in their own module, re-exported where variants name them.
pub use super::chat_completion::{
    ChatCompletionConfig, JsonMode, NonStreamingTimeouts, PathEntry, RetriesConfig, ServiceTier, StreamingTimeouts,
    VariantTimeouts,
};
use super::dicl::DiclConfig;
/// The experiment types live in their own module; re-exported here where functions name them.
pub use super::experimentation::{
    AdaptiveAlgorithm, AdaptiveExperimentation, CandidateVariants, ExperimentationConfig, StaticExperimentation,
};
/// `none`, `auto`, `required` or `{ specific = "tool" }`: the model request's own type.
pub(crate) use crate::model::ToolChoice;
use serde::Deserialize;
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

/// A variant; `type` selects the kind. `chat_completion` makes one model call;
/// `experimental_chain_of_thought` is one call whose json answer carries its reasoning;
/// `experimental_best_of_n_sampling` and `experimental_mixture_of_n` run other variants of the
/// function (candidates), then a judge or a fuser whose keys are a `chat_completion` table
/// without `type`. Accessors and load-time rules: `super::variants`.
#[derive(Debug, Clone, Deserialize, PartialEq)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum VariantConfig {
    ChatCompletion(ChatCompletionConfig),
    /// TensorZero's code spells it `_sampling`; its documentation `experimental_best_of_n`.
    #[serde(rename = "experimental_best_of_n_sampling", alias = "experimental_best_of_n")]
    BestOfN(BestOfNConfig),
    #[serde(rename = "experimental_mixture_of_n")]
    MixtureOfN(MixtureOfNConfig),
    #[serde(rename = "experimental_chain_of_thought")]
    ChainOfThought(ChatCompletionConfig),
    /// Dynamic in-context learning: the nearest stored examples before the request.
    #[serde(rename = "experimental_dynamic_in_context_learning")]
    DynamicInContextLearning(DiclConfig),
}

/// `experimental_best_of_n_sampling`: the candidates, then a judge that picks one.
#[derive(Debug, Clone, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct BestOfNConfig {
    /// Variant names of the same function; a repeat is one more draw.
    pub candidates: Vec<String>,
    pub evaluator: ChatCompletionConfig,
    #[serde(default)]
    pub weight: Option<f64>,
    /// Covers the candidates and the judge together.
    #[serde(default)]
    pub timeouts: Option<VariantTimeouts>,
    /// Deprecated: becomes each candidate's `timeouts` at load.
    #[serde(default)]
    pub timeout_s: Option<f64>,
}

/// `experimental_mixture_of_n`: the candidates, then a fuser that writes one answer from them.
#[derive(Debug, Clone, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct MixtureOfNConfig {
    pub candidates: Vec<String>,
    pub fuser: ChatCompletionConfig,
    #[serde(default)]
    pub weight: Option<f64>,
    #[serde(default)]
    pub timeouts: Option<VariantTimeouts>,
    #[serde(default)]
    pub timeout_s: Option<f64>,
}

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
