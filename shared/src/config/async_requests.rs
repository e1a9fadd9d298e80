//! `[async_requests]` (how long requests and outputs are kept) and `[webhooks]` (whether a
//! project without a webhook secret gets unsigned webhooks).

use super::ConfigError;
use serde::Deserialize;
use std::time::Duration;

/// The default webhook retry schedule: the wait after failed attempt n (1-based) before attempt
/// n + 1; after the last, the delivery fails.
pub const DEFAULT_WEBHOOK_RETRY_DELAYS: [Duration; 7] = [
    Duration::from_secs(10),
    Duration::from_secs(5 * 60),
    Duration::from_secs(30 * 60),
    Duration::from_secs(2 * 3600),
    Duration::from_secs(5 * 3600),
    Duration::from_secs(10 * 3600),
    Duration::from_secs(10 * 3600),
];

#[derive(Debug, Clone, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct AsyncRequestsConfig {
    /// Days a request's status and output are kept after submission.
    #[serde(default = "default_retention_days")]
    pub retention_days: u32,
}

fn default_retention_days() -> u32 {
    7
}

impl Default for AsyncRequestsConfig {
    fn default() -> Self {
        Self {
            retention_days: default_retention_days(),
        }
    }
}

impl AsyncRequestsConfig {
    pub(crate) fn validate(&self) -> Result<(), ConfigError> {
        if !(1..=365).contains(&self.retention_days) {
            return Err(ConfigError::invalid(
                "async_requests.retention_days",
                "must be between 1 and 365",
            ));
        }
        Ok(())
    }
}

#[derive(Debug, Clone, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct WebhooksConfig {
    /// Send webhooks unsigned for projects that have no webhook secret. Off by default: such a
    /// project's deliveries fail (and are retried) until it creates a secret.
    #[serde(default)]
    pub allow_unsigned: bool,
    /// Seconds to wait after each failed delivery attempt before the next (after the last, the
    /// delivery fails). Default: 10 s, 5 min, 30 min, 2 h, 5 h, 10 h, 10 h.
    #[serde(default = "default_retry_delays_s")]
    pub retry_delays_s: Vec<u64>,
}

fn default_retry_delays_s() -> Vec<u64> {
    DEFAULT_WEBHOOK_RETRY_DELAYS
        .iter()
        .map(|delay| delay.as_secs())
        .collect()
}

impl Default for WebhooksConfig {
    fn default() -> Self {
        Self {
            allow_unsigned: false,
            retry_delays_s: default_retry_delays_s(),
        }
    }
}

impl WebhooksConfig {
    pub(crate) fn validate(&self) -> Result<(), ConfigError> {
        if self.retry_delays_s.len() > 20 || self.retry_delays_s.iter().any(|s| !(1..=86_400).contains(s)) {
            return Err(ConfigError::invalid(
                "webhooks.retry_delays_s",
                "at most 20 delays, each from 1 to 86400 seconds",
            ));
        }
        Ok(())
    }

    /// The retry schedule.
    pub(crate) fn retry_delays(&self) -> Vec<std::time::Duration> {
        self.retry_delays_s
            .iter()
            .map(|s| std::time::Duration::from_secs(*s))
            .collect()
    }
}
