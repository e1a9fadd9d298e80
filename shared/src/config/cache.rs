//! `[gateway.cache]`: the model-response cache of the `/inference` endpoint.
//!
//! ```toml
//! [gateway.cache]
//! ttl_s = 86400            # how long an entry is served (1 s .. 30 days)
//! enabled = "write_only"   # the mode when a request gives none: on | off | read_only | write_only
//! ```

use super::ConfigError;
use serde::{Deserialize, Serialize};

/// The longest entry lifetime: large entries' S3 objects expire after 30 days (template.yaml).
pub(crate) const MAX_CACHE_TTL_S: u64 = 30 * 24 * 3600;

#[derive(Debug, Clone, Deserialize, PartialEq, Eq)]
#[serde(deny_unknown_fields)]
pub struct CacheConfig {
    /// Seconds an entry is served after it was written.
    #[serde(default = "default_ttl_s")]
    pub ttl_s: u64,
    /// The mode of a request that does not choose one (`cache_options.enabled`).
    #[serde(default)]
    pub enabled: CacheMode,
}

fn default_ttl_s() -> u64 {
    86_400
}

impl Default for CacheConfig {
    fn default() -> Self {
        Self {
            ttl_s: default_ttl_s(),
            enabled: CacheMode::default(),
        }
    }
}

impl CacheConfig {
    pub(crate) fn validate(&self) -> Result<(), ConfigError> {
        if !(1..=MAX_CACHE_TTL_S).contains(&self.ttl_s) {
            return Err(ConfigError::invalid(
                "gateway.cache.ttl_s",
                format!("must be 1 to {MAX_CACHE_TTL_S} seconds (30 days)"),
            ));
        }
        Ok(())
    }
}

/// Whether a call reads cached responses and whether it writes new ones.
#[derive(Debug, Clone, Copy, Default, Deserialize, Serialize, PartialEq, Eq, utoipa::ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum CacheMode {
    /// Read and write.
    On,
    /// Neither.
    Off,
    /// Serve cached responses, never write.
    ReadOnly,
    /// Write responses, never serve them (the default, as TensorZero's documentation gives it).
    #[default]
    WriteOnly,
}

impl CacheMode {
    pub fn reads(self) -> bool {
        matches!(self, Self::On | Self::ReadOnly)
    }

    pub fn writes(self) -> bool {
        matches!(self, Self::On | Self::WriteOnly)
    }

    /// The mode of a dry run, which never writes: `on` reads only, `write_only` does nothing.
    pub(crate) fn without_writes(self) -> Self {
        match self {
            Self::On | Self::ReadOnly => Self::ReadOnly,
            Self::Off | Self::WriteOnly => Self::Off,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::Config;

    #[test]
    fn defaults_and_values() {
        let config = Config::from_toml("").unwrap();
        assert_eq!(config.gateway.cache, CacheConfig::default());
        assert_eq!(config.gateway.cache.ttl_s, 86_400);
        assert_eq!(config.gateway.cache.enabled, CacheMode::WriteOnly);
        let config = Config::from_toml("[gateway.cache]\nttl_s = 60\nenabled = \"read_only\"\n").unwrap();
        assert_eq!(config.gateway.cache.ttl_s, 60);
        assert_eq!(config.gateway.cache.enabled, CacheMode::ReadOnly);
    }

    #[test]
    fn bad_values_name_the_key() {
        for (text, key) in [
            ("[gateway.cache]\nttl_s = 0\n", "gateway.cache.ttl_s"),
            ("[gateway.cache]\nttl_s = 2592001\n", "gateway.cache.ttl_s"),
            ("[gateway.cache]\nenabled = \"sometimes\"\n", "gateway.cache.enabled"),
            ("[gateway.cache]\nttl = 5\n", "gateway.cache"),
        ] {
            let err = Config::from_toml(text).unwrap_err().to_string();
            assert!(err.contains(key), "{text}: {err}");
        }
    }

    #[test]
    fn modes_read_write_and_dry_runs_never_write() {
        let all = [CacheMode::On, CacheMode::Off, CacheMode::ReadOnly, CacheMode::WriteOnly];
        let table: Vec<(bool, bool)> = all.iter().map(|m| (m.reads(), m.writes())).collect();
        assert_eq!(table, [(true, true), (false, false), (true, false), (false, true)]);
        for mode in all {
            assert!(!mode.without_writes().writes());
            assert_eq!(mode.without_writes().reads(), mode.reads());
        }
    }
}
