//! Streamed function answers: each model chunk as TensorZero's chunk (chat content pieces, or
//! json `raw` pieces), with the ids on every chunk.

use super::prepare::{AnswerRules, JSON_TOOL_NAME};
use crate::config::functions::FunctionKind;
use crate::model::{ChunkBlock, FinishReason, ModelChunk, ModelUsage};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use uuid::Uuid;

/// A piece of a chat answer.
#[derive(Debug, Clone, PartialEq, Serialize, utoipa::ToSchema)]
#[serde(tag = "type", rename_all = "snake_case")]
pub(crate) enum ContentChunk {
    Text {
        id: String,
        text: String,
    },
    /// `raw_name` is the whole name on a call's first piece and empty after.
    ToolCall {
        id: String,
        raw_name: String,
        raw_arguments: String,
    },
    Thought {
        id: String,
        text: String,
    },
}

/// Usage as TensorZero reports it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct UsageReport {
    pub input_tokens: u64,
    pub output_tokens: u64,
}

impl From<&ModelUsage> for UsageReport {
    fn from(usage: &ModelUsage) -> Self {
        Self {
            input_tokens: usage.input_tokens,
            output_tokens: usage.output_tokens,
        }
    }
}

/// The answer part of a chunk.
#[derive(Debug, Clone, PartialEq, Serialize, utoipa::ToSchema)]
#[serde(untagged)]
pub(crate) enum ChunkBody {
    Chat { content: Vec<ContentChunk> },
    Json { raw: String },
}

/// One streamed chunk of a function's answer.
#[derive(Debug, Clone, PartialEq, Serialize, utoipa::ToSchema)]
pub(crate) struct InferenceChunk {
    pub inference_id: Uuid,
    pub episode_id: Uuid,
    pub variant_name: String,
    #[serde(flatten)]
    pub body: ChunkBody,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub usage: Option<UsageReport>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub finish_reason: Option<FinishReason>,
}

/// Turns model chunks into function chunks, remembering each tool call's id.
#[derive(Debug)]
pub(crate) struct ChunkTranslator {
    pub inference_id: Uuid,
    pub episode_id: Uuid,
    pub variant_name: String,
    kind: FunctionKind,
    json_tool: bool,
    tool_call_ids: BTreeMap<u32, String>,
    /// When set, usage reports zero tokens (a cached answer).
    zero_usage: bool,
    /// Usage of model calls made before the stream, added to the reported usage.
    earlier_usage: UsageReport,
}

impl ChunkTranslator {
    pub fn new(
        inference_id: Uuid,
        episode_id: Uuid,
        variant_name: String,
        kind: FunctionKind,
        rules: &AnswerRules,
        zero_usage: bool,
    ) -> Self {
        Self {
            inference_id,
            episode_id,
            variant_name,
            kind,
            json_tool: rules.json_tool,
            tool_call_ids: BTreeMap::new(),
            zero_usage,
            earlier_usage: UsageReport {
                input_tokens: 0,
                output_tokens: 0,
            },
        }
    }

    /// Report `usage` (of model calls made before the stream) in the usage chunk too.
    pub(crate) fn with_earlier_usage(mut self, usage: &ModelUsage) -> Self {
        self.earlier_usage = UsageReport::from(usage);
        self
    }

    /// The function chunk for a model chunk; `None` when it carries nothing to send.
    pub(crate) fn translate(&mut self, chunk: &ModelChunk) -> Option<InferenceChunk> {
        let mut content = Vec::new();
        let mut raw = String::new();
        let mut finish_reason = None;
        for choice in chunk.choices.iter().filter(|c| c.index == 0) {
            finish_reason = finish_reason.or(choice.finish_reason);
            for block in &choice.content {
                self.piece(block, &mut content, &mut raw);
            }
        }
        let earlier = self.earlier_usage;
        let usage = chunk.usage.as_ref().map(|usage| {
            let own = if self.zero_usage {
                UsageReport {
                    input_tokens: 0,
                    output_tokens: 0,
                }
            } else {
                UsageReport::from(usage)
            };
            UsageReport {
                input_tokens: own.input_tokens + earlier.input_tokens,
                output_tokens: own.output_tokens + earlier.output_tokens,
            }
        });
        let body = match self.kind {
            FunctionKind::Chat if !content.is_empty() || usage.is_some() || finish_reason.is_some() => {
                ChunkBody::Chat { content }
            }
            FunctionKind::Json if !raw.is_empty() || usage.is_some() || finish_reason.is_some() => {
                ChunkBody::Json { raw }
            }
            _ => return None,
        };
        Some(InferenceChunk {
            inference_id: self.inference_id,
            episode_id: self.episode_id,
            variant_name: self.variant_name.clone(),
            body,
            usage,
            finish_reason,
        })
    }

    fn piece(&mut self, block: &ChunkBlock, content: &mut Vec<ContentChunk>, raw: &mut String) {
        match (self.kind, block) {
            (FunctionKind::Chat, ChunkBlock::Text { text } | ChunkBlock::Refusal { text }) if !text.is_empty() => {
                content.push(ContentChunk::Text {
                    id: "0".to_owned(),
                    text: text.clone(),
                });
            }
            (FunctionKind::Chat, ChunkBlock::Thought { text }) if !text.is_empty() => {
                content.push(ContentChunk::Thought {
                    id: "0".to_owned(),
                    text: text.clone(),
                });
            }
            (
                FunctionKind::Chat,
                ChunkBlock::ToolCall {
                    index,
                    id,
                    name,
                    arguments,
                },
            ) => {
                let call_id = match id {
                    Some(id) => {
                        self.tool_call_ids.insert(*index, id.clone());
                        id.clone()
                    }
                    None => self
                        .tool_call_ids
                        .get(index)
                        .cloned()
                        .unwrap_or_else(|| index.to_string()),
                };
                content.push(ContentChunk::ToolCall {
                    id: call_id,
                    raw_name: name.clone().unwrap_or_default(),
                    raw_arguments: arguments.clone().unwrap_or_default(),
                });
            }
            (FunctionKind::Json, ChunkBlock::Text { text }) if !self.json_tool => raw.push_str(text),
            (FunctionKind::Json, ChunkBlock::ToolCall { name, arguments, .. }) if self.json_tool => {
                let ours = name.as_deref().is_none_or(|n| n == JSON_TOOL_NAME);
                if let (true, Some(arguments)) = (ours, arguments) {
                    raw.push_str(arguments);
                }
            }
            _ => {}
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::ChunkChoice;
    use serde_json::json;

    fn chunk(content: Vec<ChunkBlock>) -> ModelChunk {
        ModelChunk {
            choices: vec![ChunkChoice {
                index: 0,
                content,
                ..ChunkChoice::default()
            }],
            ..ModelChunk::default()
        }
    }

    #[test]
    fn chat_chunks_carry_ids_and_tool_call_ids_persist() {
        let mut translator = ChunkTranslator::new(
            Uuid::nil(),
            Uuid::nil(),
            "v".into(),
            FunctionKind::Chat,
            &AnswerRules::default(),
            false,
        );
        let text = translator
            .translate(&chunk(vec![ChunkBlock::Text { text: "hi".into() }]))
            .unwrap();
        let text = serde_json::to_value(text).unwrap();
        assert_eq!(text["content"], json!([{"type": "text", "id": "0", "text": "hi"}]));
        assert_eq!(text["variant_name"], "v");
        translator.translate(&chunk(vec![ChunkBlock::ToolCall {
            index: 0,
            id: Some("call_1".into()),
            name: Some("f".into()),
            arguments: None,
        }]));
        let more = translator
            .translate(&chunk(vec![ChunkBlock::ToolCall {
                index: 0,
                id: None,
                name: None,
                arguments: Some("{}".into()),
            }]))
            .unwrap();
        assert_eq!(
            serde_json::to_value(more).unwrap()["content"],
            json!([{"type": "tool_call", "id": "call_1", "raw_name": "", "raw_arguments": "{}"}])
        );
        assert!(translator
            .translate(&chunk(vec![ChunkBlock::Text { text: String::new() }]))
            .is_none());
    }

    #[test]
    fn json_chunks_carry_raw_text() {
        let mut translator = ChunkTranslator::new(
            Uuid::nil(),
            Uuid::nil(),
            "v".into(),
            FunctionKind::Json,
            &AnswerRules::default(),
            false,
        );
        let piece = translator
            .translate(&chunk(vec![ChunkBlock::Text { text: "{\"a\"".into() }]))
            .unwrap();
        assert_eq!(serde_json::to_value(piece).unwrap()["raw"], "{\"a\"");
    }
}
