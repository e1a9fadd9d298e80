//! Which variant serves an inference: a draw that is deterministic per episode (an episode keeps
//! its variant), weighted candidates first, then fallbacks in order; failed variants drop out.

use crate::config::functions::{CandidateVariants, ExperimentationConfig, FunctionConfig};
use sha2::{Digest, Sha256};
use std::collections::BTreeSet;
use uuid::Uuid;

/// A number in `[0, 1)` fixed by the function and the episode: the first 4 bytes of
/// SHA-256(function name ‖ episode id bytes), big-endian, over 2^32.
pub(crate) fn episode_draw(function_name: &str, episode_id: Uuid) -> f64 {
    let mut hasher = Sha256::new();
    hasher.update(function_name.as_bytes());
    hasher.update(episode_id.as_bytes());
    let digest = hasher.finalize();
    let prefix = [digest[0], digest[1], digest[2], digest[3]];
    f64::from(u32::from_be_bytes(prefix)) / 4_294_967_296.0
}

/// Candidates with positive weights (drawn), then fallbacks (tried in order).
#[derive(Debug, Clone, PartialEq)]
pub struct VariantPolicy {
    candidates: Vec<(String, f64)>,
    fallbacks: Vec<String>,
}

impl VariantPolicy {
    pub fn new(candidates: Vec<(String, f64)>, fallbacks: Vec<String>) -> Self {
        let candidates = candidates.into_iter().filter(|(_, weight)| *weight > 0.0).collect();
        Self { candidates, fallbacks }
    }

    /// The policy a function's config describes:
    /// - `[experimentation]` static: a list is uniform, a table is normalised weights;
    /// - legacy `weight`s (when any is set): > 0 candidate, unset fallback (by name), 0 never;
    /// - neither: every variant uniformly.
    pub(crate) fn from_function(config: &FunctionConfig) -> Self {
        if let Some(ExperimentationConfig::Static(experiment)) = &config.experimentation {
            let candidates = match &experiment.candidate_variants {
                CandidateVariants::List(names) => names.iter().map(|n| (n.clone(), 1.0)).collect(),
                CandidateVariants::Weights(weights) => weights.iter().map(|(n, w)| (n.clone(), *w)).collect(),
            };
            return Self::new(candidates, experiment.fallback_variants.clone());
        }
        let weights: Vec<(&String, Option<f64>)> = config
            .variants
            .iter()
            .map(|(name, variant)| (name, variant.weight()))
            .collect();
        if weights.iter().all(|(_, weight)| weight.is_none()) {
            return Self::new(weights.iter().map(|(n, _)| ((*n).clone(), 1.0)).collect(), Vec::new());
        }
        let candidates = weights
            .iter()
            .filter_map(|(name, weight)| weight.map(|w| ((*name).clone(), w)))
            .collect();
        let fallbacks = weights
            .iter()
            .filter(|(_, weight)| weight.is_none())
            .map(|(name, _)| (*name).clone())
            .collect();
        Self::new(candidates, fallbacks)
    }

    pub fn candidates(&self) -> &[(String, f64)] {
        &self.candidates
    }

    pub fn fallbacks(&self) -> &[String] {
        &self.fallbacks
    }

    /// The variant to try next: drawn from the candidates not in `failed` (weights normalised
    /// over those left), else the first fallback not in `failed`; `None` when all have failed.
    pub fn choose(&self, function_name: &str, episode_id: Uuid, failed: &BTreeSet<String>) -> Option<&str> {
        let left: Vec<&(String, f64)> = self.candidates.iter().filter(|(n, _)| !failed.contains(n)).collect();
        if let Some(name) = pick_weighted(&left, episode_draw(function_name, episode_id)) {
            return Some(name);
        }
        self.fallbacks
            .iter()
            .find(|name| !failed.contains(*name))
            .map(String::as_str)
    }
}

/// The entry whose share of the cumulative weights holds `draw` (in `[0, 1)`).
fn pick_weighted<'a>(entries: &[&'a (String, f64)], draw: f64) -> Option<&'a str> {
    let total: f64 = entries.iter().map(|(_, weight)| weight).sum();
    if total <= 0.0 {
        return None;
    }
    let target = draw * total;
    let mut cumulative = 0.0;
    for (name, weight) in entries {
        cumulative += weight;
        if target < cumulative {
            return Some(name.as_str());
        }
    }
    // Rounding can leave the target at the very end: the last entry owns it.
    entries.last().map(|(name, _)| name.as_str())
}

#[cfg(test)]
#[path = "sampler_tests.rs"]
mod tests;
