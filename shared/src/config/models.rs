//! `[models.NAME]` and `[models.NAME.providers.P]`.

use super::extras::{check_extra_body, check_extra_headers, extra_body_array, headers_table_or_array};
use super::http_provider::{check_http_url, check_timeouts, default_connect_timeout_ms, default_timeout_ms};
use super::lmi::{LmiProviderConfig, SageMakerProviderConfig};
use super::{ConfigError, CredentialLocation, ExtraBodyEntry, ExtraHeaderEntry};
use serde::Deserialize;
use std::collections::BTreeMap;

/// One model: the providers that serve it, tried in `routing` order.
#[derive(Debug, Clone, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct ModelConfig {
    pub routing: Vec<String>,
    pub providers: BTreeMap<String, ProviderConfig>,
    /// The most batch requests of this model in flight at once, across every worker.
    #[serde(default)]
    pub max_concurrency: Option<u32>,
}

/// A provider of a model; `type` selects the kind.
#[derive(Debug, Clone, Deserialize, PartialEq)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum ProviderConfig {
    /// Any OpenAI-compatible server: OpenAI, vLLM, TGI, Ollama, Together…
    Openai(OpenAiProviderConfig),
    /// Deterministic answers with no network, for local use and tests.
    Dummy(DummyProviderConfig),
    /// A DJL Serving / LMI container over HTTP.
    Lmi(LmiProviderConfig),
    /// A SageMaker endpoint running an LMI container, through the AWS SDK.
    Sagemaker(SageMakerProviderConfig),
}

impl ProviderConfig {
    /// The provider's `type` as written in the configuration (what TensorZero reports as a
    /// model call's `provider_type`).
    pub(crate) fn type_name(&self) -> &'static str {
        match self {
            Self::Openai(_) => "openai",
            Self::Dummy(_) => "dummy",
            Self::Lmi(_) => "lmi",
            Self::Sagemaker(_) => "sagemaker",
        }
    }
}

#[derive(Debug, Clone, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct OpenAiProviderConfig {
    /// The model name the upstream server expects.
    pub model_name: String,
    /// Base URL up to and including `/v1`.
    #[serde(default = "default_api_base")]
    pub api_base: String,
    #[serde(default = "default_openai_key")]
    pub api_key_location: CredentialLocation,
    /// Whole-request timeout (for streams: until the first byte, then between chunks).
    #[serde(default = "default_timeout_ms")]
    pub timeout_ms: u64,
    #[serde(default = "default_connect_timeout_ms")]
    pub connect_timeout_ms: u64,
    /// Edits of every chat body sent upstream: after a variant's, before the request's own.
    #[serde(default, deserialize_with = "extra_body_array")]
    pub extra_body: Vec<ExtraBodyEntry>,
    /// Headers set or removed on every upstream request (chat and embeddings), after a
    /// variant's and before the request's own. Written as a table `{ name = "value" }` or as
    /// TensorZero's array `[{ name, value | delete = true }]`.
    #[serde(default, deserialize_with = "headers_table_or_array")]
    pub extra_headers: Vec<ExtraHeaderEntry>,
    /// How `/v1/batches` jobs of this provider run: on Nimbus's own workers (`workers`, the
    /// default) or as a batch of the upstream's own OpenAI Batch API (`native`).
    #[serde(default)]
    pub batch: BatchMode,
    /// The body key of the token cap: `max_completion_tokens` (OpenAI's, and what its reasoning
    /// models require) or `max_tokens` (for OpenAI-compatible servers that know only that one).
    /// Unset: `/inference` sends `max_completion_tokens` (as TensorZero's `openai` provider does),
    /// the OpenAI routes keep the client's spelling.
    #[serde(default)]
    pub max_tokens_field: Option<MaxTokensField>,
}

/// Which key carries the token cap upstream.
#[derive(Debug, Clone, Copy, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "snake_case")]
pub enum MaxTokensField {
    MaxCompletionTokens,
    MaxTokens,
}

impl MaxTokensField {
    pub(crate) fn key(self) -> &'static str {
        match self {
            Self::MaxCompletionTokens => "max_completion_tokens",
            Self::MaxTokens => "max_tokens",
        }
    }
}

/// Where the requests of a batch job are answered.
#[derive(Debug, Clone, Copy, Default, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "snake_case")]
pub enum BatchMode {
    /// Nimbus's batch workers call the provider's synchronous API line by line.
    #[default]
    Workers,
    /// The lines go to the upstream's OpenAI Batch API (`/files` + `/batches`) as one job.
    Native,
}

impl OpenAiProviderConfig {
    /// OpenAI itself with every default: what the `openai::MODEL` shorthand stands for.
    pub(crate) fn for_model(model_name: &str) -> Self {
        Self {
            model_name: model_name.to_owned(),
            api_base: default_api_base(),
            api_key_location: default_openai_key(),
            timeout_ms: default_timeout_ms(),
            connect_timeout_ms: default_connect_timeout_ms(),
            extra_body: Vec::new(),
            extra_headers: Vec::new(),
            batch: BatchMode::Workers,
            max_tokens_field: None,
        }
    }
}

fn default_api_base() -> String {
    "https://api.openai.com/v1".to_owned()
}
fn default_openai_key() -> CredentialLocation {
    CredentialLocation::Env("OPENAI_API_KEY".to_owned())
}
#[derive(Debug, Clone, Deserialize, PartialEq, Default)]
#[serde(deny_unknown_fields)]
pub struct DummyProviderConfig {
    /// Added before every answer.
    #[serde(default)]
    pub latency_ms: u64,
    /// When set, every call fails as if the provider answered this HTTP status.
    #[serde(default)]
    pub fail_with_status: Option<u16>,
    /// Vector length when the request gives no `dimensions`.
    #[serde(default = "default_dimensions")]
    pub embedding_dimensions: usize,
    /// Applied to the body the dummy records as its `raw_request` (accepted so that configs
    /// written for a real provider load unchanged).
    #[serde(default, deserialize_with = "extra_body_array")]
    pub extra_body: Vec<ExtraBodyEntry>,
    /// Checked, then dropped: the dummy makes no HTTP call.
    #[serde(default, deserialize_with = "headers_table_or_array")]
    pub extra_headers: Vec<ExtraHeaderEntry>,
}

impl DummyProviderConfig {
    /// No latency, no failure, default dimensions: what the `dummy::MODEL` shorthand stands for.
    pub fn standard() -> Self {
        Self {
            latency_ms: 0,
            fail_with_status: None,
            embedding_dimensions: default_dimensions(),
            extra_body: Vec::new(),
            extra_headers: Vec::new(),
        }
    }
}

fn default_dimensions() -> usize {
    16
}

impl ModelConfig {
    pub(crate) fn validate(&self, name: &str) -> Result<(), ConfigError> {
        let key = format!("models.{name}");
        if name.is_empty() || name.len() > 256 {
            return Err(ConfigError::invalid(&key, "model names must be 1 to 256 characters"));
        }
        if self.max_concurrency == Some(0) {
            return Err(ConfigError::invalid(
                format!("{key}.max_concurrency"),
                "must be at least 1 (leave it out for no limit)",
            ));
        }
        if self.routing.is_empty() {
            return Err(ConfigError::invalid(
                format!("{key}.routing"),
                "must name at least one provider",
            ));
        }
        for (index, provider) in self.routing.iter().enumerate() {
            if !self.providers.contains_key(provider) {
                return Err(ConfigError::invalid(
                    format!("{key}.routing[{index}]"),
                    format!("provider `{provider}` is not defined in [{key}.providers]"),
                ));
            }
            if self.routing[..index].contains(provider) {
                return Err(ConfigError::invalid(
                    format!("{key}.routing[{index}]"),
                    format!("provider `{provider}` is listed twice"),
                ));
            }
        }
        for (provider, config) in &self.providers {
            let provider_key = format!("{key}.providers.{provider}");
            if !self.routing.contains(provider) {
                return Err(ConfigError::invalid(
                    &provider_key,
                    format!("provider `{provider}` is not used: add it to {key}.routing"),
                ));
            }
            config.validate(&provider_key)?;
        }
        Ok(())
    }
}

impl ProviderConfig {
    fn validate(&self, key: &str) -> Result<(), ConfigError> {
        match self {
            Self::Openai(c) => c.validate(key),
            Self::Dummy(c) => c.validate(key),
            Self::Lmi(c) => c.validate(key),
            Self::Sagemaker(c) => c.validate(key),
        }
    }
}

impl OpenAiProviderConfig {
    fn validate(&self, key: &str) -> Result<(), ConfigError> {
        if self.model_name.trim().is_empty() {
            return Err(ConfigError::invalid(format!("{key}.model_name"), "must not be empty"));
        }
        check_http_url(&format!("{key}.api_base"), &self.api_base)?;
        check_timeouts(key, &[self.timeout_ms, self.connect_timeout_ms])?;
        check_extra_body(key, &self.extra_body)?;
        check_extra_headers(key, &self.extra_headers)
    }
}

impl DummyProviderConfig {
    fn validate(&self, key: &str) -> Result<(), ConfigError> {
        if let Some(status) = self.fail_with_status {
            if !(400..=599).contains(&status) {
                return Err(ConfigError::invalid(
                    format!("{key}.fail_with_status"),
                    "must be an HTTP error status (400..=599)",
                ));
            }
        }
        if self.embedding_dimensions == 0 || self.embedding_dimensions > 8192 {
            return Err(ConfigError::invalid(
                format!("{key}.embedding_dimensions"),
                "must be between 1 and 8192",
            ));
        }
        check_extra_body(key, &self.extra_body)?;
        check_extra_headers(key, &self.extra_headers)
    }
}
