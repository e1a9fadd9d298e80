//! The input of a function call, in TensorZero's shape: an optional `system` (text, or arguments
//! for the system template) and messages whose content is text or a list of typed blocks.

use serde::{Deserialize, Deserializer, Serialize};
use serde_json::Value;

/// `input` of an inference request.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct FunctionInput {
    /// Text, or an object of arguments for the system template.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub system: Option<Value>,
    #[serde(default)]
    pub messages: Vec<InputMessage>,
}

/// Who wrote an input message.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum InputRole {
    User,
    Assistant,
}

impl InputRole {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::User => "user",
            Self::Assistant => "assistant",
        }
    }
}

/// One message; a string `content` is one text block.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct InputMessage {
    pub role: InputRole,
    #[serde(deserialize_with = "text_or_blocks")]
    pub content: Vec<InputBlock>,
}

/// `content`: text (one text block), an object (the arguments of the role's template: one text
/// block with `arguments`, as TensorZero reads it), or a list of blocks.
fn text_or_blocks<'de, D: Deserializer<'de>>(deserializer: D) -> Result<Vec<InputBlock>, D::Error> {
    match Value::deserialize(deserializer)? {
        Value::String(text) => Ok(vec![InputBlock::Text(TextInput {
            text: Some(text),
            arguments: None,
        })]),
        Value::Object(arguments) => Ok(vec![InputBlock::Text(TextInput {
            text: None,
            arguments: Some(Value::Object(arguments)),
        })]),
        Value::Array(blocks) => blocks
            .into_iter()
            .enumerate()
            .map(|(index, block)| {
                serde_path_to_error::deserialize(block).map_err(|e| {
                    serde::de::Error::custom(format!("content[{index}]{}: {}", path_suffix(&e), e.inner()))
                })
            })
            .collect(),
        _ => Err(serde::de::Error::custom(
            "`content` must be text, an object of template arguments, or a list of content blocks",
        )),
    }
}

fn path_suffix<E>(error: &serde_path_to_error::Error<E>) -> String {
    let path = error.path().to_string();
    if path == "." {
        String::new()
    } else {
        format!(".{path}")
    }
}

/// One block of a message's content.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum InputBlock {
    /// Text, or (legacy) `arguments` for the role's template.
    Text(TextInput),
    /// Arguments for the named template of the variant.
    Template(TemplateInputBlock),
    ToolCall(ToolCallInput),
    ToolResult(ToolResultInput),
    File(FileInput),
    /// Text sent as written, bypassing templates.
    RawText(RawTextInput),
    Thought(ThoughtInput),
    /// Provider-specific data passed through.
    Unknown(UnknownInput),
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct TextInput {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub text: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub arguments: Option<Value>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct TemplateInputBlock {
    pub name: String,
    #[serde(default)]
    pub arguments: Value,
}

/// A tool call: as the client writes one (`name`, `arguments` as a JSON string or object), or
/// an earlier answer's block sent back (`raw_name`, `raw_arguments`, validated `name`/`arguments`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct ToolCallInput {
    pub id: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub arguments: Option<Value>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub raw_name: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub raw_arguments: Option<String>,
}

impl ToolCallInput {
    /// The name the model used: `raw_name` when sent back from an answer, else `name`.
    pub(crate) fn called_name(&self) -> Option<&str> {
        self.raw_name.as_deref().or(self.name.as_deref())
    }

    /// The arguments as JSON text: `raw_arguments`, else `arguments` (a string as is, anything
    /// else serialized).
    pub(crate) fn arguments_text(&self) -> String {
        if let Some(raw) = &self.raw_arguments {
            return raw.clone();
        }
        match &self.arguments {
            Some(Value::String(text)) => text.clone(),
            Some(other) => other.to_string(),
            None => "{}".to_owned(),
        }
    }
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct ToolResultInput {
    pub id: String,
    pub name: String,
    pub result: String,
}

/// A file by URL or as base64 bytes (`file_type` may be left out: then `url` or `data` decides).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct FileInput {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub file_type: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub url: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub data: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mime_type: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub source_url: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub detail: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub filename: Option<String>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct RawTextInput {
    pub value: String,
}

/// Reasoning sent back to the model; extra provider fields are tolerated.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct ThoughtInput {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub text: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub signature: Option<String>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct UnknownInput {
    pub data: Value,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub model_name: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub provider_name: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub model_provider_name: Option<String>,
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn parses_what_the_tensorzero_client_sends() {
        let input: FunctionInput = serde_json::from_value(json!({
            "system": {"tone": "formal"},
            "messages": [
                {"role": "user", "content": "hi"},
                {"role": "user", "content": [
                    {"type": "template", "name": "user", "arguments": {"topic": "x"}},
                    {"type": "file", "file_type": "url", "url": "https://e.x/a.png", "mime_type": null},
                    {"type": "raw_text", "value": "as is"},
                    {"type": "tool_result", "id": "1", "name": "f", "result": "ok"}
                ]},
                {"role": "assistant", "content": [
                    {"type": "tool_call", "id": "1", "name": "f", "arguments": "{\"a\":1}"},
                    {"type": "tool_call", "id": "2", "raw_name": "f", "raw_arguments": "{}", "name": "f", "arguments": {}},
                    {"type": "thought", "text": "hmm", "signature": null, "summary": null},
                    {"type": "unknown", "data": {"x": 1}, "model_name": null, "provider_name": null}
                ]}
            ]
        }))
        .unwrap();
        assert_eq!(input.messages.len(), 3);
        assert!(matches!(&input.messages[0].content[0], InputBlock::Text(t) if t.text.as_deref() == Some("hi")));
        let InputBlock::ToolCall(call) = &input.messages[2].content[0] else {
            panic!("not a tool call")
        };
        assert_eq!(call.arguments_text(), "{\"a\":1}");
    }

    #[test]
    fn a_bad_block_names_its_place() {
        let error = serde_json::from_value::<FunctionInput>(json!({
            "messages": [{"role": "user", "content": [{"type": "text", "txt": "x"}]}]
        }))
        .unwrap_err()
        .to_string();
        assert!(error.contains("content[0]"), "{error}");
        assert!(error.contains("txt"), "{error}");
        assert!(
            serde_json::from_value::<FunctionInput>(json!({"messages": [{"role": "system", "content": "x"}]})).is_err()
        );
        let error = serde_json::from_value::<FunctionInput>(json!({"messages": [{"role": "user", "content": 3}]}))
            .unwrap_err()
            .to_string();
        assert!(error.contains("`content` must be text"), "{error}");
    }

    #[test]
    fn an_object_content_is_the_arguments_of_the_roles_template() {
        let input: FunctionInput = serde_json::from_value(json!({
            "messages": [{"role": "user", "content": {"recipient": "Bob", "topic": "lunch"}}]
        }))
        .unwrap();
        let [InputBlock::Text(text)] = input.messages[0].content.as_slice() else {
            panic!("not one text block: {:?}", input.messages[0].content)
        };
        assert_eq!(text.text, None);
        assert_eq!(text.arguments, Some(json!({"recipient": "Bob", "topic": "lunch"})));
    }
}
