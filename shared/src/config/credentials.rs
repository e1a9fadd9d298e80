//! Where a provider's API key comes from.

use serde::{Deserialize, Deserializer};
use std::fmt;

/// `env::VAR` (read from the environment), `dynamic::NAME` (supplied per request in the body's
/// `credentials` object), or `none`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CredentialLocation {
    Env(String),
    Dynamic(String),
    None,
}

impl CredentialLocation {
    pub fn parse(text: &str) -> Result<Self, String> {
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
        if let Some(name) = text.strip_prefix("dynamic::") {
            if valid_name(name) {
                return Ok(Self::Dynamic(name.to_owned()));
            }
        }
        Err(format!(
            "invalid credential location `{text}`: expected `env::VARIABLE`, `dynamic::NAME` or `none`"
        ))
    }
}

impl fmt::Display for CredentialLocation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Env(var) => write!(f, "env::{var}"),
            Self::Dynamic(name) => write!(f, "dynamic::{name}"),
            Self::None => f.write_str("none"),
        }
    }
}

impl<'de> Deserialize<'de> for CredentialLocation {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let text = String::deserialize(deserializer)?;
        Self::parse(&text).map_err(serde::de::Error::custom)
    }
}
