//! The prompt a DICL variant sends, as TensorZero writes it:
//! - with examples: the system instructions; per example, nearest first, a user message holding
//!   the example's input JSON and an assistant message holding its output (chat: its text and
//!   thought blocks; json: the `raw` text); last, a user message holding the request's
//!   StoredInput JSON (its `system` included);
//! - without: the system instructions and the request's messages, templates stringified (the
//!   request's own `system` is dropped).
//!
//! Every text is sent as written (`raw_text`): no template or role schema applies.

use super::index::Neighbour;
use super::stored_input::template_text_value;
use crate::config::functions::FunctionKind;
use crate::tensorzero::function_calls::input::{
    FunctionInput, InputBlock, InputMessage, InputRole, RawTextInput, ThoughtInput,
};
use serde_json::Value;

/// System text and messages, ready for the generation call.
#[derive(Debug, Clone, PartialEq)]
pub struct DiclPrompt {
    pub system: String,
    pub messages: Vec<InputMessage>,
}

/// An example whose stored output cannot be shown to the model.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("DICL example from inference {0} has no output to show the model")]
pub struct MissingOutput(pub uuid::Uuid);

fn raw(text: impl Into<String>) -> InputBlock {
    InputBlock::RawText(RawTextInput { value: text.into() })
}

fn user(text: impl Into<String>) -> InputMessage {
    InputMessage {
        role: InputRole::User,
        content: vec![raw(text)],
    }
}

/// The prompt with `neighbours` (nearest first) before the request (`request_json`).
pub fn with_examples(
    instructions: &str,
    kind: FunctionKind,
    neighbours: &[Neighbour<'_>],
    request_json: &str,
) -> Result<DiclPrompt, MissingOutput> {
    let mut messages = Vec::with_capacity(neighbours.len() * 2 + 1);
    for neighbour in neighbours {
        let example = neighbour.example;
        let content = output_blocks(kind, &example.output);
        if content.is_empty() {
            return Err(MissingOutput(example.inference_id));
        }
        messages.push(user(example.input.clone()));
        messages.push(InputMessage {
            role: InputRole::Assistant,
            content,
        });
    }
    messages.push(user(request_json));
    Ok(DiclPrompt {
        system: instructions.to_owned(),
        messages,
    })
}

/// What an example's output shows the model: chat text and thoughts, or json's `raw`.
pub(crate) fn output_blocks(kind: FunctionKind, output: &Value) -> Vec<InputBlock> {
    match kind {
        FunctionKind::Json => output
            .get("raw")
            .and_then(Value::as_str)
            .filter(|raw| !raw.is_empty())
            .map(|text| vec![raw(text)])
            .unwrap_or_default(),
        FunctionKind::Chat => output
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(|block| match block.get("type").and_then(Value::as_str) {
                Some("text") => block.get("text").and_then(Value::as_str).map(raw),
                Some("thought") => Some(InputBlock::Thought(ThoughtInput {
                    text: block.get("text").and_then(Value::as_str).map(str::to_owned),
                    signature: block.get("signature").and_then(Value::as_str).map(str::to_owned),
                })),
                _ => None,
            })
            .collect(),
    }
}

/// The prompt when no example is near enough (or none was built).
pub fn without_examples(instructions: &str, input: &FunctionInput) -> DiclPrompt {
    let messages = input
        .messages
        .iter()
        .map(|message| {
            let role = message.role.as_str();
            let content = message
                .content
                .iter()
                .map(|block| match block {
                    InputBlock::Text(text) => match (&text.text, &text.arguments) {
                        (Some(text), _) => raw(text.clone()),
                        (None, Some(arguments)) => raw(template_text_value(role, arguments)),
                        (None, None) => raw(String::new()),
                    },
                    InputBlock::Template(template) => raw(template_text_value(&template.name, &template.arguments)),
                    other => other.clone(),
                })
                .collect();
            InputMessage {
                role: message.role,
                content,
            }
        })
        .collect();
    DiclPrompt {
        system: instructions.to_owned(),
        messages,
    }
}
