//! `type = "experimental_dynamic_in_context_learning"` variants (DICL): before each call the
//! request's input is embedded, the `k` nearest stored examples of the (function, variant) are put
//! into the prompt as user/assistant turns, and the generation model answers the request after
//! them. The examples are built beforehand (`POST /dicl/build`, `nimbus dicl build`); see
//! `crate::tensorzero::dicl`.

use super::extras::{ExtraBodyEntry, ExtraHeaderEntry};
use super::function_checks::{check_model, FunctionContext};
use super::functions::{ChatCompletionConfig, FunctionKind, JsonMode, RetriesConfig, VariantTimeouts};
use super::ConfigError;
use serde::Deserialize;
use std::collections::BTreeMap;

/// The system instructions when the variant names no `system_instructions` file.
pub(crate) const DEFAULT_SYSTEM_INSTRUCTIONS: &str = "You answer requests by following the worked \
examples that come before the last one. Each example is a user message holding a request's input as JSON, \
then the answer that was right for it. Work out from these pairs what is expected, then answer the last \
user message's input the same way, in the same format and style as the example answers.";

/// A DICL variant's keys, as TensorZero names them (`service_tier` is not among them).
#[derive(Debug, Clone, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct DiclConfig {
    /// The model that embeds inputs: a `[models.M]` name or a `provider::model` shorthand.
    pub embedding_model: String,
    /// How many examples go into the prompt at most.
    pub k: u32,
    /// The generation model: a `[models.M]` name or a `provider::model` shorthand.
    pub model: String,
    /// A plain-text file (no templating); a built-in paragraph when unset.
    #[serde(default)]
    pub system_instructions: Option<String>,
    /// Examples farther than this cosine distance are left out.
    #[serde(default)]
    pub max_distance: Option<f64>,
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
    /// Parsed so TensorZero configs load; applied once `chat_completion` variants carry them.
    #[serde(default)]
    pub reasoning_effort: Option<String>,
    #[serde(default)]
    pub thinking_budget_tokens: Option<i32>,
    #[serde(default)]
    pub verbosity: Option<String>,
    /// json functions only; unset means `strict` there.
    #[serde(default)]
    pub json_mode: Option<JsonMode>,
    #[serde(default)]
    pub retries: RetriesConfig,
    #[serde(default)]
    pub extra_body: Vec<ExtraBodyEntry>,
    #[serde(default)]
    pub extra_headers: Vec<ExtraHeaderEntry>,
    /// Legacy sampling weight, as on `chat_completion` variants.
    #[serde(default)]
    pub weight: Option<f64>,
    /// Cover the embedding call and the generation together.
    #[serde(default)]
    pub timeouts: Option<VariantTimeouts>,
}

impl DiclConfig {
    /// The generation call's settings as a `chat_completion` variant without templates: the
    /// generation runs through the same preparation, retries and timeouts.
    pub(crate) fn generation(&self) -> ChatCompletionConfig {
        ChatCompletionConfig {
            model: self.model.clone(),
            weight: self.weight,
            system_template: None,
            user_template: None,
            assistant_template: None,
            templates: BTreeMap::new(),
            temperature: self.temperature,
            top_p: self.top_p,
            max_tokens: self.max_tokens,
            presence_penalty: self.presence_penalty,
            frequency_penalty: self.frequency_penalty,
            seed: self.seed,
            stop_sequences: self.stop_sequences.clone(),
            json_mode: self.json_mode,
            retries: self.retries.clone(),
            extra_body: self.extra_body.clone(),
            extra_headers: self.extra_headers.clone(),
            timeouts: self.timeouts.clone(),
        }
    }

    pub(crate) fn validate(
        &self,
        key: &str,
        kind: FunctionKind,
        context: &FunctionContext<'_>,
    ) -> Result<(), ConfigError> {
        self.generation().validate(key, kind, context)?;
        check_model(context, &format!("{key}.embedding_model"), &self.embedding_model)?;
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
