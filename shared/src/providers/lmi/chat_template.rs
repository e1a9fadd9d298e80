//! Chat messages → the prompt string of the LMI prompt schemas, through a Hugging Face style
//! `chat_template` rendered with minijinja: `messages` (role and content strings, instructions
//! first), `add_generation_prompt = true`, `bos_token`, `eos_token` and `raise_exception(msg)`.

use crate::config::{chat_template_environment, BuiltInChatTemplate, ChatTemplateRaised};
use crate::model::{ContentBlock, ModelRequest, Role};
use crate::providers::ProviderError;
use minijinja::{context, Environment};
use serde::Serialize;

/// A chat template that cannot be used.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub(crate) enum ChatTemplateError {
    #[error("the chat template does not compile: {0}")]
    DoesNotCompile(String),
}

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

fn built_in(template: BuiltInChatTemplate) -> BuiltIn {
    match template {
        BuiltInChatTemplate::Chatml => BuiltIn {
            source: CHATML,
            bos_token: "",
            eos_token: "<|im_end|>",
        },
        BuiltInChatTemplate::Llama3 => BuiltIn {
            source: LLAMA3,
            bos_token: "<|begin_of_text|>",
            eos_token: "<|eot_id|>",
        },
        BuiltInChatTemplate::Mistral => BuiltIn {
            source: MISTRAL,
            bos_token: "<s>",
            eos_token: "</s>",
        },
    }
}

/// A compiled chat template.
pub(crate) struct ChatTemplate {
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
    /// `configured` is a built-in name or a template's source; `None` is
    /// [`BuiltInChatTemplate::DEFAULT`]. A custom template gets empty `bos_token` and `eos_token`
    /// (write them into the template).
    pub fn compile(configured: Option<&str>) -> Result<Self, ChatTemplateError> {
        let built_in_template = match configured {
            None => Some(BuiltInChatTemplate::DEFAULT),
            Some(name) => BuiltInChatTemplate::from_name(name),
        };
        let (source, bos_token, eos_token) = match (built_in_template, configured) {
            (Some(template), _) => {
                let b = built_in(template);
                (b.source, b.bos_token, b.eos_token)
            }
            (None, source) => (source.unwrap_or_default(), "", ""),
        };
        let mut environment = chat_template_environment();
        environment
            .add_template_owned(TEMPLATE_NAME, source.to_owned())
            .map_err(|e| ChatTemplateError::DoesNotCompile(e.to_string()))?;
        Ok(Self {
            environment,
            bos_token,
            eos_token,
        })
    }

    /// The prompt for `request`: its instructions, then its messages, then the assistant's turn.
    /// Content that is not text (images, files), or a conversation the template refuses with
    /// `raise_exception`, is an unsupported `messages`; any other failure is the template's.
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
            .map_err(|e| {
                if raised_by_template(&e) {
                    ProviderError::UnsupportedParameter {
                        param: "messages".to_owned(),
                        message: format!("the model's chat template rejected the conversation: {}", describe(&e)),
                    }
                } else {
                    ProviderError::Misconfigured(format!("the chat template failed to render: {}", describe(&e)))
                }
            })
    }
}

/// The error (or one it wraps) comes from the template's `raise_exception`.
fn raised_by_template(error: &minijinja::Error) -> bool {
    let mut source: Option<&(dyn std::error::Error + 'static)> = Some(error);
    while let Some(current) = source {
        if current.is::<ChatTemplateRaised>() {
            return true;
        }
        source = current.source();
    }
    false
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
