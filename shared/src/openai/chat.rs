//! `/v1/chat/completions` request, response and stream chunk types.

use serde::{Deserialize, Serialize};
use serde_json::Value;
use std::collections::BTreeMap;

/// The typed view of a chat completion request: what the gateway interprets or validates. Every
/// field the client sent (typed here or not, e.g. `user`) is kept in the raw body that
/// OpenAI-compatible providers receive, so nothing the client sent is lost.
#[derive(Debug, Clone, Deserialize, Serialize, PartialEq, utoipa::ToSchema)]
#[schema(example = json!({"model": "dummy", "messages": [{"role": "user", "content": "Hello"}]}))]
pub struct ChatCompletionRequest {
    pub model: String,
    pub messages: Vec<ChatMessage>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stream: Option<bool>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stream_options: Option<StreamOptions>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tools: Option<Vec<Tool>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tool_choice: Option<ToolChoice>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub response_format: Option<ResponseFormat>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub temperature: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub top_p: Option<f64>,
    /// Signed, so that a negative value is a range error naming the field (checked by the
    /// inference layer), not a type error.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_tokens: Option<i64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_completion_tokens: Option<i64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stop: Option<StopSequences>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub seed: Option<i64>,
    /// How many choices to answer (1..=128).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub n: Option<i64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub parallel_tool_calls: Option<bool>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub logprobs: Option<bool>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub top_logprobs: Option<i64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub presence_penalty: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub frequency_penalty: Option<f64>,
    /// Token id (as a string) → bias.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub logit_bias: Option<BTreeMap<String, f64>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub metadata: Option<BTreeMap<String, String>>,
}

impl ChatCompletionRequest {
    /// The output token cap, whichever of the two spellings was used.
    pub(crate) fn max_output_tokens(&self) -> Option<u64> {
        self.max_completion_tokens
            .or(self.max_tokens)
            .map(|max| u64::try_from(max).unwrap_or(0))
    }

    pub(crate) fn wants_stream(&self) -> bool {
        self.stream.unwrap_or(false)
    }

    pub(crate) fn wants_stream_usage(&self) -> bool {
        self.stream_options
            .as_ref()
            .and_then(|o| o.include_usage)
            .unwrap_or(false)
    }

    pub fn stop_sequences(&self) -> Vec<&str> {
        match &self.stop {
            None => Vec::new(),
            Some(StopSequences::One(s)) => vec![s.as_str()],
            Some(StopSequences::Many(v)) => v.iter().map(String::as_str).collect(),
        }
    }
}

#[derive(Debug, Clone, Deserialize, Serialize, PartialEq, Default, utoipa::ToSchema)]
pub struct StreamOptions {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub include_usage: Option<bool>,
}

/// A message in the conversation, by role.
#[derive(Debug, Clone, Deserialize, Serialize, PartialEq, utoipa::ToSchema)]
#[serde(tag = "role", rename_all = "lowercase")]
pub enum ChatMessage {
    System {
        content: MessageContent,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        name: Option<String>,
    },
    Developer {
        content: MessageContent,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        name: Option<String>,
    },
    User {
        content: MessageContent,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        name: Option<String>,
    },
    Assistant {
        #[serde(default, skip_serializing_if = "Option::is_none")]
        content: Option<MessageContent>,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        tool_calls: Option<Vec<ToolCall>>,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        refusal: Option<String>,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        name: Option<String>,
    },
    Tool {
        content: MessageContent,
        tool_call_id: String,
    },
}

impl ChatMessage {
    /// All text the message carries (content parts, tool call arguments, tool results).
    pub fn text(&self) -> String {
        match self {
            Self::System { content, .. }
            | Self::Developer { content, .. }
            | Self::User { content, .. }
            | Self::Tool { content, .. } => content.text(),
            Self::Assistant {
                content,
                tool_calls,
                refusal,
                ..
            } => {
                let mut text = content.as_ref().map(MessageContent::text).unwrap_or_default();
                for call in tool_calls.iter().flatten() {
                    text.push(' ');
                    text.push_str(&call.function.name);
                    text.push(' ');
                    text.push_str(&call.function.arguments);
                }
                if let Some(refusal) = refusal {
                    text.push(' ');
                    text.push_str(refusal);
                }
                text
            }
        }
    }
}

/// Message content: a string or a list of typed parts.
#[derive(Debug, Clone, Deserialize, Serialize, PartialEq, utoipa::ToSchema)]
#[serde(untagged)]
pub enum MessageContent {
    Text(String),
    Parts(Vec<ContentPart>),
}

impl MessageContent {
    pub fn text(&self) -> String {
        match self {
            Self::Text(text) => text.clone(),
            Self::Parts(parts) => parts
                .iter()
                .filter_map(|part| match part {
                    ContentPart::Text { text } => Some(text.as_str()),
                    ContentPart::Refusal { refusal } => Some(refusal.as_str()),
                    _ => None,
                })
                .collect::<Vec<_>>()
                .join(" "),
        }
    }
}

#[derive(Debug, Clone, Deserialize, Serialize, PartialEq, utoipa::ToSchema)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum ContentPart {
    Text { text: String },
    ImageUrl { image_url: Value },
    InputAudio { input_audio: Value },
    File { file: Value },
    Refusal { refusal: String },
}

#[derive(Debug, Clone, Deserialize, Serialize, PartialEq, utoipa::ToSchema)]
pub struct ToolCall {
    pub id: String,
    #[serde(rename = "type", default = "function_type")]
    pub kind: String,
    pub function: FunctionCall,
}

fn function_type() -> String {
    "function".to_owned()
}

#[derive(Debug, Clone, Deserialize, Serialize, PartialEq, utoipa::ToSchema)]
pub struct FunctionCall {
    pub name: String,
    /// JSON text, as the model wrote it.
    pub arguments: String,
}

#[derive(Debug, Clone, Deserialize, Serialize, PartialEq, utoipa::ToSchema)]
pub struct Tool {
    #[serde(rename = "type")]
    pub kind: ToolKind,
    pub function: FunctionDefinition,
}

#[derive(Debug, Clone, Copy, Deserialize, Serialize, PartialEq, Eq, utoipa::ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum ToolKind {
    Function,
}

#[derive(Debug, Clone, Deserialize, Serialize, PartialEq, utoipa::ToSchema)]
pub struct FunctionDefinition {
    pub name: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub description: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub parameters: Option<Value>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub strict: Option<bool>,
}

/// `"none" | "auto" | "required"` or `{"type":"function","function":{"name":…}}`.
#[derive(Debug, Clone, Deserialize, Serialize, PartialEq, utoipa::ToSchema)]
#[serde(untagged)]
pub enum ToolChoice {
    Mode(ToolChoiceMode),
    Named(NamedToolChoice),
}

#[derive(Debug, Clone, Copy, Deserialize, Serialize, PartialEq, Eq, utoipa::ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum ToolChoiceMode {
    None,
    Auto,
    Required,
}

#[derive(Debug, Clone, Deserialize, Serialize, PartialEq, utoipa::ToSchema)]
pub struct NamedToolChoice {
    #[serde(rename = "type")]
    pub kind: ToolKind,
    pub function: NamedFunction,
}

#[derive(Debug, Clone, Deserialize, Serialize, PartialEq, utoipa::ToSchema)]
pub struct NamedFunction {
    pub name: String,
}

#[derive(Debug, Clone, Deserialize, Serialize, PartialEq, utoipa::ToSchema)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum ResponseFormat {
    Text,
    JsonObject,
    JsonSchema { json_schema: Value },
}

#[derive(Debug, Clone, Deserialize, Serialize, PartialEq, utoipa::ToSchema)]
#[serde(untagged)]
pub enum StopSequences {
    One(String),
    Many(Vec<String>),
}

/// A complete (non-streamed) answer.
#[derive(Debug, Clone, Deserialize, Serialize, PartialEq, utoipa::ToSchema)]
pub struct ChatCompletion {
    pub id: String,
    #[serde(default = "completion_object")]
    pub object: String,
    #[serde(default)]
    pub created: i64,
    #[serde(default)]
    pub model: String,
    pub choices: Vec<Choice>,
    #[serde(default)]
    pub usage: Usage,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub system_fingerprint: Option<String>,
}

fn completion_object() -> String {
    "chat.completion".to_owned()
}

#[derive(Debug, Clone, Deserialize, Serialize, PartialEq, utoipa::ToSchema)]
pub struct Choice {
    #[serde(default)]
    pub index: u32,
    pub message: AssistantMessage,
    #[serde(default)]
    pub logprobs: Option<Value>,
    #[serde(default)]
    pub finish_reason: Option<String>,
}

#[derive(Debug, Clone, Deserialize, Serialize, PartialEq, utoipa::ToSchema)]
pub struct AssistantMessage {
    #[serde(default = "assistant_role")]
    pub role: String,
    #[serde(default)]
    pub content: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tool_calls: Option<Vec<ToolCall>>,
    #[serde(default)]
    pub refusal: Option<String>,
    /// The model's reasoning, as OpenAI-compatible reasoning servers (vLLM, DeepSeek, SGLang)
    /// send it; read from upstreams, never written to clients.
    #[serde(default, skip_serializing)]
    #[schema(ignore)]
    pub reasoning_content: Option<String>,
}

fn assistant_role() -> String {
    "assistant".to_owned()
}

#[derive(Debug, Clone, Default, Deserialize, Serialize, PartialEq, utoipa::ToSchema)]
pub struct Usage {
    #[serde(default)]
    pub prompt_tokens: u64,
    #[serde(default)]
    pub completion_tokens: u64,
    #[serde(default)]
    pub total_tokens: u64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub prompt_tokens_details: Option<Value>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub completion_tokens_details: Option<Value>,
}

impl Usage {
    pub fn new(prompt_tokens: u64, completion_tokens: u64) -> Self {
        Self {
            prompt_tokens,
            completion_tokens,
            total_tokens: prompt_tokens + completion_tokens,
            ..Self::default()
        }
    }
}

/// One streamed chunk.
#[derive(Debug, Clone, Deserialize, Serialize, PartialEq, utoipa::ToSchema)]
pub(crate) struct ChatCompletionChunk {
    #[serde(default)]
    pub id: String,
    #[serde(default = "chunk_object")]
    pub object: String,
    #[serde(default)]
    pub created: i64,
    #[serde(default)]
    pub model: String,
    #[serde(default)]
    pub choices: Vec<ChunkChoice>,
    /// Present (possibly `null`) when the client asked for usage; set on the final usage chunk.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub usage: Option<Usage>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub system_fingerprint: Option<String>,
}

fn chunk_object() -> String {
    "chat.completion.chunk".to_owned()
}

#[derive(Debug, Clone, Deserialize, Serialize, PartialEq, utoipa::ToSchema)]
pub(crate) struct ChunkChoice {
    #[serde(default)]
    pub index: u32,
    #[serde(default)]
    pub delta: ChunkDelta,
    #[serde(default)]
    pub logprobs: Option<Value>,
    #[serde(default)]
    pub finish_reason: Option<String>,
}

#[derive(Debug, Clone, Default, Deserialize, Serialize, PartialEq, utoipa::ToSchema)]
pub(crate) struct ChunkDelta {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub role: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub content: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tool_calls: Option<Vec<ToolCallDelta>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub refusal: Option<String>,
    /// A piece of the model's reasoning (see [`AssistantMessage::reasoning_content`]).
    #[serde(default, skip_serializing)]
    #[schema(ignore)]
    pub reasoning_content: Option<String>,
}

#[derive(Debug, Clone, Deserialize, Serialize, PartialEq, utoipa::ToSchema)]
pub(crate) struct ToolCallDelta {
    pub index: u32,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub id: Option<String>,
    #[serde(rename = "type", default, skip_serializing_if = "Option::is_none")]
    pub kind: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub function: Option<FunctionCallDelta>,
}

#[derive(Debug, Clone, Default, Deserialize, Serialize, PartialEq, utoipa::ToSchema)]
pub(crate) struct FunctionCallDelta {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub arguments: Option<String>,
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn parses_a_conversation_with_tools() {
        let request: ChatCompletionRequest = serde_json::from_value(json!({
            "model": "dummy",
            "messages": [
                {"role": "system", "content": "be brief"},
                {"role": "user", "content": [{"type": "text", "text": "weather?"}]},
                {"role": "assistant", "content": null, "tool_calls": [
                    {"id": "call_1", "type": "function", "function": {"name": "get_weather", "arguments": "{\"city\":\"Oslo\"}"}}
                ]},
                {"role": "tool", "tool_call_id": "call_1", "content": "sunny"}
            ],
            "tools": [{"type": "function", "function": {"name": "get_weather", "parameters": {"type": "object"}}}],
            "tool_choice": {"type": "function", "function": {"name": "get_weather"}},
            "stop": ["\n"],
            "max_completion_tokens": 5
        }))
        .unwrap();
        assert_eq!(request.messages.len(), 4);
        assert_eq!(request.max_output_tokens(), Some(5));
        assert_eq!(request.stop_sequences(), vec!["\n"]);
        assert!(request.messages[2].text().contains("get_weather"));
        assert!(matches!(request.tool_choice, Some(ToolChoice::Named(_))));
    }

    #[test]
    fn tool_choice_modes_parse_and_bad_ones_fail() {
        let mode: ToolChoice = serde_json::from_value(json!("required")).unwrap();
        assert_eq!(mode, ToolChoice::Mode(ToolChoiceMode::Required));
        assert!(serde_json::from_value::<ToolChoice>(json!("sometimes")).is_err());
    }

    #[test]
    fn usage_chunk_serializes_empty_choices() {
        let chunk = ChatCompletionChunk {
            id: "c".into(),
            object: chunk_object(),
            created: 1,
            model: "m".into(),
            choices: vec![],
            usage: Some(Usage::new(3, 4)),
            system_fingerprint: None,
        };
        let value = serde_json::to_value(&chunk).unwrap();
        assert_eq!(value["choices"], json!([]));
        assert_eq!(value["usage"]["total_tokens"], 7);
    }
}
