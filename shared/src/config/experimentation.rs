//! `[functions.F.experimentation]`: how a function's variant is chosen when the request pins none.
//! `type = "static"` (fixed weights) or `type = "adaptive"` (track-and-stop over a metric's
//! feedback). The legacy types `uniform`, `static_weights` and `track_and_stop` still load: they
//! are converted to these with a warning. Namespaces are refused until requests can name one.

use super::{ConfigError, MetricConfig};
use serde::Deserialize;
use std::collections::{BTreeMap, BTreeSet};

/// A function's experiment, as loaded (legacy types already converted).
#[derive(Debug, Clone, Deserialize, PartialEq)]
#[serde(try_from = "RawExperimentation")]
pub enum ExperimentationConfig {
    Static(StaticExperimentation),
    Adaptive(AdaptiveExperimentation),
}

/// Fixed weights: candidates drawn per episode, then fallbacks in order.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct StaticExperimentation {
    pub candidate_variants: CandidateVariants,
    /// Tried in order once every candidate has failed.
    pub fallback_variants: Vec<String>,
    /// Legacy `uniform` naming no variant: every variant of the function, uniformly.
    pub every_variant: bool,
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

/// Track-and-stop over `metric`: round-robin until every candidate has `min_samples_per_variant`
/// feedback rows, then sampling probabilities from the optimal allocation, until the stopping
/// rule names a winner.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AdaptiveExperimentation {
    pub metric: String,
    pub candidate_variants: Vec<String>,
    #[serde(default)]
    pub fallback_variants: Vec<String>,
    #[serde(default = "default_min_samples")]
    pub min_samples_per_variant: u64,
    #[serde(default = "default_delta")]
    pub delta: f64,
    #[serde(default)]
    pub epsilon: f64,
    #[serde(default = "default_update_period_s")]
    pub update_period_s: u64,
    #[serde(default)]
    pub min_prob: f64,
    #[serde(default = "default_max_samples")]
    pub max_samples_per_variant: u64,
    #[serde(default)]
    pub algorithm: AdaptiveAlgorithm,
    /// Refused at validation (see the module doc).
    #[serde(default)]
    pub namespaces: Option<toml::Table>,
}

/// `algorithm`: only `track_and_stop`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum AdaptiveAlgorithm {
    #[default]
    TrackAndStop,
}

fn default_min_samples() -> u64 {
    10
}
fn default_delta() -> f64 {
    0.05
}
fn default_update_period_s() -> u64 {
    300
}
fn default_max_samples() -> u64 {
    10_000
}

/// The table as written: current and legacy types.
#[derive(Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
enum RawExperimentation {
    Static(RawStatic),
    Adaptive(AdaptiveExperimentation),
    Uniform(RawUniform),
    StaticWeights(RawStaticWeights),
    TrackAndStop(RawTrackAndStop),
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawStatic {
    #[serde(default)]
    candidate_variants: CandidateVariants,
    #[serde(default)]
    fallback_variants: Vec<String>,
    #[serde(default)]
    namespaces: Option<toml::Table>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawUniform {
    #[serde(default)]
    candidate_variants: Option<Vec<String>>,
    #[serde(default)]
    fallback_variants: Option<Vec<String>>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawStaticWeights {
    candidate_variants: BTreeMap<String, f64>,
    #[serde(default)]
    fallback_variants: Vec<String>,
}

/// Legacy `track_and_stop`: the adaptive keys without `algorithm`.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawTrackAndStop {
    metric: String,
    candidate_variants: Vec<String>,
    #[serde(default)]
    fallback_variants: Vec<String>,
    #[serde(default = "default_min_samples")]
    min_samples_per_variant: u64,
    #[serde(default = "default_delta")]
    delta: f64,
    #[serde(default)]
    epsilon: f64,
    #[serde(default = "default_update_period_s")]
    update_period_s: u64,
    #[serde(default)]
    min_prob: f64,
    #[serde(default = "default_max_samples")]
    max_samples_per_variant: u64,
}

fn legacy(name: &str, now: &str) {
    tracing::warn!(
        "experimentation `type = \"{name}\"` is deprecated: it is loaded as `type = \"{now}\"` (write that instead)"
    );
}

impl TryFrom<RawExperimentation> for ExperimentationConfig {
    type Error = ConfigError;

    fn try_from(raw: RawExperimentation) -> Result<Self, ConfigError> {
        Ok(match raw {
            RawExperimentation::Static(raw) => {
                refuse_namespaces(raw.namespaces.as_ref())?;
                Self::Static(StaticExperimentation {
                    candidate_variants: raw.candidate_variants,
                    fallback_variants: raw.fallback_variants,
                    every_variant: false,
                })
            }
            RawExperimentation::Adaptive(adaptive) => {
                refuse_namespaces(adaptive.namespaces.as_ref())?;
                Self::Adaptive(adaptive)
            }
            RawExperimentation::Uniform(raw) => {
                legacy("uniform", "static");
                let every_variant = raw.candidate_variants.is_none() && raw.fallback_variants.is_none();
                Self::Static(StaticExperimentation {
                    candidate_variants: CandidateVariants::List(raw.candidate_variants.unwrap_or_default()),
                    fallback_variants: raw.fallback_variants.unwrap_or_default(),
                    every_variant,
                })
            }
            RawExperimentation::StaticWeights(raw) => {
                legacy("static_weights", "static");
                Self::Static(StaticExperimentation {
                    candidate_variants: CandidateVariants::Weights(raw.candidate_variants),
                    fallback_variants: raw.fallback_variants,
                    every_variant: false,
                })
            }
            RawExperimentation::TrackAndStop(raw) => {
                legacy("track_and_stop", "adaptive");
                Self::Adaptive(AdaptiveExperimentation {
                    metric: raw.metric,
                    candidate_variants: raw.candidate_variants,
                    fallback_variants: raw.fallback_variants,
                    min_samples_per_variant: raw.min_samples_per_variant,
                    delta: raw.delta,
                    epsilon: raw.epsilon,
                    update_period_s: raw.update_period_s,
                    min_prob: raw.min_prob,
                    max_samples_per_variant: raw.max_samples_per_variant,
                    algorithm: AdaptiveAlgorithm::TrackAndStop,
                    namespaces: None,
                })
            }
        })
    }
}

fn refuse_namespaces(namespaces: Option<&toml::Table>) -> Result<(), ConfigError> {
    match namespaces {
        Some(_) => Err(ConfigError::Parse(
            "`namespaces` under [experimentation] is not supported yet (requests cannot name a namespace)".into(),
        )),
        None => Ok(()),
    }
}

impl ExperimentationConfig {
    /// The adaptive experiment, if this is one.
    pub fn adaptive(&self) -> Option<&AdaptiveExperimentation> {
        match self {
            Self::Adaptive(adaptive) => Some(adaptive),
            Self::Static(_) => None,
        }
    }

    /// Check the names against the function's `variants` and, for adaptive, the `metrics`.
    pub(crate) fn validate(
        &self,
        key: &str,
        variants: &BTreeSet<&str>,
        metrics: &BTreeMap<String, MetricConfig>,
    ) -> Result<(), ConfigError> {
        match self {
            Self::Static(config) => config.validate(key, variants),
            Self::Adaptive(config) => config.validate(key, variants, metrics),
        }
    }
}

/// `(key, name)` of every listed variant: each must exist, and none may be listed twice.
fn check_listed(entries: Vec<(String, String)>, variants: &BTreeSet<&str>) -> Result<(), ConfigError> {
    let mut seen = BTreeSet::new();
    for (entry_key, name) in entries {
        if !variants.contains(name.as_str()) {
            return Err(ConfigError::invalid(
                entry_key,
                format!("variant `{name}` is not defined"),
            ));
        }
        if !seen.insert(name.clone()) {
            return Err(ConfigError::invalid(
                entry_key,
                format!("variant `{name}` is listed twice"),
            ));
        }
    }
    Ok(())
}

fn listed(key: &str, field: &str, names: &[String]) -> Vec<(String, String)> {
    names
        .iter()
        .enumerate()
        .map(|(i, n)| (format!("{key}.{field}[{i}]"), n.clone()))
        .collect()
}

impl StaticExperimentation {
    fn validate(&self, key: &str, variants: &BTreeSet<&str>) -> Result<(), ConfigError> {
        if self.every_variant {
            return Ok(());
        }
        let candidates = match &self.candidate_variants {
            CandidateVariants::List(names) => listed(key, "candidate_variants", names),
            CandidateVariants::Weights(weights) => {
                for (name, weight) in weights {
                    if !weight.is_finite() || *weight < 0.0 {
                        return Err(ConfigError::invalid(
                            format!("{key}.candidate_variants.{name}"),
                            "weights must be finite numbers >= 0",
                        ));
                    }
                }
                if !weights.is_empty() && weights.values().all(|w| *w == 0.0) {
                    return Err(ConfigError::invalid(
                        format!("{key}.candidate_variants"),
                        "at least one weight must be positive",
                    ));
                }
                weights
                    .keys()
                    .map(|n| (format!("{key}.candidate_variants.{n}"), n.clone()))
                    .collect()
            }
        };
        let mut entries = candidates;
        entries.extend(listed(key, "fallback_variants", &self.fallback_variants));
        if entries.is_empty() {
            return Err(ConfigError::invalid(
                key,
                "must name at least one variant in candidate_variants or fallback_variants",
            ));
        }
        check_listed(entries, variants)
    }
}

impl AdaptiveExperimentation {
    fn validate(
        &self,
        key: &str,
        variants: &BTreeSet<&str>,
        metrics: &BTreeMap<String, MetricConfig>,
    ) -> Result<(), ConfigError> {
        if !metrics.contains_key(&self.metric) {
            return Err(ConfigError::invalid(
                format!("{key}.metric"),
                format!("metric `{}` is not defined in [metrics]", self.metric),
            ));
        }
        if self.candidate_variants.is_empty() {
            return Err(ConfigError::invalid(
                format!("{key}.candidate_variants"),
                "must name at least one variant",
            ));
        }
        let mut entries = listed(key, "candidate_variants", &self.candidate_variants);
        entries.extend(listed(key, "fallback_variants", &self.fallback_variants));
        check_listed(entries, variants)?;
        let rules: [(&str, bool, &str); 6] = [
            (
                "min_samples_per_variant",
                self.min_samples_per_variant >= 1,
                "must be at least 1",
            ),
            (
                "delta",
                self.delta > 0.0 && self.delta < 1.0,
                "must be strictly between 0 and 1",
            ),
            (
                "epsilon",
                self.epsilon.is_finite() && self.epsilon >= 0.0,
                "must be a finite number >= 0",
            ),
            ("update_period_s", self.update_period_s >= 1, "must be at least 1"),
            (
                "min_prob",
                self.min_prob.is_finite()
                    && self.min_prob >= 0.0
                    && self.min_prob * self.candidate_variants.len() as f64 <= 1.0 + 1e-9,
                "must be >= 0, and min_prob × the number of candidate_variants must be at most 1",
            ),
            (
                "max_samples_per_variant",
                self.max_samples_per_variant >= self.min_samples_per_variant,
                "must be at least min_samples_per_variant",
            ),
        ];
        match rules.iter().find(|(_, ok, _)| !ok) {
            Some((field, _, message)) => Err(ConfigError::invalid(format!("{key}.{field}"), *message)),
            None => Ok(()),
        }
    }

    /// Every variant the experiment may serve: candidates, then fallbacks.
    pub fn allowed_variants(&self) -> impl Iterator<Item = &String> {
        self.candidate_variants.iter().chain(&self.fallback_variants)
    }
}

#[cfg(test)]
#[path = "experimentation_tests.rs"]
pub(crate) mod tests;
