//! `type = "lmi"` and `type = "sagemaker"` providers: models served by DJL Serving / LMI containers,
//! over plain HTTP or through a SageMaker endpoint; and `[lmi_api]`, the LMI API Nimbus serves.

use super::extras::{check_extra_body, check_extra_headers, extra_body_array, headers_table_or_array};
use super::http_provider::{check_http_url, check_timeouts, default_connect_timeout_ms, default_timeout_ms};
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
    pub(crate) fn uses_chat_template(self) -> bool {
        matches!(self, Self::RollingBatch | Self::TgiCompat | Self::DynamicBatch)
    }
}

/// The built-in chat templates (their sources are the LMI provider's).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum BuiltInChatTemplate {
    /// `chatml`, the default.
    Chatml,
    /// `llama3`.
    Llama3,
    /// `mistral`.
    Mistral,
}

impl BuiltInChatTemplate {
    pub const ALL: [Self; 3] = [Self::Chatml, Self::Llama3, Self::Mistral];
    /// Used when the configuration names no template.
    pub(crate) const DEFAULT: Self = Self::Chatml;

    /// The name a configuration gives it.
    pub fn name(self) -> &'static str {
        match self {
            Self::Chatml => "chatml",
            Self::Llama3 => "llama3",
            Self::Mistral => "mistral",
        }
    }

    /// The built-in template called `name`, if any.
    pub(crate) fn from_name(name: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|template| template.name() == name)
    }
}

/// Marks the error of a template's `raise_exception(message)`: the template refused the
/// conversation (anything else failing in a render is the template's fault).
#[derive(Debug, thiserror::Error)]
#[error("the chat template raised an exception")]
pub(crate) struct ChatTemplateRaised;

/// The environment chat templates compile and render in, set up as Hugging Face renders them:
/// blocks trimmed, no escaping, Python string methods, `raise_exception(message)`.
pub(crate) fn chat_template_environment() -> minijinja::Environment<'static> {
    use minijinja::syntax::SyntaxConfig;
    let mut environment = minijinja::Environment::new();
    match SyntaxConfig::builder().trim_blocks(true).lstrip_blocks(true).build() {
        Ok(syntax) => environment.set_syntax(syntax),
        Err(error) => tracing::warn!(%error, "chat templates keep the default whitespace handling"),
    }
    environment.set_auto_escape_callback(|_| minijinja::AutoEscape::None);
    // Hugging Face templates are Jinja run by Python: they call string methods (`.strip()`…).
    environment.set_unknown_method_callback(minijinja_contrib::pycompat::unknown_method_callback);
    environment.add_function(
        "raise_exception",
        |message: String| -> Result<String, minijinja::Error> {
            Err(minijinja::Error::new(minijinja::ErrorKind::InvalidOperation, message).with_source(ChatTemplateRaised))
        },
    );
    environment
}

fn built_in_names() -> String {
    BuiltInChatTemplate::ALL.map(BuiltInChatTemplate::name).join(", ")
}

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
    /// `max_new_tokens` sent when a request names no token cap (LMI's own default is small: 30
    /// tokens on most backends).
    #[serde(default)]
    pub default_max_new_tokens: Option<u64>,
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
    /// `max_new_tokens` sent when a request names no token cap (as for `type = "lmi"`).
    #[serde(default)]
    pub default_max_new_tokens: Option<u64>,
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
            format!("must be a built-in name ({}) or a template", built_in_names()),
        ));
    }
    if BuiltInChatTemplate::from_name(template).is_some() {
        return Ok(());
    }
    // Its syntax, in the environment it renders in; what it renders is checked per request.
    chat_template_environment()
        .template_from_str(template)
        .map(|_| ())
        .map_err(|e| {
            let problem = match e.line() {
                Some(line) => format!("{} (line {line})", e.detail().unwrap_or("syntax error")),
                None => e.to_string(),
            };
            ConfigError::invalid(
                format!("{key}.chat_template"),
                format!("not a built-in name and not a valid template: {problem}"),
            )
        })
}

fn check_default_max_new_tokens(key: &str, value: Option<u64>) -> Result<(), ConfigError> {
    if value == Some(0) {
        return Err(ConfigError::invalid(
            format!("{key}.default_max_new_tokens"),
            "must be at least 1",
        ));
    }
    Ok(())
}

impl LmiProviderConfig {
    pub(crate) fn validate(&self, key: &str) -> Result<(), ConfigError> {
        check_http_url(&format!("{key}.endpoint_url"), &self.endpoint_url)?;
        check_timeouts(key, &[self.timeout_ms, self.connect_timeout_ms])?;
        check_default_max_new_tokens(key, self.default_max_new_tokens)?;
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
        check_default_max_new_tokens(key, self.default_max_new_tokens)?;
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

    #[test]
    fn the_compile_check_uses_the_rendering_environment() {
        // Loop controls and `tojson` exist where templates are rendered, so the check accepts them.
        Config::from_toml(&lmi_model(
            "\"{% for m in messages %}{% if loop.index > 1 %}{% break %}{% endif %}{{ m | tojson }}{% endfor %}\"",
        ))
        .unwrap();
    }

    #[test]
    fn a_zero_default_token_cap_is_refused() {
        let toml = format!("{}default_max_new_tokens = 0\n", lmi_model("\"chatml\""));
        let err = Config::from_toml(&toml).unwrap_err().to_string();
        assert!(err.contains("default_max_new_tokens"), "{err}");
    }
}
