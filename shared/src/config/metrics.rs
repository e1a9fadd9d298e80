//! `[metrics.M]`: what feedback may be recorded against inferences or episodes.

use super::ConfigError;
use serde::Deserialize;

#[derive(Debug, Clone, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct MetricConfig {
    #[serde(rename = "type")]
    pub kind: MetricKind,
    pub level: MetricLevel,
    pub optimize: MetricOptimize,
}

#[derive(Debug, Clone, Copy, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "snake_case")]
pub enum MetricKind {
    Boolean,
    Float,
}

#[derive(Debug, Clone, Copy, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "snake_case")]
pub enum MetricLevel {
    Inference,
    Episode,
}

#[derive(Debug, Clone, Copy, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "snake_case")]
pub enum MetricOptimize {
    Max,
    Min,
}

/// Feedback kinds that are not metrics; a metric may not take their names.
const RESERVED_METRIC_NAMES: [&str; 2] = ["comment", "demonstration"];

pub(crate) fn validate_metric_name(name: &str) -> Result<(), ConfigError> {
    let key = format!("metrics.{name}");
    if name.is_empty() || name.len() > 256 {
        return Err(ConfigError::invalid(key, "metric names must be 1 to 256 characters"));
    }
    if RESERVED_METRIC_NAMES.contains(&name) || name.starts_with("tensorzero::") {
        return Err(ConfigError::invalid(key, "this name is reserved"));
    }
    Ok(())
}
