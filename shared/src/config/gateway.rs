//! `[gateway]`: settings that apply to every model.

use super::cache::CacheConfig;
use super::ConfigError;
use serde::Deserialize;

#[derive(Debug, Clone, Deserialize, PartialEq, Default)]
#[serde(deny_unknown_fields)]
pub struct GatewayConfig {
    #[serde(default)]
    pub retries: RetryConfig,
    #[serde(default)]
    pub cache: CacheConfig,
}

/// Retries of one provider before falling back to the next, on 408/429/5xx and connection errors.
#[derive(Debug, Clone, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct RetryConfig {
    /// The OpenAI-style routes (`/v1/…`, batches, async requests).
    #[serde(default = "default_max_retries")]
    pub max_retries: u32,
    /// TensorZero's routes (`/inference`, `/openai/v1/…`, `/batch_inference`): TensorZero makes
    /// one attempt per provider (a variant's `retries` retry the whole variant), so 0 by default.
    #[serde(default)]
    pub inference_max_retries: u32,
    #[serde(default = "default_initial_backoff_ms")]
    pub initial_backoff_ms: u64,
    #[serde(default = "default_max_backoff_ms")]
    pub max_backoff_ms: u64,
    /// The longest `Retry-After` the gateway waits for; a longer one moves on to the next provider.
    #[serde(default = "default_max_retry_after_ms")]
    pub max_retry_after_ms: u64,
}

fn default_max_retries() -> u32 {
    2
}
fn default_initial_backoff_ms() -> u64 {
    200
}
fn default_max_backoff_ms() -> u64 {
    5_000
}
fn default_max_retry_after_ms() -> u64 {
    20_000
}

impl Default for RetryConfig {
    fn default() -> Self {
        Self {
            max_retries: default_max_retries(),
            inference_max_retries: 0,
            initial_backoff_ms: default_initial_backoff_ms(),
            max_backoff_ms: default_max_backoff_ms(),
            max_retry_after_ms: default_max_retry_after_ms(),
        }
    }
}

impl GatewayConfig {
    pub(crate) fn validate(&self) -> Result<(), ConfigError> {
        let r = &self.retries;
        for (key, retries) in [
            ("gateway.retries.max_retries", r.max_retries),
            ("gateway.retries.inference_max_retries", r.inference_max_retries),
        ] {
            if retries > 10 {
                return Err(ConfigError::invalid(key, "must be at most 10"));
            }
        }
        if r.initial_backoff_ms == 0 || r.initial_backoff_ms > r.max_backoff_ms {
            return Err(ConfigError::invalid(
                "gateway.retries.initial_backoff_ms",
                "must be positive and at most max_backoff_ms",
            ));
        }
        self.cache.validate()
    }
}
