//! A model's answer as a function's output: chat content blocks (tool calls checked against the
//! offered tools) or json `{raw, parsed}` (parsed only when valid against the output schema).

use super::prepare::{AnswerRules, JSON_TOOL_NAME};
use crate::config::functions::FunctionKind;
use crate::model::{ContentBlock, ModelChoice};
use serde::{Deserialize, Serialize};
use serde_json::Value;

/// One block of a chat function's answer.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum OutputBlock {
    Text {
        text: String,
    },
    /// `name` and `arguments` are null when the call fails validation (an unknown tool, or
    /// arguments that are not JSON or do not match the tool's schema).
    ToolCall {
        id: String,
        raw_name: String,
        raw_arguments: String,
        name: Option<String>,
        arguments: Option<Value>,
    },
    Thought {
        text: String,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        signature: Option<String>,
    },
    Unknown {
        data: Value,
    },
}

/// A json function's answer.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct JsonOutput {
    pub raw: Option<String>,
    pub parsed: Option<Value>,
}

/// A function's answer.
#[derive(Debug, Clone, PartialEq)]
pub enum FunctionOutput {
    Chat(Vec<OutputBlock>),
    Json(JsonOutput),
}

impl FunctionOutput {
    /// The output as stored and as returned (`content` array or `{raw, parsed}`).
    pub fn to_value(&self) -> Value {
        let value = match self {
            Self::Chat(blocks) => serde_json::to_value(blocks),
            Self::Json(output) => serde_json::to_value(output),
        };
        value.unwrap_or(Value::Null)
    }
}

/// The function output of a model's first choice.
pub(crate) fn function_output(kind: FunctionKind, choice: Option<&ModelChoice>, rules: &AnswerRules) -> FunctionOutput {
    let content = choice.map(|c| c.content.as_slice()).unwrap_or_default();
    match kind {
        FunctionKind::Chat => FunctionOutput::Chat(content.iter().map(|block| chat_block(block, rules)).collect()),
        FunctionKind::Json => FunctionOutput::Json(json_output(content, rules)),
    }
}

fn chat_block(block: &ContentBlock, rules: &AnswerRules) -> OutputBlock {
    match block {
        ContentBlock::Text { text } | ContentBlock::Refusal { text } => OutputBlock::Text { text: text.clone() },
        ContentBlock::ToolCall { id, name, arguments } => tool_call_block(id, name, arguments, rules),
        ContentBlock::Thought { text, signature } => OutputBlock::Thought {
            text: text.clone(),
            signature: signature.clone(),
        },
        ContentBlock::Unknown { data } => OutputBlock::Unknown { data: data.clone() },
        ContentBlock::File { .. } | ContentBlock::ToolResult { .. } => OutputBlock::Unknown {
            data: serde_json::to_value(block).unwrap_or(Value::Null),
        },
    }
}

/// A tool call with its validated name and arguments (null where validation fails).
pub(crate) fn tool_call_block(id: &str, raw_name: &str, raw_arguments: &str, rules: &AnswerRules) -> OutputBlock {
    let offered = rules.tools.iter().find(|t| t.provider_name == raw_name);
    let parsed: Option<Value> = serde_json::from_str(raw_arguments).ok();
    let arguments = match (offered, parsed) {
        (Some(tool), Some(arguments)) if tool.parameters.validate(&arguments).is_ok() => Some(arguments),
        _ => None,
    };
    OutputBlock::ToolCall {
        id: id.to_owned(),
        raw_name: raw_name.to_owned(),
        raw_arguments: raw_arguments.to_owned(),
        name: offered.map(|t| t.name.clone()),
        arguments,
    }
}

fn json_output(content: &[ContentBlock], rules: &AnswerRules) -> JsonOutput {
    let raw = if rules.json_tool {
        content.iter().find_map(|block| match block {
            ContentBlock::ToolCall { name, arguments, .. } if name == JSON_TOOL_NAME => Some(arguments.clone()),
            _ => None,
        })
    } else {
        let texts: Vec<&str> = content
            .iter()
            .filter_map(|block| match block {
                ContentBlock::Text { text } => Some(text.as_str()),
                _ => None,
            })
            .collect();
        (!texts.is_empty()).then(|| texts.concat())
    };
    JsonOutput {
        parsed: raw.as_deref().and_then(|raw| parse_json_answer(raw, rules)),
        raw,
    }
}

/// The answer parsed and checked against the output schema; `None` when either fails.
pub(crate) fn parse_json_answer(raw: &str, rules: &AnswerRules) -> Option<Value> {
    let parsed: Value = serde_json::from_str(raw).ok()?;
    match &rules.output_schema {
        Some(schema) if schema.validate(&parsed).is_err() => None,
        _ => Some(parsed),
    }
}

#[cfg(test)]
mod tests {
    use super::super::prepare::OfferedTool;
    use super::*;
    use crate::tensorzero::CompiledSchema;
    use serde_json::json;
    use std::sync::Arc;

    fn rules() -> AnswerRules {
        AnswerRules {
            tools: vec![OfferedTool {
                provider_name: "weather".into(),
                name: "get_weather".into(),
                parameters: Arc::new(CompiledSchema::compile(json!({"type": "object", "required": ["city"]})).unwrap()),
            }],
            output_schema: Some(Arc::new(
                CompiledSchema::compile(json!({"type": "object", "required": ["name"]})).unwrap(),
            )),
            json_tool: false,
        }
    }

    #[test]
    fn tool_calls_are_validated_against_the_offered_tools() {
        let ok = tool_call_block("1", "weather", r#"{"city":"Oslo"}"#, &rules());
        let ok = serde_json::to_value(ok).unwrap();
        assert_eq!(ok["name"], "get_weather");
        assert_eq!(ok["arguments"], json!({"city": "Oslo"}));
        let bad_args = serde_json::to_value(tool_call_block("1", "weather", "{}", &rules())).unwrap();
        assert_eq!(bad_args["name"], "get_weather");
        assert_eq!(bad_args["arguments"], Value::Null);
        let unknown = serde_json::to_value(tool_call_block("1", "nope", "{}", &rules())).unwrap();
        assert_eq!(unknown["name"], Value::Null);
        assert_eq!(unknown["raw_name"], "nope");
    }

    #[test]
    fn json_answers_parse_only_when_they_match_the_schema() {
        let rules = rules();
        assert_eq!(parse_json_answer(r#"{"name":"a"}"#, &rules), Some(json!({"name": "a"})));
        assert_eq!(parse_json_answer(r#"{"other":1}"#, &rules), None);
        assert_eq!(parse_json_answer("not json", &rules), None);
    }

    #[test]
    fn a_text_block_has_no_other_keys() {
        let text = serde_json::to_value(OutputBlock::Text { text: "hi".into() }).unwrap();
        assert_eq!(text, json!({"type": "text", "text": "hi"}));
    }
}
