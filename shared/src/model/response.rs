//! What providers answer: a whole response or a stream of chunks.

use super::content::ContentBlock;
use serde::{Deserialize, Serialize};
use serde_json::Value;

/// Why the model stopped.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum FinishReason {
    /// It finished its answer.
    Stop,
    /// It wrote one of the stop sequences.
    StopSequence,
    /// It hit the token cap.
    Length,
    /// It called a tool.
    ToolCall,
    /// A content filter cut the answer.
    ContentFilter,
    /// Something the gateway does not model.
    Unknown,
}

/// Tokens read and written; the details are the provider's own breakdowns, passed through.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
pub struct ModelUsage {
    pub input_tokens: u64,
    pub output_tokens: u64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub input_details: Option<Value>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub output_details: Option<Value>,
}

impl ModelUsage {
    pub fn new(input_tokens: u64, output_tokens: u64) -> Self {
        Self {
            input_tokens,
            output_tokens,
            ..Self::default()
        }
    }

    /// Token counts added (breakdowns dropped: they do not add up meaningfully).
    pub(crate) fn summed(&self, other: &Self) -> Self {
        Self::new(
            self.input_tokens + other.input_tokens,
            self.output_tokens + other.output_tokens,
        )
    }
}

/// One answer of the `n` asked for.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ModelChoice {
    pub index: u32,
    pub content: Vec<ContentBlock>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub finish_reason: Option<FinishReason>,
    /// Token log-probabilities in the provider's own shape.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub logprobs: Option<Value>,
}

/// A complete (non-streamed) answer.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ModelResponse {
    /// The provider's id for the answer (entry points mint their own).
    pub id: String,
    pub choices: Vec<ModelChoice>,
    pub usage: ModelUsage,
    /// The provider's backend configuration fingerprint, when it reports one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub system_fingerprint: Option<String>,
    /// The provider's response body as received, for `include_original_response`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub raw_response: Option<String>,
    /// The request body the provider sent on the wire (after `extra_body` edits); the dummy
    /// records the OpenAI-style body it stands for.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub raw_request: Option<String>,
    /// The name of the provider that answered, as configured in the model's `routing` (set by the
    /// router; empty straight from a provider).
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub provider_name: String,
    /// The answering provider's configured `type` (`openai`, `dummy`…; set by the router).
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub provider_type: String,
}

/// A piece of one choice's content in a stream.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum ChunkBlock {
    Text {
        text: String,
    },
    /// A piece of the `index`-th tool call: its id and name come with the first piece.
    ToolCall {
        index: u32,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        id: Option<String>,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        name: Option<String>,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        arguments: Option<String>,
    },
    Thought {
        text: String,
    },
    Refusal {
        text: String,
    },
}

/// One choice's part of a chunk.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
pub struct ChunkChoice {
    pub index: u32,
    /// The first chunk of the choice's message (OpenAI sends the role with it).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub starts_message: bool,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub content: Vec<ChunkBlock>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub finish_reason: Option<FinishReason>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub logprobs: Option<Value>,
}

/// One streamed chunk; a chunk with usage and no choices ends a stream that reports usage.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
pub struct ModelChunk {
    pub choices: Vec<ChunkChoice>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub usage: Option<ModelUsage>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub system_fingerprint: Option<String>,
    /// The provider's chunk as received.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub raw_chunk: Option<String>,
}
