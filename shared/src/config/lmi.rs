//! `type = "lmi"` and `type = "sagemaker"` providers: models served by DJL Serving / LMI containers,
//! over plain HTTP or through a SageMaker endpoint; and `[lmi_api]`, the LMI API Nimbus serves.

use super::extras::{check_extra_body, check_extra_headers, extra_body_array, headers_table_or_array};
use super::{ConfigError, CredentialLocation, ExtraBodyEntry, ExtraHeaderEntry};
use serde::Deserialize;

/// The request and response schema an LMI container speaks.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum LmiSchema {
    /// `{"inputs": "…", "parameters", "stream"}` → `{"generated_text", "details"}`; JSON lines when
    /// streamed.
    #[default]
    RollingBatch,
    /// The rolling-batch request answered as TGI does: a one-element array; SSE when streamed.
    TgiCompat,
    /// `{"inputs": ["…"]}` → `[{"generated_text"}]`; `{"outputs": […]}` lines when streamed.
    DynamicBatch,
    /// OpenAI-style `messages` on `/invocations`, answered with `chat.completion` (JSON-lines chunks
    /// when streamed).
    Chat,
    /// Text embedding containers: `{"inputs": ["…"]}` → a list of vectors.
    Embedding,
}

impl LmiSchema {
    /// The schema takes a prompt string rendered from the chat through a chat template.
    pub fn uses_chat_template(self) -> bool {
        matches!(self, Self::RollingBatch | Self::TgiCompat | Self::DynamicBatch)
    }
}

/// The built-in chat templates, by name.
pub const BUILT_IN_CHAT_TEMPLATES: [&str; 3] = ["chatml", "llama3", "mistral"];

/// `type = "lmi"`: a DJL Serving / LMI container reached over HTTP.
#[derive(Debug, Clone, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct LmiProviderConfig {
    /// The full URL requests are posted to, e.g. `http://host:8080/invocations` or
    /// `http://host:8080/predictions/my-model`.
    pub endpoint_url: String,
    #[serde(default)]
    pub schema: LmiSchema,
    /// For the prompt schemas: a built-in name (`chatml`, `llama3`, `mistral`) or a minijinja
    /// template in Hugging Face `chat_template` syntax. Default `chatml`.
    #[serde(default)]
    pub chat_template: Option<String>,
    /// Sent as a bearer token when set.
    #[serde(default = "no_key")]
    pub api_key_location: CredentialLocation,
    /// Whole-request timeout (for streams: until the first byte, then between lines).
    #[serde(default = "default_timeout_ms")]
    pub timeout_ms: u64,
    #[serde(default = "default_connect_timeout_ms")]
    pub connect_timeout_ms: u64,
    /// Edits of every body sent (the LMI body, after the mapping).
    #[serde(default, deserialize_with = "extra_body_array")]
    pub extra_body: Vec<ExtraBodyEntry>,
    /// Headers set or removed on every request.
    #[serde(default, deserialize_with = "headers_table_or_array")]
    pub extra_headers: Vec<ExtraHeaderEntry>,
}

/// `type = "sagemaker"`: a SageMaker endpoint running an LMI container, called with the AWS SDK
/// (`InvokeEndpoint`, `InvokeEndpointWithResponseStream`) under the function's role.
#[derive(Debug, Clone, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct SageMakerProviderConfig {
    pub endpoint_name: String,
    /// The endpoint's region; default: the function's.
    #[serde(default)]
    pub region: Option<String>,
    /// `X-Amzn-SageMaker-Target-Variant`.
    #[serde(default)]
    pub target_variant: Option<String>,
    /// `X-Amzn-SageMaker-Inference-Component`.
    #[serde(default)]
    pub inference_component: Option<String>,
    #[serde(default)]
    pub schema: LmiSchema,
    /// As for `type = "lmi"`.
    #[serde(default)]
    pub chat_template: Option<String>,
    /// Whole-request timeout (for streams: until the first byte, then between lines).
    #[serde(default = "default_timeout_ms")]
    pub timeout_ms: u64,
    /// Edits of every body sent (the LMI body, after the mapping).
    #[serde(default, deserialize_with = "extra_body_array")]
    pub extra_body: Vec<ExtraBodyEntry>,
}

fn no_key() -> CredentialLocation {
    CredentialLocation::None
}
fn default_timeout_ms() -> u64 {
    120_000
}
fn default_connect_timeout_ms() -> u64 {
    5_000
}

/// `[lmi_api]`: the LMI API Nimbus serves (`/invocations`, `/predictions/{model}`).
#[derive(Debug, Clone, Deserialize, PartialEq, Default)]
#[serde(deny_unknown_fields)]
pub struct LmiApiConfig {
    /// The model `/invocations` calls when the request names none in
    /// `X-Amzn-SageMaker-Target-Model`.
    #[serde(default)]
    pub default_model: Option<String>,
    /// Answer as LMI's `option.tgi_compat=true` does: a one-element array, SSE when streamed.
    #[serde(default)]
    pub tgi_compat: bool,
    /// How streamed answers are framed, like LMI's `option.output_formatter` (default: JSON lines,
    /// SSE with `tgi_compat`). `Accept: text/event-stream` asks for SSE per request.
    #[serde(default)]
    pub output_formatter: Option<LmiOutputFormatter>,
}

/// The framing of streamed LMI answers.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum LmiOutputFormatter {
    /// One JSON object per line (`application/jsonlines`).
    Jsonlines,
    /// Server-sent events: each object in a `data:` event (`text/event-stream`).
    Sse,
}

impl LmiApiConfig {
    /// `default_model` names a configured model or a valid `provider::model` shorthand.
    pub(crate) fn validate(
        &self,
        models: &std::collections::BTreeMap<String, super::ModelConfig>,
    ) -> Result<(), ConfigError> {
        let Some(model) = &self.default_model else {
            return Ok(());
        };
        if models.contains_key(model) {
            return Ok(());
        }
        super::shorthand_model(model)
            .map(|_| ())
            .map_err(|e| ConfigError::invalid("lmi_api.default_model", e.to_string()))
    }
}

fn check_schema_template(key: &str, schema: LmiSchema, template: Option<&str>) -> Result<(), ConfigError> {
    let Some(template) = template else {
        return Ok(());
    };
    if !schema.uses_chat_template() {
        return Err(ConfigError::invalid(
            format!("{key}.chat_template"),
            "only the rolling_batch, tgi_compat and dynamic_batch schemas take a chat template",
        ));
    }
    if template.trim().is_empty() {
        return Err(ConfigError::invalid(
            format!("{key}.chat_template"),
            format!(
                "must be a built-in name ({}) or a template",
                BUILT_IN_CHAT_TEMPLATES.join(", ")
            ),
        ));
    }
    if !BUILT_IN_CHAT_TEMPLATES.contains(&template) {
        check_template_compiles(template).map_err(|message| {
            ConfigError::invalid(
                format!("{key}.chat_template"),
                format!("not a built-in name and not a valid template: {message}"),
            )
        })?;
    }
    Ok(())
}

/// Whether a chat template's source compiles (its syntax; what it renders is checked per request).
fn check_template_compiles(source: &str) -> Result<(), String> {
    let environment = minijinja::Environment::new();
    environment
        .template_from_str(source)
        .map(|_| ())
        .map_err(|e| match e.line() {
            Some(line) => format!("{} (line {line})", e.detail().unwrap_or("syntax error")),
            None => e.to_string(),
        })
}

fn check_timeouts(key: &str, timeouts: &[u64]) -> Result<(), ConfigError> {
    if timeouts.contains(&0) {
        return Err(ConfigError::invalid(
            format!("{key}.timeout_ms"),
            "timeouts must be positive",
        ));
    }
    Ok(())
}

impl LmiProviderConfig {
    pub(crate) fn validate(&self, key: &str) -> Result<(), ConfigError> {
        if !(self.endpoint_url.starts_with("http://") || self.endpoint_url.starts_with("https://")) {
            return Err(ConfigError::invalid(
                format!("{key}.endpoint_url"),
                format!("`{}` is not an http(s) URL", self.endpoint_url),
            ));
        }
        check_timeouts(key, &[self.timeout_ms, self.connect_timeout_ms])?;
        check_schema_template(key, self.schema, self.chat_template.as_deref())?;
        check_extra_body(key, &self.extra_body)?;
        check_extra_headers(key, &self.extra_headers)
    }
}

impl SageMakerProviderConfig {
    pub(crate) fn validate(&self, key: &str) -> Result<(), ConfigError> {
        // SageMaker endpoint names: 1-63 characters, alphanumerics and hyphens.
        let name = &self.endpoint_name;
        if name.is_empty()
            || name.len() > 63
            || !name.chars().all(|c| c.is_ascii_alphanumeric() || c == '-')
            || name.starts_with('-')
        {
            return Err(ConfigError::invalid(
                format!("{key}.endpoint_name"),
                format!("`{name}` is not a SageMaker endpoint name (1-63 letters, digits and hyphens)"),
            ));
        }
        check_timeouts(key, &[self.timeout_ms])?;
        check_schema_template(key, self.schema, self.chat_template.as_deref())?;
        check_extra_body(key, &self.extra_body)
    }
}

#[cfg(test)]
mod tests {
    use crate::config::Config;

    fn lmi_model(template: &str) -> String {
        format!(
            "[models.m]\nrouting = [\"p\"]\n[models.m.providers.p]\ntype = \"lmi\"\n\
             endpoint_url = \"http://localhost:8080/invocations\"\nchat_template = {template}\n"
        )
    }

    #[test]
    fn built_in_names_and_custom_templates_are_accepted() {
        Config::from_toml(&lmi_model("\"llama3\"")).unwrap();
        Config::from_toml(&lmi_model("\"{% for m in messages %}{{ m.content }}{% endfor %}\"")).unwrap();
    }

    #[test]
    fn a_template_that_does_not_compile_is_refused_at_its_key() {
        for source in ["\"{% for m in messages %}\"", "\"{{ messages[\""] {
            let err = Config::from_toml(&lmi_model(source)).unwrap_err().to_string();
            assert!(err.contains("models.m.providers.p.chat_template"), "{err}");
        }
        let sagemaker = "[models.m]\nrouting = [\"p\"]\n[models.m.providers.p]\ntype = \"sagemaker\"\n\
                         endpoint_name = \"rolling-batch\"\nchat_template = \"{% if %}\"\n";
        let err = Config::from_toml(sagemaker).unwrap_err().to_string();
        assert!(err.contains("models.m.providers.p.chat_template"), "{err}");
    }
}
