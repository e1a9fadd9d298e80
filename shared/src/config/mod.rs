//! Gateway configuration: a TOML file in the spirit of TensorZero's.
//!
//! ```toml
//! [gateway.retries]
//! max_retries = 2
//!
//! [models.my-model]
//! routing = ["primary", "backup"]          # ordered fallback
//!
//! [models.my-model.providers.primary]
//! type = "openai"
//! model_name = "gpt-4o-mini"
//! api_key_location = "env::OPENAI_API_KEY"
//! ```
//!
//! Sections are separate modules so later ones (`[functions.*]` with variants, templates and
//! tools) slot in beside `[models.*]` without touching the rest. Unknown keys are rejected with
//! the key's name and position; references are checked after parsing.

mod batches;
mod credentials;
mod gateway;
mod models;

pub use batches::BatchesConfig;
pub use credentials::CredentialLocation;
pub use gateway::{GatewayConfig, RetryConfig};
pub use models::{DummyProviderConfig, ModelConfig, OpenAiProviderConfig, ProviderConfig};

use serde::Deserialize;
use std::collections::BTreeMap;
use std::path::Path;

/// The whole configuration file.
#[derive(Debug, Clone, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct Config {
    #[serde(default)]
    pub gateway: GatewayConfig,
    #[serde(default)]
    pub batches: BatchesConfig,
    #[serde(default)]
    pub models: BTreeMap<String, ModelConfig>,
}

/// Why a configuration was rejected.
#[derive(Debug, thiserror::Error, PartialEq)]
pub enum ConfigError {
    #[error("cannot read config file {path}: {message}")]
    Read { path: String, message: String },
    #[error("invalid config: {0}")]
    Parse(String),
    #[error("invalid config at `{key}`: {message}")]
    Invalid { key: String, message: String },
}

impl ConfigError {
    pub(crate) fn invalid(key: impl Into<String>, message: impl Into<String>) -> Self {
        Self::Invalid {
            key: key.into(),
            message: message.into(),
        }
    }
}

impl Config {
    /// Parse and validate TOML text.
    pub fn from_toml(text: &str) -> Result<Self, ConfigError> {
        let config: Config = toml::from_str(text).map_err(|e| ConfigError::Parse(e.to_string()))?;
        config.validate()?;
        Ok(config)
    }

    /// Read, parse and validate a file.
    pub fn from_path(path: &Path) -> Result<Self, ConfigError> {
        let text = std::fs::read_to_string(path).map_err(|e| ConfigError::Read {
            path: path.display().to_string(),
            message: e.to_string(),
        })?;
        Self::from_toml(&text)
    }

    /// Check every cross-reference and value range.
    pub fn validate(&self) -> Result<(), ConfigError> {
        self.gateway.validate()?;
        self.batches.validate()?;
        for (name, model) in &self.models {
            model.validate(name)?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests;
