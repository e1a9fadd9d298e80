//! Chat messages → the prompt string of the LMI prompt schemas, through a Hugging Face style
//! `chat_template` rendered with minijinja: `messages` (role and content strings, instructions
//! first), `add_generation_prompt = true`, `bos_token`, `eos_token` and `raise_exception(msg)`.

use crate::model::{ContentBlock, ModelRequest, Role};
use crate::providers::ProviderError;
use minijinja::syntax::SyntaxConfig;
use minijinja::{context, Environment, ErrorKind};
use serde::Serialize;

/// The template used when the configuration names none.
pub const DEFAULT_CHAT_TEMPLATE: &str = "chatml";

/// The name the compiled template is kept under.
const TEMPLATE_NAME: &str = "chat_template";

/// ChatML (Qwen, many fine-tunes): `<|im_start|>role\ncontent<|im_end|>`.
const CHATML: &str = "{% for message in messages %}<|im_start|>{{ message.role }}
{{ message.content }}<|im_end|>
{% endfor %}{% if add_generation_prompt %}<|im_start|>assistant
{% endif %}";

/// Llama 3 headers, each turn ended by `<|eot_id|>`.
const LLAMA3: &str = "{{ bos_token }}{% for message in messages %}\
<|start_header_id|>{{ message.role }}<|end_header_id|>\n\n{{ message.content | trim }}<|eot_id|>\
{% endfor %}{% if add_generation_prompt %}<|start_header_id|>assistant<|end_header_id|>\n\n{% endif %}";

/// Mistral instruct: `[INST] … [/INST]` around user turns; instructions open the first user turn.
const MISTRAL: &str = "{{ bos_token }}\
{% if messages and messages[0].role == 'system' %}{% set instructions = messages[0].content ~ '\n\n' %}\
{% set turns = messages[1:] %}{% else %}{% set instructions = '' %}{% set turns = messages %}{% endif %}\
{% for message in turns %}\
{% if message.role == 'user' %}[INST] {% if loop.first %}{{ instructions }}{% endif %}{{ message.content }} [/INST]\
{% elif message.role == 'assistant' %}{{ message.content }}{{ eos_token }}\
{% else %}[INST] {{ message.content }} [/INST]{% endif %}\
{% endfor %}";

/// A built-in template: its source and its BOS/EOS tokens.
struct BuiltIn {
    source: &'static str,
    bos_token: &'static str,
    eos_token: &'static str,
}

fn built_in(name: &str) -> Option<BuiltIn> {
    Some(match name {
        "chatml" => BuiltIn {
            source: CHATML,
            bos_token: "",
            eos_token: "<|im_end|>",
        },
        "llama3" => BuiltIn {
            source: LLAMA3,
            bos_token: "<|begin_of_text|>",
            eos_token: "<|eot_id|>",
        },
        "mistral" => BuiltIn {
            source: MISTRAL,
            bos_token: "<s>",
            eos_token: "</s>",
        },
        _ => return None,
    })
}

/// An environment set up as Hugging Face renders chat templates: blocks trimmed, no escaping.
pub(crate) fn template_environment() -> Environment<'static> {
    let mut environment = Environment::new();
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
            Err(minijinja::Error::new(ErrorKind::InvalidOperation, message))
        },
    );
    environment
}

/// A compiled chat template.
pub struct ChatTemplate {
    environment: Environment<'static>,
    bos_token: &'static str,
    eos_token: &'static str,
}

impl std::fmt::Debug for ChatTemplate {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ChatTemplate").finish_non_exhaustive()
    }
}

/// One message as templates see it.
#[derive(Serialize)]
struct TemplateMessage<'a> {
    role: &'static str,
    content: std::borrow::Cow<'a, str>,
}

impl ChatTemplate {
    /// `configured` is a built-in name or a template's source; `None` is [`DEFAULT_CHAT_TEMPLATE`].
    /// A custom template gets empty `bos_token` and `eos_token` (write them into the template).
    pub fn compile(configured: Option<&str>) -> Result<Self, String> {
        let configured = configured.unwrap_or(DEFAULT_CHAT_TEMPLATE);
        let (source, bos_token, eos_token) = match built_in(configured) {
            Some(b) => (b.source, b.bos_token, b.eos_token),
            None => (configured, "", ""),
        };
        let mut environment = template_environment();
        environment
            .add_template_owned(TEMPLATE_NAME, source.to_owned())
            .map_err(|e| format!("the chat template does not compile: {e}"))?;
        Ok(Self {
            environment,
            bos_token,
            eos_token,
        })
    }

    /// The prompt for `request`: its instructions, then its messages, then the assistant's turn.
    /// Content that is not text (images, files) cannot be rendered: an unsupported `messages`.
    pub fn render(&self, request: &ModelRequest) -> Result<String, ProviderError> {
        let messages = template_messages(request)?;
        let template = self
            .environment
            .get_template(TEMPLATE_NAME)
            .map_err(|e| ProviderError::Misconfigured(format!("chat template: {e}")))?;
        template
            .render(context! {
                messages => minijinja::Value::from(minijinja::value::Serde(messages)),
                add_generation_prompt => true,
                bos_token => self.bos_token,
                eos_token => self.eos_token,
            })
            .map_err(|e| ProviderError::UnsupportedParameter {
                param: "messages".to_owned(),
                message: format!("the model's chat template rejected the conversation: {}", describe(&e)),
            })
    }
}

fn describe(error: &minijinja::Error) -> String {
    match error.detail() {
        Some(detail) => detail.to_owned(),
        None => error.to_string(),
    }
}

fn unsupported_messages(message: &str) -> ProviderError {
    ProviderError::UnsupportedParameter {
        param: "messages".to_owned(),
        message: message.to_owned(),
    }
}

fn template_messages(request: &ModelRequest) -> Result<Vec<TemplateMessage<'_>>, ProviderError> {
    let mut messages = Vec::with_capacity(request.messages.len() + 1);
    if let Some(system) = &request.system {
        messages.push(TemplateMessage {
            role: "system",
            content: system.as_str().into(),
        });
    }
    for message in &request.messages {
        let role = match message.role {
            Role::System => "system",
            Role::User => "user",
            Role::Assistant => "assistant",
        };
        let mut texts = Vec::with_capacity(message.content.len());
        for block in &message.content {
            match block {
                ContentBlock::Text { text } | ContentBlock::Refusal { text } => texts.push(text.as_str()),
                // The model's earlier reasoning is not part of the conversation it reads.
                ContentBlock::Thought { .. } => {}
                ContentBlock::File { .. } | ContentBlock::Unknown { .. } => {
                    return Err(unsupported_messages(
                        "this model takes text only (its LMI schema renders a prompt): images, files and \
                         other content parts cannot be sent",
                    ))
                }
                ContentBlock::ToolCall { .. } | ContentBlock::ToolResult { .. } => {
                    return Err(unsupported_messages(
                        "this model has no tools (its LMI schema renders a prompt): tool calls and tool \
                         results cannot be sent",
                    ))
                }
            }
        }
        let content = match texts.as_slice() {
            [one] => (*one).into(),
            many => many.join("\n").into(),
        };
        messages.push(TemplateMessage { role, content });
    }
    Ok(messages)
}
