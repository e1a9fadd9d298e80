//! `[tools.T]`: tools functions may offer to the model.

use super::ConfigError;
use serde::Deserialize;

#[derive(Debug, Clone, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct ToolConfig {
    pub description: String,
    /// Path (relative to the config file) of the JSON Schema of the arguments.
    pub parameters: String,
    /// Ask providers for strict argument decoding.
    #[serde(default)]
    pub strict: bool,
    /// The name the provider sees, when it differs from the table name.
    #[serde(default)]
    pub name: Option<String>,
}

impl ToolConfig {
    /// The name sent to providers.
    pub fn provider_name<'a>(&'a self, table_name: &'a str) -> &'a str {
        self.name.as_deref().unwrap_or(table_name)
    }

    pub(crate) fn validate(&self, table_name: &str) -> Result<(), ConfigError> {
        let key = format!("tools.{table_name}");
        let name = self.provider_name(table_name);
        let valid = !name.is_empty()
            && name.len() <= 64
            && name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-');
        if !valid {
            let at = if self.name.is_some() {
                format!("{key}.name")
            } else {
                key
            };
            return Err(ConfigError::invalid(
                at,
                "tool names sent to providers must be 1 to 64 of a-z, A-Z, 0-9, _ and -",
            ));
        }
        if self.parameters.trim().is_empty() {
            return Err(ConfigError::invalid(
                format!("{key}.parameters"),
                "must name a JSON Schema file",
            ));
        }
        Ok(())
    }
}
