//! The variant types' accessors and load-time rules (the types are declared with the rest of
//! `[functions.*]` in `functions.rs`): candidates, cycles, chain of thought on json functions,
//! json mode per function type, and the deprecated `timeout_s`.

use super::functions::{
    ChatCompletionConfig, FunctionKind, NonStreamingTimeouts, StreamingTimeouts, VariantConfig, VariantTimeouts,
};
use super::ConfigError;
use std::collections::BTreeMap;

impl VariantConfig {
    /// The `type` as written in TensorZero's code.
    pub fn type_name(&self) -> &'static str {
        match self {
            Self::ChatCompletion(_) => "chat_completion",
            Self::BestOfN(_) => "experimental_best_of_n_sampling",
            Self::MixtureOfN(_) => "experimental_mixture_of_n",
            Self::ChainOfThought(_) => "experimental_chain_of_thought",
            Self::DynamicInContextLearning(_) => "experimental_dynamic_in_context_learning",
        }
    }

    /// The configuration of the variant's own model call: itself, or its judge or fuser.
    /// Templates, json mode, retries and parameters come from it.
    pub fn prompt(&self) -> &ChatCompletionConfig {
        match self {
            Self::ChatCompletion(config) | Self::ChainOfThought(config) => config,
            Self::BestOfN(config) => &config.evaluator,
            Self::MixtureOfN(config) => &config.fuser,
            Self::DynamicInContextLearning(config) => &config.generation,
        }
    }

    /// The key under the variant's table where [`Self::prompt`]'s keys live (`""`, `evaluator.`
    /// or `fuser.`).
    pub(crate) fn prompt_key(&self) -> &'static str {
        match self {
            Self::ChatCompletion(_) | Self::ChainOfThought(_) | Self::DynamicInContextLearning(_) => "",
            Self::BestOfN(_) => "evaluator.",
            Self::MixtureOfN(_) => "fuser.",
        }
    }

    /// Legacy sampling weight: > 0 candidate, unset fallback, 0 never drawn.
    pub fn weight(&self) -> Option<f64> {
        match self {
            Self::ChatCompletion(config) | Self::ChainOfThought(config) => config.weight,
            Self::BestOfN(config) => config.weight,
            Self::MixtureOfN(config) => config.weight,
            Self::DynamicInContextLearning(config) => config.generation.weight,
        }
    }

    /// The variants this one runs first (best-of-n and mixture-of-n).
    pub fn candidates(&self) -> &[String] {
        match self {
            Self::BestOfN(config) => &config.candidates,
            Self::MixtureOfN(config) => &config.candidates,
            Self::ChatCompletion(_) | Self::ChainOfThought(_) | Self::DynamicInContextLearning(_) => &[],
        }
    }

    /// The variant's time limits (for an ensemble, the whole run's).
    pub fn timeouts(&self) -> Option<&VariantTimeouts> {
        match self {
            Self::ChatCompletion(config) | Self::ChainOfThought(config) => config.timeouts.as_ref(),
            Self::BestOfN(config) => config.timeouts.as_ref(),
            Self::MixtureOfN(config) => config.timeouts.as_ref(),
            Self::DynamicInContextLearning(config) => config.generation.timeouts.as_ref(),
        }
    }

    fn timeouts_mut(&mut self) -> &mut Option<VariantTimeouts> {
        match self {
            Self::ChatCompletion(config) | Self::ChainOfThought(config) => &mut config.timeouts,
            Self::BestOfN(config) => &mut config.timeouts,
            Self::MixtureOfN(config) => &mut config.timeouts,
            Self::DynamicInContextLearning(config) => &mut config.generation.timeouts,
        }
    }

    fn timeout_s(&self) -> Option<f64> {
        match self {
            Self::BestOfN(config) => config.timeout_s,
            Self::MixtureOfN(config) => config.timeout_s,
            Self::ChatCompletion(_) | Self::ChainOfThought(_) | Self::DynamicInContextLearning(_) => None,
        }
    }

    /// Every template of the variant's own model call: `(name, key path suffix, file path)`.
    pub(crate) fn template_paths(&self) -> Vec<(String, String, &str)> {
        let prefix = self.prompt_key();
        self.prompt()
            .template_paths()
            .into_iter()
            .map(|(name, suffix, path)| (name, format!("{prefix}{suffix}"), path))
            .collect()
    }

    /// Every file the variant reads: its templates' and a DICL variant's `system_instructions`,
    /// `(key path suffix, file path)`.
    pub(crate) fn file_paths(&self) -> Vec<(String, &str)> {
        let mut paths: Vec<(String, &str)> = self
            .template_paths()
            .into_iter()
            .map(|(_, suffix, path)| (suffix, path))
            .collect();
        if let Self::DynamicInContextLearning(config) = self {
            if let Some(path) = &config.system_instructions {
                paths.push(("system_instructions".to_owned(), path.as_str()));
            }
        }
        paths
    }

    /// The rules that depend on the variant's type: candidates that exist (no cycles, checked
    /// by [`check_variant_graph`]), chain of thought on json functions only, and json mode where
    /// the function type allows it.
    pub(crate) fn check_kind(
        &self,
        key: &str,
        kind: FunctionKind,
        variants: &BTreeMap<String, VariantConfig>,
    ) -> Result<(), ConfigError> {
        if let Self::ChainOfThought(_) = self {
            if kind == FunctionKind::Chat {
                return Err(ConfigError::invalid(
                    format!("{key}.type"),
                    "experimental_chain_of_thought works on json functions only",
                ));
            }
        }
        if let Self::BestOfN(_) | Self::MixtureOfN(_) = self {
            if self.candidates().is_empty() {
                return Err(ConfigError::invalid(
                    format!("{key}.candidates"),
                    "must name at least one variant",
                ));
            }
            for (index, candidate) in self.candidates().iter().enumerate() {
                if !variants.contains_key(candidate) {
                    return Err(ConfigError::invalid(
                        format!("{key}.candidates[{index}]"),
                        format!("variant `{candidate}` is not defined in this function"),
                    ));
                }
            }
        }
        // The judge always answers in JSON, whatever the function's type.
        let json_mode_allowed = kind == FunctionKind::Json || matches!(self, Self::BestOfN(_));
        if !json_mode_allowed && self.prompt().json_mode.is_some() {
            return Err(ConfigError::invalid(
                format!("{key}.{}json_mode", self.prompt_key()),
                "only variants of json functions take json_mode",
            ));
        }
        Ok(())
    }
}

/// Refuse a variant that reaches itself through its candidates (directly or not).
pub(crate) fn check_variant_graph(key: &str, variants: &BTreeMap<String, VariantConfig>) -> Result<(), ConfigError> {
    for start in variants.keys() {
        let mut path = vec![start.as_str()];
        if let Some(cycle) = find_cycle(start, variants, &mut path) {
            return Err(ConfigError::invalid(
                format!("{key}.variants.{start}.candidates"),
                format!("the candidates form a cycle: {}", cycle.join(" -> ")),
            ));
        }
    }
    Ok(())
}

/// Depth-first from the last entry of `path`; the path that returns to `path[0]`, if any.
fn find_cycle<'a>(
    start: &'a str,
    variants: &'a BTreeMap<String, VariantConfig>,
    path: &mut Vec<&'a str>,
) -> Option<Vec<String>> {
    let current = *path.last()?;
    let candidates = variants.get(current).map(VariantConfig::candidates).unwrap_or_default();
    for candidate in candidates {
        if candidate == start {
            let mut cycle: Vec<String> = path.iter().map(|s| (*s).to_owned()).collect();
            cycle.push(candidate.clone());
            return Some(cycle);
        }
        if path.contains(&candidate.as_str()) {
            continue;
        }
        path.push(candidate);
        if let Some(cycle) = find_cycle(start, variants, path) {
            return Some(cycle);
        }
        path.pop();
    }
    None
}

/// The deprecated `timeout_s` of best-of-n and mixture-of-n variants becomes each candidate's
/// `timeouts` (`non_streaming.total_ms` and `streaming.ttft_ms`), as TensorZero does at load; a
/// candidate that already has `timeouts` is an error.
pub(crate) fn propagate_timeout_s(
    key: &str,
    variants: &mut BTreeMap<String, VariantConfig>,
) -> Result<(), ConfigError> {
    let mut assignments: Vec<(String, String, f64)> = Vec::new();
    for (name, variant) in variants.iter() {
        if let Some(seconds) = variant.timeout_s() {
            if !seconds.is_finite() || seconds <= 0.0 {
                return Err(ConfigError::invalid(
                    format!("{key}.variants.{name}.timeout_s"),
                    "must be a positive number",
                ));
            }
            for candidate in variant.candidates() {
                if !assignments.iter().any(|(c, _, _)| c == candidate) {
                    assignments.push((candidate.clone(), name.clone(), seconds));
                }
            }
        }
    }
    for (candidate, owner, seconds) in assignments {
        let Some(target) = variants.get_mut(&candidate) else {
            continue; // reported by the candidate check
        };
        if target.timeouts().is_some() {
            return Err(ConfigError::invalid(
                format!("{key}.variants.{owner}.timeout_s"),
                format!("candidate `{candidate}` already has `timeouts`: drop `timeout_s` or its `timeouts`"),
            ));
        }
        // Saturating float-to-int conversion of a positive number.
        let millis = (seconds * 1000.0).round() as u64;
        *target.timeouts_mut() = Some(VariantTimeouts {
            non_streaming: Some(NonStreamingTimeouts { total_ms: Some(millis) }),
            streaming: Some(StreamingTimeouts {
                ttft_ms: Some(millis),
                total_ms: None,
            }),
        });
    }
    Ok(())
}

#[cfg(test)]
#[path = "variants_tests.rs"]
mod tests;
