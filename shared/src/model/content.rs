//! Messages and their content blocks.

use serde::{Deserialize, Serialize};
use serde_json::Value;

/// Who wrote a message. Instructions that open the conversation live in
/// [`ModelRequest::system`](super::ModelRequest::system); `System` here marks instructions given
/// later in the conversation (or a `developer` message, see [`Message::developer`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Role {
    System,
    User,
    Assistant,
}

/// One turn of the conversation.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Message {
    pub role: Role,
    pub content: Vec<ContentBlock>,
    /// The participant's name, when the client gave one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    /// The instructions came as a `developer` message (newer OpenAI models' word for `system`).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub developer: bool,
}

impl Message {
    pub fn new(role: Role, content: Vec<ContentBlock>) -> Self {
        Self {
            role,
            content,
            name: None,
            developer: false,
        }
    }

    /// Every text the message carries, space-joined: text, refusals, thoughts, tool call names and
    /// arguments, tool results.
    pub fn text(&self) -> String {
        self.content
            .iter()
            .filter_map(ContentBlock::text)
            .collect::<Vec<_>>()
            .join(" ")
    }
}

/// Where a file's bytes are.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum FileData {
    /// A URL the provider fetches (`https:` or a `data:` URL).
    Url { url: String },
    /// Inline base64 bytes.
    Base64 { data: String },
    /// A file the provider already holds (e.g. an OpenAI file id).
    ProviderFileId { id: String },
}

/// One piece of a message.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum ContentBlock {
    Text {
        text: String,
    },
    /// An image or other file, with its MIME type when known.
    File {
        data: FileData,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        mime_type: Option<String>,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        filename: Option<String>,
        /// Provider hints such as OpenAI's image `detail`.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        detail: Option<String>,
    },
    /// A call the assistant made; `arguments` is the JSON text exactly as the model wrote it.
    ToolCall {
        id: String,
        name: String,
        arguments: String,
    },
    /// The answer to a tool call. `name` is empty when the entry point does not say it.
    ToolResult {
        id: String,
        name: String,
        result: String,
    },
    /// The model's reasoning.
    Thought {
        text: String,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        signature: Option<String>,
    },
    /// The model declined to answer.
    Refusal {
        text: String,
    },
    /// A block the gateway does not model, passed through as the client or provider wrote it.
    Unknown {
        data: Value,
    },
}

impl ContentBlock {
    pub fn text_block(text: impl Into<String>) -> Self {
        Self::Text { text: text.into() }
    }

    /// The readable text of the block, if it has any.
    pub fn text(&self) -> Option<String> {
        match self {
            Self::Text { text } | Self::Refusal { text } | Self::Thought { text, .. } => Some(text.clone()),
            Self::ToolCall { name, arguments, .. } => Some(format!("{name} {arguments}")),
            Self::ToolResult { result, .. } => Some(result.clone()),
            Self::File { .. } | Self::Unknown { .. } => None,
        }
    }
}
