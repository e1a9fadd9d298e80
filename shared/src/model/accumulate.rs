//! Put a streamed answer back together: the chunks of one choice → a [`ModelResponse`], for
//! records and the cache.

use super::content::ContentBlock;
use super::response::{ChunkBlock, FinishReason, ModelChoice, ModelChunk, ModelResponse, ModelUsage};
use std::collections::BTreeMap;

/// Collects the first choice of a stream.
#[derive(Debug, Default)]
pub(crate) struct ChunkAccumulator {
    thought: String,
    text: String,
    refusal: String,
    /// By the call's index: id, name, arguments so far.
    tool_calls: BTreeMap<u32, (String, String, String)>,
    finish_reason: Option<FinishReason>,
    usage: Option<ModelUsage>,
    raw_chunks: Vec<String>,
}

impl ChunkAccumulator {
    pub fn push(&mut self, chunk: &ModelChunk) {
        if let Some(usage) = &chunk.usage {
            self.usage = Some(usage.clone());
        }
        if let Some(raw) = &chunk.raw_chunk {
            self.raw_chunks.push(raw.clone());
        }
        for choice in chunk.choices.iter().filter(|c| c.index == 0) {
            if choice.finish_reason.is_some() {
                self.finish_reason = choice.finish_reason;
            }
            for block in &choice.content {
                match block {
                    ChunkBlock::Text { text } => self.text.push_str(text),
                    ChunkBlock::Thought { text } => self.thought.push_str(text),
                    ChunkBlock::Refusal { text } => self.refusal.push_str(text),
                    ChunkBlock::ToolCall {
                        index,
                        id,
                        name,
                        arguments,
                    } => {
                        let call = self.tool_calls.entry(*index).or_default();
                        if let Some(id) = id {
                            call.0.clone_from(id);
                        }
                        if let Some(name) = name {
                            call.1.push_str(name);
                        }
                        if let Some(arguments) = arguments {
                            call.2.push_str(arguments);
                        }
                    }
                }
            }
        }
    }

    /// The answer the chunks add up to.
    pub fn finish(self, id: String) -> ModelResponse {
        let mut content = Vec::new();
        if !self.thought.is_empty() {
            content.push(ContentBlock::Thought {
                text: self.thought,
                signature: None,
            });
        }
        if !self.text.is_empty() {
            content.push(ContentBlock::Text { text: self.text });
        }
        if !self.refusal.is_empty() {
            content.push(ContentBlock::Refusal { text: self.refusal });
        }
        for (id, name, arguments) in self.tool_calls.into_values() {
            content.push(ContentBlock::ToolCall { id, name, arguments });
        }
        let raw_response = (!self.raw_chunks.is_empty()).then(|| self.raw_chunks.join("\n"));
        ModelResponse {
            id,
            choices: vec![ModelChoice {
                index: 0,
                content,
                finish_reason: self.finish_reason,
                logprobs: None,
            }],
            usage: self.usage.unwrap_or_default(),
            system_fingerprint: None,
            raw_response,
            raw_request: None,
            provider_name: String::new(),
            provider_type: String::new(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::ChunkChoice;

    fn chunk(content: Vec<ChunkBlock>, finish: Option<FinishReason>) -> ModelChunk {
        ModelChunk {
            choices: vec![ChunkChoice {
                index: 0,
                content,
                finish_reason: finish,
                ..ChunkChoice::default()
            }],
            ..ModelChunk::default()
        }
    }

    #[test]
    fn text_and_tool_call_pieces_add_up() {
        let mut acc = ChunkAccumulator::default();
        acc.push(&chunk(vec![ChunkBlock::Text { text: "Hel".into() }], None));
        acc.push(&chunk(vec![ChunkBlock::Text { text: "lo".into() }], None));
        acc.push(&chunk(
            vec![ChunkBlock::ToolCall {
                index: 0,
                id: Some("c1".into()),
                name: Some("f".into()),
                arguments: Some("{\"a\"".into()),
            }],
            None,
        ));
        acc.push(&chunk(
            vec![ChunkBlock::ToolCall {
                index: 0,
                id: None,
                name: None,
                arguments: Some(":1}".into()),
            }],
            Some(FinishReason::ToolCall),
        ));
        acc.push(&ModelChunk {
            usage: Some(ModelUsage::new(3, 4)),
            ..ModelChunk::default()
        });
        let response = acc.finish("r".into());
        assert_eq!(
            response.choices[0].content,
            vec![
                ContentBlock::Text { text: "Hello".into() },
                ContentBlock::ToolCall {
                    id: "c1".into(),
                    name: "f".into(),
                    arguments: "{\"a\":1}".into()
                }
            ]
        );
        assert_eq!(response.choices[0].finish_reason, Some(FinishReason::ToolCall));
        assert_eq!(response.usage, ModelUsage::new(3, 4));
    }
}
