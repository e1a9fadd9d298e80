//! Variant templates, compiled once into one minijinja environment and keyed by function,
//! variant and template name.

use minijinja::value::{Serde, Value as TemplateValue};
use minijinja::{Environment, UndefinedBehavior};
use serde_json::Value;
use std::fmt;

/// What a template is rendered with.
#[derive(Debug, Clone, Copy)]
pub enum TemplateInput<'a> {
    /// A `template` block's (or a schema'd role's) arguments: must be a JSON object; its members
    /// are the template's variables.
    Arguments(&'a Value),
    /// Plain text for a role template without a schema: available as `{{NAME_text}}`
    /// (`{{system_text}}`, `{{user_text}}`, `{{assistant_text}}`).
    Text(&'a str),
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum TemplateError {
    #[error("variant `{variant}` of function `{function}` has no template `{template}`")]
    Missing {
        function: String,
        variant: String,
        template: String,
    },
    #[error("template arguments must be a JSON object")]
    ArgumentsNotAnObject,
    #[error("template `{template}` failed to render: {message}")]
    Render { template: String, message: String },
}

/// Every template of every variant.
pub(crate) struct TemplateSet {
    environment: Environment<'static>,
}

fn template_key(function: &str, variant: &str, template: &str) -> String {
    // The unit separator cannot occur in config keys that were written in TOML by a person.
    format!("{function}\u{1f}{variant}\u{1f}{template}")
}

impl Default for TemplateSet {
    fn default() -> Self {
        let mut environment = Environment::new();
        // A variable the template uses but the input lacks is an error, not an empty string.
        environment.set_undefined_behavior(UndefinedBehavior::Strict);
        // Prompts are text, not HTML.
        environment.set_auto_escape_callback(|_| minijinja::AutoEscape::None);
        Self { environment }
    }
}

/// A template that does not compile: minijinja's description, with its line.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub(crate) struct TemplateSyntaxError(String);

impl TemplateSet {
    /// Compile `source`; a syntax error is reported with its line.
    pub(crate) fn add(
        &mut self,
        function: &str,
        variant: &str,
        template: &str,
        source: String,
    ) -> Result<(), TemplateSyntaxError> {
        self.environment
            .add_template_owned(template_key(function, variant, template), source)
            .map_err(|e| TemplateSyntaxError(describe(&e)))
    }

    pub fn contains(&self, function: &str, variant: &str, template: &str) -> bool {
        self.environment
            .get_template(&template_key(function, variant, template))
            .is_ok()
    }

    /// Render one template of one variant.
    pub fn render(
        &self,
        function: &str,
        variant: &str,
        template: &str,
        input: TemplateInput<'_>,
    ) -> Result<String, TemplateError> {
        let compiled = self
            .environment
            .get_template(&template_key(function, variant, template))
            .map_err(|_| TemplateError::Missing {
                function: function.to_owned(),
                variant: variant.to_owned(),
                template: template.to_owned(),
            })?;
        let context = match input {
            TemplateInput::Arguments(arguments) if arguments.is_object() => TemplateValue::from(Serde(arguments)),
            TemplateInput::Arguments(_) => return Err(TemplateError::ArgumentsNotAnObject),
            TemplateInput::Text(text) => {
                let mut context = serde_json::Map::new();
                context.insert(format!("{template}_text"), Value::String(text.to_owned()));
                TemplateValue::from(Serde(Value::Object(context)))
            }
        };
        compiled.render(context).map_err(|e| TemplateError::Render {
            template: template.to_owned(),
            message: describe(&e),
        })
    }
}

/// The error's text and line, without the template source.
fn describe(error: &minijinja::Error) -> String {
    match error.line() {
        Some(line) => format!("{} (line {line})", error.detail().unwrap_or(&error.kind().to_string())),
        None => error.to_string(),
    }
}

impl fmt::Debug for TemplateSet {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let names: Vec<String> = self
            .environment
            .templates()
            .map(|(name, _)| name.replace('\u{1f}', "/"))
            .collect();
        f.debug_struct("TemplateSet").field("templates", &names).finish()
    }
}
