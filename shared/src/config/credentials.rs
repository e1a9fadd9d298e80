//! Where a provider's API key comes from.

use serde::{Deserialize, Deserializer};
use std::fmt;

/// `env::VAR` (read from the environment), `ssm::/PARAMETER/NAME` (a parameter of the
/// deployment's parameter store, read on first use: an SSM SecureString on AWS, a file under the
/// data directory locally), `dynamic::NAME` (supplied per request in the body's `credentials`
/// object), or `none`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CredentialLocation {
    Env(String),
    Ssm(String),
    Dynamic(String),
    None,
}

/// A credential location that names no place a key can be read from.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("invalid credential location `{text}`: {problem}")]
pub struct InvalidCredentialLocation {
    text: String,
    problem: String,
}

impl CredentialLocation {
    pub fn parse(text: &str) -> Result<Self, InvalidCredentialLocation> {
        let invalid = |problem: String| InvalidCredentialLocation {
            text: text.to_owned(),
            problem,
        };
        let valid_name =
            |name: &str| !name.is_empty() && name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-');
        if text == "none" {
            return Ok(Self::None);
        }
        if let Some(var) = text.strip_prefix("env::") {
            if valid_name(var) {
                return Ok(Self::Env(var.to_owned()));
            }
        }
        if let Some(name) = text.strip_prefix("ssm::") {
            return crate::ports::check_parameter_name(name)
                .map(|()| Self::Ssm(name.to_owned()))
                .map_err(|problem| invalid(problem.to_string()));
        }
        if let Some(name) = text.strip_prefix("dynamic::") {
            if valid_name(name) {
                return Ok(Self::Dynamic(name.to_owned()));
            }
        }
        Err(invalid(
            "expected `env::VARIABLE`, `ssm::/PARAMETER/NAME`, `dynamic::NAME` or `none`".to_owned(),
        ))
    }

    /// The parameter name of an `ssm::` location.
    pub fn parameter(&self) -> Option<&str> {
        match self {
            Self::Ssm(name) => Some(name),
            _ => None,
        }
    }
}

impl fmt::Display for CredentialLocation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Env(var) => write!(f, "env::{var}"),
            Self::Ssm(name) => write!(f, "ssm::{name}"),
            Self::Dynamic(name) => write!(f, "dynamic::{name}"),
            Self::None => f.write_str("none"),
        }
    }
}

impl<'de> Deserialize<'de> for CredentialLocation {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let text = String::deserialize(deserializer)?;
        // Providers are tagged by `type`, so the error's path stops at the provider: name the field.
        Self::parse(&text).map_err(|e| serde::de::Error::custom(format!("api_key_location: {e}")))
    }
}

impl super::Config {
    /// Every `ssm::` key of a configured provider, with the config key naming it
    /// (`models.M.providers.P.api_key_location`).
    #[cfg(feature = "aws")]
    pub(crate) fn key_parameters(&self) -> Vec<(String, &str)> {
        let mut found = Vec::new();
        for (model_name, model) in &self.models {
            for (provider_name, provider) in &model.providers {
                let location = match provider {
                    super::ProviderConfig::Openai(c) => &c.api_key_location,
                    super::ProviderConfig::Lmi(c) => &c.api_key_location,
                    super::ProviderConfig::Dummy(_) | super::ProviderConfig::Sagemaker(_) => continue,
                };
                if let Some(name) = location.parameter() {
                    found.push((
                        format!("models.{model_name}.providers.{provider_name}.api_key_location"),
                        name,
                    ));
                }
            }
        }
        found
    }

    /// Every `ssm::` key is under `prefix` (e.g. `/nimbus/`), the only parameters a deployed
    /// function may read: checked at start-up, so a key outside fails the deploy's first
    /// invocation with the config key named rather than each request with an access error.
    #[cfg(feature = "aws")]
    pub(crate) fn check_key_parameter_prefix(&self, prefix: &str) -> Result<(), super::ConfigError> {
        match self.key_parameters().into_iter().find(|(_, name)| !name.starts_with(prefix)) {
            Some((key, name)) => Err(super::ConfigError::invalid(
                key,
                format!(
                    "the parameter `{name}` is outside `{prefix}`, the prefix this stack's functions may read \
                     (the template parameter ProviderKeyParameterPrefix): rename it under the prefix or change the prefix"
                ),
            )),
            None => Ok(()),
        }
    }
}
