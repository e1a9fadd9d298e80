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
//! Sections are separate modules: `[functions.*]` (TensorZero-style functions with variants,
//! templates and schemas), `[tools.*]` and `[metrics.*]` sit beside `[models.*]`. Unknown keys are
//! rejected with the key's path and position; references are checked after parsing. Files that
//! functions and tools reference (templates, schemas) are read through [`ConfigFiles`] and
//! compiled by the functions layer (`app::load_config` reads and compiles).

mod async_requests;
mod batches;
mod cache;
mod chat_completion;
mod credentials;
mod dicl;
pub mod experimentation;
mod extras;
mod files;
mod function_checks;
pub mod functions;
mod gateway;
mod http_provider;
mod lmi;
mod load;
mod metrics;
mod models;
mod shorthand;
mod tools;
mod variants;

pub use async_requests::DEFAULT_WEBHOOK_RETRY_DELAYS;
pub(crate) use async_requests::{AsyncRequestsConfig, WebhooksConfig};
pub(crate) use batches::BatchesConfig;
pub(crate) use cache::{CacheConfig, CacheMode};
pub(crate) use credentials::CredentialLocation;
pub(crate) use dicl::{DiclConfig, DEFAULT_SYSTEM_INSTRUCTIONS};
pub(crate) use extras::{ExtraBodyEntry, ExtraHeaderEntry};
pub(crate) use files::normalise_config_path;
#[cfg(feature = "aws")]
pub(crate) use files::BlobConfigFiles;
#[cfg(any(feature = "aws", test))]
pub(crate) use files::ConfigFiles;
#[cfg(test)]
pub(crate) use files::{BundledConfigFiles, LocalConfigFiles};
pub(crate) use functions::FunctionConfig;
#[cfg(test)]
pub(crate) use functions::FunctionKind;
pub(crate) use gateway::GatewayConfig;
pub use gateway::RetryConfig;
pub(crate) use lmi::{
    chat_template_environment, BuiltInChatTemplate, ChatTemplateRaised, LmiApiConfig, LmiOutputFormatter,
    LmiProviderConfig, LmiSchema, SageMakerProviderConfig,
};
#[cfg(any(feature = "aws", test))]
pub(crate) use load::read_config;
pub(crate) use load::{read_bundled_config, read_local_config, ConfigSources};
pub(crate) use metrics::{MetricConfig, MetricKind, MetricLevel, MetricOptimize};
#[cfg(test)]
pub(crate) use models::MaxTokensField;
pub(crate) use models::{BatchMode, DummyProviderConfig, ModelConfig, OpenAiProviderConfig, ProviderConfig};
#[cfg(test)]
pub(crate) use shorthand::ModelLookupError;
pub(crate) use shorthand::{names_a_model, shorthand_model};
pub(crate) use tools::ToolConfig;

use serde::Deserialize;
use std::collections::BTreeMap;

/// The whole configuration file.
#[derive(Debug, Clone, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct Config {
    #[serde(default)]
    pub gateway: GatewayConfig,
    #[serde(default)]
    pub batches: BatchesConfig,
    #[serde(default)]
    pub async_requests: AsyncRequestsConfig,
    #[serde(default)]
    pub webhooks: WebhooksConfig,
    /// The LMI API Nimbus serves (`/invocations`, `/predictions/{model}`).
    #[serde(default)]
    pub lmi_api: LmiApiConfig,
    #[serde(default)]
    pub models: BTreeMap<String, ModelConfig>,
    #[serde(default)]
    pub functions: BTreeMap<String, FunctionConfig>,
    #[serde(default)]
    pub tools: BTreeMap<String, ToolConfig>,
    #[serde(default)]
    pub metrics: BTreeMap<String, MetricConfig>,
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
    /// Parse and validate TOML text (files it references are not read: see [`read_config`]).
    pub fn from_toml(text: &str) -> Result<Self, ConfigError> {
        let deserializer = toml::Deserializer::parse(text).map_err(|e| ConfigError::Parse(e.to_string()))?;
        let mut config: Config = serde_path_to_error::deserialize(deserializer).map_err(|e| {
            let key = e.path().to_string();
            let message = e.into_inner().to_string();
            if key.is_empty() || key == "." {
                ConfigError::Parse(message)
            } else {
                ConfigError::invalid(key, message)
            }
        })?;
        for (name, function) in &mut config.functions {
            variants::propagate_timeout_s(&format!("functions.{name}"), &mut function.variants)?;
        }
        config.validate()?;
        Ok(config)
    }

    /// Check every cross-reference and value range.
    pub fn validate(&self) -> Result<(), ConfigError> {
        self.gateway.validate()?;
        self.batches.validate()?;
        self.async_requests.validate()?;
        self.webhooks.validate()?;
        self.lmi_api.validate(&self.models)?;
        for (name, model) in &self.models {
            model.validate(name)?;
        }
        for (name, tool) in &self.tools {
            tool.validate(name)?;
        }
        for name in self.metrics.keys() {
            metrics::validate_metric_name(name)?;
        }
        let context = function_checks::FunctionContext {
            models: &self.models,
            tools: &self.tools,
            metrics: &self.metrics,
        };
        for (name, function) in &self.functions {
            function.validate(name, &context)?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests;

#[cfg(test)]
mod function_tests;
