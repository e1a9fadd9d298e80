//! Streaming for providers that only answer whole: split a complete answer into chunks.

use super::ChunkStream;
use crate::openai::chat::{
    ChatCompletion, ChatCompletionChunk, ChunkChoice, ChunkDelta, FunctionCallDelta, ToolCallDelta,
};
use futures::StreamExt;

/// Split a completion into OpenAI-style chunks: a role chunk, content pieces of about
/// `piece_chars` characters (on word boundaries), tool calls, then the finish chunk and — when
/// `include_usage` — a usage chunk with no choices.
pub fn chunks_from_completion(
    completion: &ChatCompletion,
    piece_chars: usize,
    include_usage: bool,
) -> Vec<ChatCompletionChunk> {
    let chunk = |choices: Vec<ChunkChoice>| ChatCompletionChunk {
        id: completion.id.clone(),
        object: "chat.completion.chunk".to_owned(),
        created: completion.created,
        model: completion.model.clone(),
        choices,
        usage: None,
        system_fingerprint: completion.system_fingerprint.clone(),
    };
    let delta_choice = |index: u32, delta: ChunkDelta, finish: Option<String>| ChunkChoice {
        index,
        delta,
        logprobs: None,
        finish_reason: finish,
    };
    let mut chunks = Vec::new();
    for choice in &completion.choices {
        let role = ChunkDelta {
            role: Some("assistant".to_owned()),
            content: Some(String::new()),
            ..ChunkDelta::default()
        };
        chunks.push(chunk(vec![delta_choice(choice.index, role, None)]));
        if let Some(content) = &choice.message.content {
            for piece in split_text(content, piece_chars) {
                let delta = ChunkDelta {
                    content: Some(piece),
                    ..ChunkDelta::default()
                };
                chunks.push(chunk(vec![delta_choice(choice.index, delta, None)]));
            }
        }
        for (position, call) in choice.message.tool_calls.iter().flatten().enumerate() {
            let delta = ChunkDelta {
                tool_calls: Some(vec![ToolCallDelta {
                    index: u32::try_from(position).unwrap_or(u32::MAX),
                    id: Some(call.id.clone()),
                    kind: Some("function".to_owned()),
                    function: Some(FunctionCallDelta {
                        name: Some(call.function.name.clone()),
                        arguments: Some(call.function.arguments.clone()),
                    }),
                }]),
                ..ChunkDelta::default()
            };
            chunks.push(chunk(vec![delta_choice(choice.index, delta, None)]));
        }
        let finish = choice.finish_reason.clone().or_else(|| Some("stop".to_owned()));
        chunks.push(chunk(vec![delta_choice(choice.index, ChunkDelta::default(), finish)]));
    }
    if include_usage {
        let mut usage_chunk = chunk(Vec::new());
        usage_chunk.usage = Some(completion.usage.clone());
        chunks.push(usage_chunk);
    }
    chunks
}

/// The same chunks as a stream.
pub fn stream_from_completion(completion: &ChatCompletion, include_usage: bool) -> ChunkStream {
    futures::stream::iter(
        chunks_from_completion(completion, 16, include_usage)
            .into_iter()
            .map(Ok),
    )
    .boxed()
}

/// Split text into pieces of at least `target` characters ending on whitespace; concatenating the
/// pieces gives the text back exactly.
pub fn split_text(text: &str, target: usize) -> Vec<String> {
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
    use crate::openai::chat::{AssistantMessage, Choice, Usage};

    fn completion(content: &str) -> ChatCompletion {
        ChatCompletion {
            id: "chatcmpl-1".into(),
            object: "chat.completion".into(),
            created: 7,
            model: "m".into(),
            choices: vec![Choice {
                index: 0,
                message: AssistantMessage {
                    role: "assistant".into(),
                    content: Some(content.into()),
                    tool_calls: None,
                    refusal: None,
                },
                logprobs: None,
                finish_reason: Some("length".into()),
            }],
            usage: Usage::new(2, 3),
            system_fingerprint: None,
        }
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
    fn chunks_carry_role_content_finish_and_usage() {
        let chunks = chunks_from_completion(&completion("alpha beta gamma delta"), 5, true);
        assert_eq!(chunks[0].choices[0].delta.role.as_deref(), Some("assistant"));
        let text: String = chunks
            .iter()
            .flat_map(|c| c.choices.iter())
            .filter_map(|c| c.delta.content.clone())
            .collect();
        assert_eq!(text, "alpha beta gamma delta");
        let finish = &chunks[chunks.len() - 2];
        assert_eq!(finish.choices[0].finish_reason.as_deref(), Some("length"));
        let last = chunks.last().unwrap();
        assert!(last.choices.is_empty());
        assert_eq!(last.usage.as_ref().unwrap().total_tokens, 5);
        assert!(chunks.iter().all(|c| c.id == "chatcmpl-1"));
    }
}
