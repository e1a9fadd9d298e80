//! The text DICL embeds and shows the model: an input as TensorZero stores it (`StoredInput`),
//! un-templated, serialized as compact JSON: `{"system"?, "messages": [{"role", "content": [..]}]}`.
//! Template arguments (a `template` block, or a legacy text block with `arguments`) become text
//! blocks holding the stringified `{"type": "template", "name", "arguments"}`; files and
//! provider-specific blocks have no stored text and are refused.

use crate::tensorzero::function_calls::input::{FunctionInput, InputBlock, InputMessage};
use serde::Serialize;
use serde_json::Value;
use std::borrow::Cow;

/// Why an input has no stored text.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum StoredInputError {
    #[error("`{0}`: DICL variants take no file blocks")]
    File(String),
    #[error("`{0}`: DICL variants take no `unknown` blocks")]
    Unknown(String),
    #[error("`{0}`: a text block has exactly one of `text` or `arguments`")]
    EmptyText(String),
}

/// Whether the input holds tool calls or tool results (examples may not).
pub(crate) fn has_tool_blocks(input: &FunctionInput) -> bool {
    input.messages.iter().any(|message| {
        message
            .content
            .iter()
            .any(|block| matches!(block, InputBlock::ToolCall(_) | InputBlock::ToolResult(_)))
    })
}

/// StoredInput as TensorZero writes it (fields in its order).
#[derive(Serialize)]
struct Stored<'a> {
    #[serde(skip_serializing_if = "Option::is_none")]
    system: Option<&'a Value>,
    messages: Vec<StoredMessage<'a>>,
}

#[derive(Serialize)]
struct StoredMessage<'a> {
    role: &'static str,
    content: Vec<StoredBlock<'a>>,
}

#[derive(Serialize)]
#[serde(tag = "type", rename_all = "snake_case")]
enum StoredBlock<'a> {
    Text {
        text: Cow<'a, str>,
    },
    RawText {
        value: &'a str,
    },
    ToolCall {
        id: &'a str,
        name: Option<&'a str>,
        arguments: String,
    },
    ToolResult {
        id: &'a str,
        name: &'a str,
        result: &'a str,
    },
    Thought {
        text: Option<&'a str>,
    },
}

#[derive(Serialize)]
struct TemplateBlock<'a> {
    #[serde(rename = "type")]
    kind: &'static str,
    name: &'a str,
    arguments: &'a Value,
}

/// `input` as StoredInput JSON text.
pub(crate) fn stored_input_json(input: &FunctionInput) -> Result<String, StoredInputError> {
    let messages = input
        .messages
        .iter()
        .enumerate()
        .map(|(index, message)| stored_message(index, message))
        .collect::<Result<Vec<_>, _>>()?;
    let stored = Stored {
        system: input.system.as_ref().filter(|s| !s.is_null()),
        messages,
    };
    Ok(serde_json::to_string(&stored).unwrap_or_default())
}

fn stored_message(index: usize, message: &InputMessage) -> Result<StoredMessage<'_>, StoredInputError> {
    let role = message.role.as_str();
    let mut content = Vec::with_capacity(message.content.len());
    for (block_index, block) in message.content.iter().enumerate() {
        let field = || format!("input.messages[{index}].content[{block_index}]");
        content.push(match block {
            InputBlock::Text(text) => match (&text.text, &text.arguments) {
                (Some(text), None) => StoredBlock::Text {
                    text: Cow::Borrowed(text),
                },
                (None, Some(arguments)) => StoredBlock::Text {
                    text: Cow::Owned(template_text_value(role, arguments)),
                },
                _ => return Err(StoredInputError::EmptyText(field())),
            },
            InputBlock::Template(template) => StoredBlock::Text {
                text: Cow::Owned(template_text_value(&template.name, &template.arguments)),
            },
            InputBlock::RawText(raw) => StoredBlock::RawText { value: &raw.value },
            InputBlock::ToolCall(call) => StoredBlock::ToolCall {
                id: &call.id,
                name: call.called_name(),
                arguments: call.arguments_text(),
            },
            InputBlock::ToolResult(result) => StoredBlock::ToolResult {
                id: &result.id,
                name: &result.name,
                result: &result.result,
            },
            InputBlock::Thought(thought) => StoredBlock::Thought {
                text: thought.text.as_deref(),
            },
            InputBlock::File(_) => return Err(StoredInputError::File(field())),
            InputBlock::Unknown(_) => return Err(StoredInputError::Unknown(field())),
        });
    }
    Ok(StoredMessage { role, content })
}

/// A template's arguments as the text that stands for them.
pub(crate) fn template_text_value(name: &str, arguments: &Value) -> String {
    let block = TemplateBlock {
        kind: "template",
        name,
        arguments,
    };
    serde_json::to_string(&block).unwrap_or_default()
}
