//! Streaming for providers that only answer whole: split a complete answer into chunks.

use super::ChunkStream;
use crate::model::{ChunkBlock, ChunkChoice, ContentBlock, FinishReason, ModelChunk, ModelResponse};
use futures::StreamExt;

/// Split a response into chunks: a chunk starting each choice's message, text pieces of about
/// `piece_chars` characters (on word boundaries), the refusal, tool calls, then the finish chunk
/// and — when `include_usage` — a usage chunk with no choices.
pub(crate) fn chunks_from_response(
    response: &ModelResponse,
    piece_chars: usize,
    include_usage: bool,
) -> Vec<ModelChunk> {
    let chunk = |choice: ChunkChoice| ModelChunk {
        choices: vec![choice],
        system_fingerprint: response.system_fingerprint.clone(),
        ..ModelChunk::default()
    };
    let mut chunks = Vec::new();
    for choice in &response.choices {
        let piece = |content: Vec<ChunkBlock>| ChunkChoice {
            index: choice.index,
            content,
            ..ChunkChoice::default()
        };
        chunks.push(chunk(ChunkChoice {
            starts_message: true,
            ..piece(vec![ChunkBlock::Text { text: String::new() }])
        }));
        let text: String = choice
            .content
            .iter()
            .filter_map(|block| match block {
                ContentBlock::Text { text } => Some(text.as_str()),
                _ => None,
            })
            .collect();
        for text in split_text(&text, piece_chars) {
            chunks.push(chunk(piece(vec![ChunkBlock::Text { text }])));
        }
        let mut calls = 0;
        for block in &choice.content {
            match block {
                ContentBlock::Refusal { text } => {
                    chunks.push(chunk(piece(vec![ChunkBlock::Refusal { text: text.clone() }])));
                }
                ContentBlock::ToolCall { id, name, arguments } => {
                    chunks.push(chunk(piece(vec![ChunkBlock::ToolCall {
                        index: calls,
                        id: Some(id.clone()),
                        name: Some(name.clone()),
                        arguments: Some(arguments.clone()),
                    }])));
                    calls += 1;
                }
                _ => {}
            }
        }
        chunks.push(chunk(ChunkChoice {
            finish_reason: Some(choice.finish_reason.unwrap_or(FinishReason::Stop)),
            ..piece(Vec::new())
        }));
    }
    if include_usage {
        chunks.push(ModelChunk {
            usage: Some(response.usage.clone()),
            system_fingerprint: response.system_fingerprint.clone(),
            ..ModelChunk::default()
        });
    }
    chunks
}

/// The same chunks as a stream.
pub(crate) fn stream_from_response(response: &ModelResponse, include_usage: bool) -> ChunkStream {
    futures::stream::iter(chunks_from_response(response, 16, include_usage).into_iter().map(Ok)).boxed()
}

/// Split text into pieces of at least `target` characters ending on whitespace; concatenating the
/// pieces gives the text back exactly.
pub(crate) fn split_text(text: &str, target: usize) -> Vec<String> {
    let mut pieces = Vec::new();
    let mut current = String::new();
    for ch in text.chars() {
        current.push(ch);
        if ch.is_whitespace() && current.chars().count() >= target.max(1) {
            pieces.push(std::mem::take(&mut current));
        }
    }
    if !current.is_empty() {
        pieces.push(current);
    }
    pieces
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::{ModelChoice, ModelUsage};

    fn response(content: Vec<ContentBlock>) -> ModelResponse {
        ModelResponse {
            id: "chatcmpl-1".into(),
            choices: vec![ModelChoice {
                index: 0,
                content,
                finish_reason: Some(FinishReason::Length),
                logprobs: None,
            }],
            usage: ModelUsage::new(2, 3),
            system_fingerprint: None,
            raw_response: None,
            raw_request: None,
            provider_name: String::new(),
            provider_type: String::new(),
        }
    }

    fn texts(chunks: &[ModelChunk]) -> String {
        chunks
            .iter()
            .flat_map(|c| c.choices.iter().flat_map(|choice| choice.content.iter()))
            .filter_map(|block| match block {
                ChunkBlock::Text { text } => Some(text.as_str()),
                _ => None,
            })
            .collect()
    }

    #[test]
    fn pieces_rejoin_exactly() {
        let text = "one two  three\nfour five six seven";
        for target in [1, 4, 10, 100] {
            assert_eq!(split_text(text, target).concat(), text);
        }
        assert!(split_text(text, 4).len() > 2);
    }

    #[test]
    fn chunks_carry_start_content_finish_and_usage() {
        let answer = response(vec![ContentBlock::text_block("alpha beta gamma delta")]);
        let chunks = chunks_from_response(&answer, 5, true);
        assert!(chunks[0].choices[0].starts_message);
        assert_eq!(texts(&chunks), "alpha beta gamma delta");
        let finish = &chunks[chunks.len() - 2];
        assert_eq!(finish.choices[0].finish_reason, Some(FinishReason::Length));
        let last = chunks.last().unwrap();
        assert!(last.choices.is_empty());
        assert_eq!(last.usage, Some(ModelUsage::new(2, 3)));
    }

    #[test]
    fn tool_calls_are_numbered_per_choice() {
        let call = |id: &str| ContentBlock::ToolCall {
            id: id.into(),
            name: "f".into(),
            arguments: "{}".into(),
        };
        let chunks = chunks_from_response(&response(vec![call("a"), call("b")]), 5, false);
        let indexes: Vec<u32> = chunks
            .iter()
            .flat_map(|c| c.choices.iter().flat_map(|choice| choice.content.iter()))
            .filter_map(|block| match block {
                ChunkBlock::ToolCall { index, .. } => Some(*index),
                _ => None,
            })
            .collect();
        assert_eq!(indexes, vec![0, 1]);
        assert!(chunks.iter().all(|c| c.usage.is_none()));
    }
}
