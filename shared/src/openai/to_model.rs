//! OpenAI chat request → [`ModelRequest`], for the OpenAI routes and batch lines. Parameters the
//! gateway does not model travel in [`OpenAiPassThrough`]; the way back out, for OpenAI-compatible
//! providers, is [`model_to_chat_body`](super::chat_body::model_to_chat_body).

use super::chat::{
    ChatCompletionRequest, ChatMessage, ContentPart, MessageContent, ResponseFormat, Tool,
    ToolChoice as WireToolChoice, ToolChoiceMode,
};
use crate::model::{
    ContentBlock, FileData, Message, ModelRequest, OpenAiPassThrough, OutputMode, RetryScope, Role, SamplingParams,
    StreamOptions, ToolChoice, ToolDefinition,
};
use serde_json::{Map, Value};
use std::collections::HashMap;

/// Body fields that the neutral request models (or the gateway consumes): never passed through.
const MODELLED_FIELDS: &[&str] = &[
    "model",
    "messages",
    "stream",
    "stream_options",
    "credentials",
    "tools",
    "tool_choice",
    "parallel_tool_calls",
    "response_format",
    "temperature",
    "top_p",
    "max_tokens",
    "max_completion_tokens",
    "stop",
    "seed",
    "n",
    "logprobs",
    "top_logprobs",
    "presence_penalty",
    "frequency_penalty",
    "logit_bias",
    "user",
];

/// An OpenAI chat request as received: the typed view the gateway validates, and the raw JSON
/// object it came from (minus gateway-only fields such as `credentials`), whose unmodelled fields
/// reach OpenAI-compatible upstreams through [`OpenAiPassThrough`].
#[derive(Debug, Clone, PartialEq)]
pub struct OpenAiChatRequest {
    pub typed: ChatCompletionRequest,
    pub raw: Map<String, Value>,
}

impl OpenAiChatRequest {
    /// From a typed request alone (the raw body is its serialization).
    #[cfg(test)]
    pub(crate) fn from_typed(typed: ChatCompletionRequest) -> Self {
        let raw = match serde_json::to_value(&typed) {
            Ok(Value::Object(map)) => map,
            _ => Map::new(),
        };
        Self { typed, raw }
    }

    pub(crate) fn to_model(&self) -> ModelRequest {
        chat_request_to_model(&self.typed, &self.raw)
    }
}

/// The neutral request for a (validated) OpenAI chat request and the raw body it came from.
pub(crate) fn chat_request_to_model(typed: &ChatCompletionRequest, raw: &Map<String, Value>) -> ModelRequest {
    let mut fields: Map<String, Value> = raw
        .iter()
        .filter(|(key, _)| !MODELLED_FIELDS.contains(&key.as_str()))
        .map(|(key, value)| (key.clone(), value.clone()))
        .collect();
    let user = match raw.get("user") {
        Some(Value::String(user)) => Some(user.clone()),
        Some(Value::Null) | None => None,
        Some(other) => {
            fields.insert("user".to_owned(), other.clone());
            None
        }
    };
    let (system, system_is_developer, rest) = leading_system(&typed.messages);
    ModelRequest {
        model: typed.model.clone(),
        system,
        system_is_developer,
        messages: messages_to_model(rest),
        tools: typed.tools.iter().flatten().map(tool_to_model).collect(),
        tool_choice: typed.tool_choice.as_ref().map(tool_choice_to_model),
        allowed_tools: None,
        parallel_tool_calls: typed.parallel_tool_calls,
        output: typed.response_format.as_ref().map(output_to_model).unwrap_or_default(),
        params: SamplingParams {
            temperature: typed.temperature,
            top_p: typed.top_p,
            max_tokens: typed.max_output_tokens(),
            presence_penalty: typed.presence_penalty,
            frequency_penalty: typed.frequency_penalty,
            seed: typed.seed,
            stop_sequences: typed.stop_sequences().into_iter().map(str::to_owned).collect(),
            n: typed.n.and_then(|n| u32::try_from(n).ok()),
            logprobs: typed.logprobs,
            top_logprobs: typed.top_logprobs.and_then(|n| u32::try_from(n).ok()),
            logit_bias: typed.logit_bias.clone(),
            user,
            // OpenAI clients' reasoning fields stay pass-through fields, forwarded as sent.
            ..SamplingParams::default()
        },
        stream: typed.wants_stream().then(|| StreamOptions {
            include_usage: typed.wants_stream_usage(),
            ..StreamOptions::default()
        }),
        extra_body: Vec::new(),
        extra_headers: Vec::new(),
        openai_pass_through: OpenAiPassThrough {
            fields,
            max_completion_tokens_spelling: typed.max_completion_tokens.is_some(),
        },
        raw_prompt: false,
        retries: RetryScope::Gateway,
    }
}

/// A first `system`/`developer` message without a name becomes the request's instructions.
fn leading_system(messages: &[ChatMessage]) -> (Option<String>, bool, &[ChatMessage]) {
    match messages.split_first() {
        Some((ChatMessage::System { content, name: None }, rest)) => (Some(content.text()), false, rest),
        Some((ChatMessage::Developer { content, name: None }, rest)) => (Some(content.text()), true, rest),
        _ => (None, false, messages),
    }
}

fn messages_to_model(messages: &[ChatMessage]) -> Vec<Message> {
    let mut tool_names: HashMap<&str, &str> = HashMap::new();
    let mut out = Vec::with_capacity(messages.len());
    for message in messages {
        out.push(match message {
            ChatMessage::System { content, name } | ChatMessage::Developer { content, name } => Message {
                role: Role::System,
                content: content_to_model(content),
                name: name.clone(),
                developer: matches!(message, ChatMessage::Developer { .. }),
            },
            ChatMessage::User { content, name } => Message {
                name: name.clone(),
                ..Message::new(Role::User, content_to_model(content))
            },
            ChatMessage::Assistant {
                content,
                tool_calls,
                refusal,
                name,
            } => {
                let mut blocks = content.as_ref().map(content_to_model).unwrap_or_default();
                if let Some(refusal) = refusal {
                    blocks.push(ContentBlock::Refusal { text: refusal.clone() });
                }
                for call in tool_calls.iter().flatten() {
                    tool_names.insert(&call.id, &call.function.name);
                    blocks.push(ContentBlock::ToolCall {
                        id: call.id.clone(),
                        name: call.function.name.clone(),
                        arguments: call.function.arguments.clone(),
                    });
                }
                Message {
                    name: name.clone(),
                    ..Message::new(Role::Assistant, blocks)
                }
            }
            ChatMessage::Tool { content, tool_call_id } => Message::new(
                Role::User,
                vec![ContentBlock::ToolResult {
                    id: tool_call_id.clone(),
                    name: tool_names
                        .get(tool_call_id.as_str())
                        .copied()
                        .unwrap_or_default()
                        .to_owned(),
                    result: content.text(),
                }],
            ),
        });
    }
    out
}

fn content_to_model(content: &MessageContent) -> Vec<ContentBlock> {
    match content {
        MessageContent::Text(text) => vec![ContentBlock::text_block(text.clone())],
        MessageContent::Parts(parts) => parts.iter().map(part_to_model).collect(),
    }
}

/// `data:MIME;base64,DATA` → (MIME, DATA).
fn split_data_url(url: &str) -> Option<(&str, &str)> {
    let rest = url.strip_prefix("data:")?;
    let (mime, data) = rest.split_once(";base64,")?;
    Some((mime, data))
}

fn string_field(value: &Value, key: &str) -> Option<String> {
    value.get(key).and_then(Value::as_str).map(str::to_owned)
}

fn part_to_model(part: &ContentPart) -> ContentBlock {
    let unknown = || ContentBlock::Unknown {
        data: serde_json::to_value(part).unwrap_or(Value::Null),
    };
    match part {
        ContentPart::Text { text } => ContentBlock::text_block(text.clone()),
        ContentPart::Refusal { refusal } => ContentBlock::Refusal { text: refusal.clone() },
        ContentPart::ImageUrl { image_url } => {
            let Some(url) = image_url.get("url").and_then(Value::as_str) else {
                return unknown();
            };
            let (data, mime_type) = match split_data_url(url) {
                Some((mime, data)) => (FileData::Base64 { data: data.to_owned() }, Some(mime.to_owned())),
                None => (FileData::Url { url: url.to_owned() }, None),
            };
            ContentBlock::File {
                data,
                mime_type,
                filename: None,
                detail: string_field(image_url, "detail"),
            }
        }
        ContentPart::InputAudio { input_audio } => {
            match (string_field(input_audio, "data"), string_field(input_audio, "format")) {
                (Some(data), Some(format)) => ContentBlock::File {
                    data: FileData::Base64 { data },
                    mime_type: Some(format!("audio/{format}")),
                    filename: None,
                    detail: None,
                },
                _ => unknown(),
            }
        }
        ContentPart::File { file } => {
            let filename = string_field(file, "filename");
            if let Some(id) = string_field(file, "file_id") {
                return ContentBlock::File {
                    data: FileData::ProviderFileId { id },
                    mime_type: None,
                    filename,
                    detail: None,
                };
            }
            match file.get("file_data").and_then(Value::as_str).and_then(split_data_url) {
                Some((mime, data)) => ContentBlock::File {
                    data: FileData::Base64 { data: data.to_owned() },
                    mime_type: Some(mime.to_owned()),
                    filename,
                    detail: None,
                },
                None => unknown(),
            }
        }
    }
}

fn tool_to_model(tool: &Tool) -> ToolDefinition {
    ToolDefinition {
        name: tool.function.name.clone(),
        description: tool.function.description.clone(),
        parameters: tool.function.parameters.clone(),
        strict: tool.function.strict,
    }
}

fn tool_choice_to_model(choice: &WireToolChoice) -> ToolChoice {
    match choice {
        WireToolChoice::Mode(ToolChoiceMode::None) => ToolChoice::None,
        WireToolChoice::Mode(ToolChoiceMode::Auto) => ToolChoice::Auto,
        WireToolChoice::Mode(ToolChoiceMode::Required) => ToolChoice::Required,
        WireToolChoice::Named(named) => ToolChoice::Specific(named.function.name.clone()),
    }
}

fn output_to_model(format: &ResponseFormat) -> OutputMode {
    match format {
        ResponseFormat::Text => OutputMode::Text,
        ResponseFormat::JsonObject => OutputMode::JsonObject,
        ResponseFormat::JsonSchema { json_schema } => OutputMode::JsonSchema {
            name: string_field(json_schema, "name").unwrap_or_default(),
            description: string_field(json_schema, "description"),
            schema: json_schema.get("schema").cloned(),
            strict: json_schema.get("strict").and_then(Value::as_bool),
        },
    }
}

#[cfg(test)]
mod tests;
