//! `type = "experimental_dynamic_in_context_learning"` variants (DICL): before each call the
//! request's input is embedded, the `k` nearest stored examples of the (function, variant) are put
//! into the prompt as user/assistant turns, and the generation model answers the request after
//! them. The examples are built beforehand (`POST /dicl/build`, `nimbus dicl build`); see
//! `crate::tensorzero::dicl`.

use super::chat_completion::{ChatCompletionConfig, JsonMode, RetriesConfig, VariantTimeouts};
use super::extras::{ExtraBodyEntry, ExtraHeaderEntry};
use super::shorthand::{resolve_model, ModelLookupError};
use super::{ConfigError, ModelConfig};
use serde::Deserialize;
use std::collections::BTreeMap;

/// The system instructions when the variant names no `system_instructions` file.
pub(crate) const DEFAULT_SYSTEM_INSTRUCTIONS: &str = "You answer requests by following the worked \
examples that come before the last one. Each example is a user message holding a request's input as JSON, \
then the answer that was right for it. Work out from these pairs what is expected, then answer the last \
user message's input the same way, in the same format and style as the example answers.";

/// A DICL variant: its retrieval keys, and its generation call as a template-less
/// `chat_completion` (sampling, json mode, retries, edits, weight and timeouts are that call's).
#[derive(Debug, Clone, Deserialize, PartialEq)]
#[serde(from = "DiclKeys")]
pub struct DiclConfig {
    /// The model that embeds inputs: a `[models.M]` name or a `provider::model` shorthand.
    pub embedding_model: String,
    /// How many examples go into the prompt at most.
    pub k: u32,
    /// A plain-text file (no templating); a built-in paragraph when unset.
    pub system_instructions: Option<String>,
    /// Examples farther than this cosine distance are left out.
    pub max_distance: Option<f64>,
    pub generation: ChatCompletionConfig,
}

/// The keys as written, TensorZero's (`service_tier` is not among them).
#[derive(Debug, Clone, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
struct DiclKeys {
    embedding_model: String,
    k: u32,
    model: String,
    #[serde(default)]
    system_instructions: Option<String>,
    #[serde(default)]
    max_distance: Option<f64>,
    #[serde(default)]
    temperature: Option<f64>,
    #[serde(default)]
    top_p: Option<f64>,
    #[serde(default)]
    max_tokens: Option<u32>,
    #[serde(default)]
    presence_penalty: Option<f64>,
    #[serde(default)]
    frequency_penalty: Option<f64>,
    #[serde(default)]
    seed: Option<u32>,
    #[serde(default)]
    stop_sequences: Option<Vec<String>>,
    #[serde(default)]
    reasoning_effort: Option<String>,
    #[serde(default)]
    thinking_budget_tokens: Option<i32>,
    #[serde(default)]
    verbosity: Option<String>,
    #[serde(default)]
    json_mode: Option<JsonMode>,
    #[serde(default)]
    retries: RetriesConfig,
    #[serde(default)]
    extra_body: Vec<ExtraBodyEntry>,
    #[serde(default)]
    extra_headers: Vec<ExtraHeaderEntry>,
    #[serde(default)]
    weight: Option<f64>,
    /// Cover the embedding call and the generation.
    #[serde(default)]
    timeouts: Option<VariantTimeouts>,
}

impl From<DiclKeys> for DiclConfig {
    fn from(keys: DiclKeys) -> Self {
        let generation = ChatCompletionConfig {
            model: keys.model,
            weight: keys.weight,
            system_template: None,
            user_template: None,
            assistant_template: None,
            templates: BTreeMap::new(),
            temperature: keys.temperature,
            top_p: keys.top_p,
            max_tokens: keys.max_tokens,
            presence_penalty: keys.presence_penalty,
            frequency_penalty: keys.frequency_penalty,
            seed: keys.seed,
            stop_sequences: keys.stop_sequences,
            json_mode: keys.json_mode,
            retries: keys.retries,
            extra_body: keys.extra_body,
            extra_headers: keys.extra_headers,
            timeouts: keys.timeouts,
            reasoning_effort: keys.reasoning_effort,
            service_tier: None,
            thinking_budget_tokens: keys.thinking_budget_tokens,
            verbosity: keys.verbosity,
        };
        Self {
            embedding_model: keys.embedding_model,
            k: keys.k,
            system_instructions: keys.system_instructions,
            max_distance: keys.max_distance,
            generation,
        }
    }
}

impl DiclConfig {
    /// The retrieval keys' rules (the generation call is checked as any `chat_completion`).
    pub(crate) fn validate(&self, key: &str, models: &BTreeMap<String, ModelConfig>) -> Result<(), ConfigError> {
        if let Err(err) = resolve_model(models, &self.embedding_model) {
            let message = match err {
                ModelLookupError::UnknownModel(_) => format!(
                    "model `{}` is not defined in [models] and is not a `provider::model` shorthand",
                    self.embedding_model
                ),
                other => other.to_string(),
            };
            return Err(ConfigError::invalid(format!("{key}.embedding_model"), message));
        }
        if self.k == 0 {
            return Err(ConfigError::invalid(format!("{key}.k"), "must be at least 1"));
        }
        if let Some(distance) = self.max_distance {
            if !distance.is_finite() || distance < 0.0 {
                return Err(ConfigError::invalid(
                    format!("{key}.max_distance"),
                    "must be a finite number >= 0",
                ));
            }
        }
        if let Some(path) = &self.system_instructions {
            if path.trim().is_empty() {
                return Err(ConfigError::invalid(
                    format!("{key}.system_instructions"),
                    "must name a file",
                ));
            }
        }
        Ok(())
    }
}

#[cfg(test)]
#[path = "dicl_tests.rs"]
mod tests;
