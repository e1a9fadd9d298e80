//! OpenAI chat completion and chunk ⇄ [`ModelResponse`] / [`ModelChunk`]: OUT for the OpenAI
//! routes and batch lines, IN for OpenAI-compatible providers.

use super::chat::{
    AssistantMessage, ChatCompletion, ChatCompletionChunk, Choice, ChunkChoice as WireChunkChoice, ChunkDelta,
    FunctionCall, FunctionCallDelta, ToolCall, ToolCallDelta, Usage,
};
use crate::model::{
    ChunkBlock, ChunkChoice, ContentBlock, FinishReason, ModelChoice, ModelChunk, ModelResponse, ModelUsage,
};

/// What the answer is called on the wire: id, creation time and model name.
#[derive(Debug, Clone, Copy)]
pub(crate) struct AnswerIdentity<'a> {
    pub id: &'a str,
    pub created: i64,
    pub model: &'a str,
}

pub(crate) fn finish_reason_to_model(reason: &str) -> FinishReason {
    match reason {
        "stop" => FinishReason::Stop,
        "length" => FinishReason::Length,
        "tool_calls" | "function_call" => FinishReason::ToolCall,
        "content_filter" => FinishReason::ContentFilter,
        _ => FinishReason::Unknown,
    }
}

/// OpenAI has no `stop_sequence` or `unknown`: both are reported as `stop`.
pub(crate) fn finish_reason_to_wire(reason: FinishReason) -> &'static str {
    match reason {
        FinishReason::Stop | FinishReason::StopSequence | FinishReason::Unknown => "stop",
        FinishReason::Length => "length",
        FinishReason::ToolCall => "tool_calls",
        FinishReason::ContentFilter => "content_filter",
    }
}

pub(crate) fn usage_to_model(usage: &Usage) -> ModelUsage {
    ModelUsage {
        input_tokens: usage.prompt_tokens,
        output_tokens: usage.completion_tokens,
        input_details: usage.prompt_tokens_details.clone(),
        output_details: usage.completion_tokens_details.clone(),
    }
}

pub(crate) fn usage_to_wire(usage: &ModelUsage) -> Usage {
    Usage {
        prompt_tokens_details: usage.input_details.clone(),
        completion_tokens_details: usage.output_details.clone(),
        ..Usage::new(usage.input_tokens, usage.output_tokens)
    }
}

/// An upstream completion as a neutral response; `raw` is the body as received.
pub fn completion_to_model(completion: ChatCompletion, raw: Option<String>) -> ModelResponse {
    ModelResponse {
        id: completion.id,
        choices: completion
            .choices
            .into_iter()
            .map(|choice| {
                let message = choice.message;
                let mut content = Vec::new();
                if let Some(text) = message.reasoning_content.filter(|t| !t.is_empty()) {
                    content.push(ContentBlock::Thought { text, signature: None });
                }
                if let Some(text) = message.content {
                    content.push(ContentBlock::Text { text });
                }
                if let Some(text) = message.refusal {
                    content.push(ContentBlock::Refusal { text });
                }
                for call in message.tool_calls.into_iter().flatten() {
                    content.push(ContentBlock::ToolCall {
                        id: call.id,
                        name: call.function.name,
                        arguments: call.function.arguments,
                    });
                }
                ModelChoice {
                    index: choice.index,
                    content,
                    finish_reason: choice.finish_reason.as_deref().map(finish_reason_to_model),
                    logprobs: choice.logprobs,
                }
            })
            .collect(),
        usage: usage_to_model(&completion.usage),
        system_fingerprint: completion.system_fingerprint,
        raw_response: raw,
        raw_request: None,
        provider_name: String::new(),
        provider_type: String::new(),
    }
}

/// A neutral response as the completion an OpenAI client receives. Text blocks are joined into
/// `content` (`null` when there is none); thoughts and unknown blocks have no OpenAI field.
pub(crate) fn model_to_completion(response: ModelResponse, identity: AnswerIdentity<'_>) -> ChatCompletion {
    ChatCompletion {
        id: identity.id.to_owned(),
        object: "chat.completion".to_owned(),
        created: identity.created,
        model: identity.model.to_owned(),
        choices: response
            .choices
            .into_iter()
            .map(|choice| {
                let mut text: Option<String> = None;
                let mut refusal: Option<String> = None;
                let mut calls = Vec::new();
                for block in choice.content {
                    match block {
                        ContentBlock::Text { text: piece } => text.get_or_insert_with(String::new).push_str(&piece),
                        ContentBlock::Refusal { text: piece } => {
                            refusal.get_or_insert_with(String::new).push_str(&piece)
                        }
                        ContentBlock::ToolCall { id, name, arguments } => calls.push(ToolCall {
                            id,
                            kind: "function".to_owned(),
                            function: FunctionCall { name, arguments },
                        }),
                        _ => {}
                    }
                }
                Choice {
                    index: choice.index,
                    message: AssistantMessage {
                        role: "assistant".to_owned(),
                        content: text,
                        tool_calls: (!calls.is_empty()).then_some(calls),
                        refusal,
                        reasoning_content: None,
                    },
                    logprobs: choice.logprobs,
                    finish_reason: choice.finish_reason.map(|r| finish_reason_to_wire(r).to_owned()),
                }
            })
            .collect(),
        usage: usage_to_wire(&response.usage),
        system_fingerprint: response.system_fingerprint,
    }
}

/// An upstream chunk as a neutral chunk; `raw` is the chunk as received.
pub(crate) fn chunk_to_model(chunk: ChatCompletionChunk, raw: Option<String>) -> ModelChunk {
    ModelChunk {
        choices: chunk
            .choices
            .into_iter()
            .map(|choice| {
                let delta = choice.delta;
                let mut content = Vec::new();
                if let Some(text) = delta.reasoning_content.filter(|t| !t.is_empty()) {
                    content.push(ChunkBlock::Thought { text });
                }
                if let Some(text) = delta.content {
                    content.push(ChunkBlock::Text { text });
                }
                if let Some(text) = delta.refusal {
                    content.push(ChunkBlock::Refusal { text });
                }
                for call in delta.tool_calls.into_iter().flatten() {
                    let function = call.function.unwrap_or_default();
                    content.push(ChunkBlock::ToolCall {
                        index: call.index,
                        id: call.id,
                        name: function.name,
                        arguments: function.arguments,
                    });
                }
                ChunkChoice {
                    index: choice.index,
                    starts_message: delta.role.is_some(),
                    content,
                    finish_reason: choice.finish_reason.as_deref().map(finish_reason_to_model),
                    logprobs: choice.logprobs,
                }
            })
            .collect(),
        usage: chunk.usage.as_ref().map(usage_to_model),
        system_fingerprint: chunk.system_fingerprint,
        raw_chunk: raw,
    }
}

/// A neutral chunk as the chunk an OpenAI client receives.
pub(crate) fn model_to_chunk(chunk: ModelChunk, identity: AnswerIdentity<'_>) -> ChatCompletionChunk {
    ChatCompletionChunk {
        id: identity.id.to_owned(),
        object: "chat.completion.chunk".to_owned(),
        created: identity.created,
        model: identity.model.to_owned(),
        choices: chunk
            .choices
            .into_iter()
            .map(|choice| {
                let mut delta = ChunkDelta {
                    role: choice.starts_message.then(|| "assistant".to_owned()),
                    ..ChunkDelta::default()
                };
                let mut calls = Vec::new();
                for block in choice.content {
                    match block {
                        ChunkBlock::Text { text } => delta.content.get_or_insert_with(String::new).push_str(&text),
                        ChunkBlock::Refusal { text } => delta.refusal.get_or_insert_with(String::new).push_str(&text),
                        ChunkBlock::ToolCall {
                            index,
                            id,
                            name,
                            arguments,
                        } => calls.push(ToolCallDelta {
                            index,
                            kind: id.as_ref().map(|_| "function".to_owned()),
                            id,
                            function: (name.is_some() || arguments.is_some())
                                .then_some(FunctionCallDelta { name, arguments }),
                        }),
                        ChunkBlock::Thought { .. } => {}
                    }
                }
                delta.tool_calls = (!calls.is_empty()).then_some(calls);
                WireChunkChoice {
                    index: choice.index,
                    delta,
                    logprobs: choice.logprobs,
                    finish_reason: choice.finish_reason.map(|r| finish_reason_to_wire(r).to_owned()),
                }
            })
            .collect(),
        usage: chunk.usage.as_ref().map(usage_to_wire),
        system_fingerprint: chunk.system_fingerprint,
    }
}

#[cfg(test)]
mod tests;
