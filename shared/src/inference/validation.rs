//! Request checks beyond the JSON shape, each naming the offending parameter.

use super::InferenceError;
use crate::openai::chat::{ChatCompletionRequest, ChatMessage, ToolChoice};
use crate::openai::embeddings::{EmbeddingInput, EmbeddingRequest};

pub fn validate_chat(request: &ChatCompletionRequest) -> Result<(), InferenceError> {
    if request.messages.is_empty() {
        return Err(InferenceError::invalid(
            "Invalid 'messages': empty array. Expected an array with minimum length 1.",
            "messages",
        ));
    }
    if let Some(n) = request.n {
        if n != 1 {
            return Err(InferenceError::invalid("Only n=1 is supported.", "n"));
        }
    }
    if let Some(t) = request.temperature {
        if !(0.0..=2.0).contains(&t) {
            return Err(InferenceError::invalid(
                format!("Invalid 'temperature': {t}. Expected a value between 0 and 2."),
                "temperature",
            ));
        }
    }
    if let Some(p) = request.top_p {
        if !(0.0..=1.0).contains(&p) {
            return Err(InferenceError::invalid(
                format!("Invalid 'top_p': {p}. Expected a value between 0 and 1."),
                "top_p",
            ));
        }
    }
    for (name, value) in [
        ("max_tokens", request.max_tokens),
        ("max_completion_tokens", request.max_completion_tokens),
    ] {
        if value == Some(0) {
            return Err(InferenceError::invalid(
                format!("Invalid '{name}': must be at least 1."),
                name,
            ));
        }
    }
    if request.stream_options.is_some() && !request.wants_stream() {
        return Err(InferenceError::invalid(
            "The 'stream_options' parameter is only allowed when 'stream' is enabled.",
            "stream_options",
        ));
    }
    for (index, message) in request.messages.iter().enumerate() {
        if let ChatMessage::Tool { tool_call_id, .. } = message {
            if tool_call_id.is_empty() {
                return Err(InferenceError::invalid(
                    "Tool messages need a non-empty 'tool_call_id'.",
                    format!("messages[{index}].tool_call_id"),
                ));
            }
        }
    }
    if let Some(ToolChoice::Named(named)) = &request.tool_choice {
        let known = request
            .tools
            .iter()
            .flatten()
            .any(|t| t.function.name == named.function.name);
        if !known {
            return Err(InferenceError::invalid(
                format!(
                    "Tool choice '{}' is not one of the provided tools.",
                    crate::user_text::excerpt(&named.function.name)
                ),
                "tool_choice",
            ));
        }
    }
    Ok(())
}

pub fn validate_embeddings(request: &EmbeddingRequest) -> Result<(), InferenceError> {
    let empty = match &request.input {
        EmbeddingInput::Text(text) => text.is_empty(),
        EmbeddingInput::Texts(texts) => texts.is_empty() || texts.iter().any(String::is_empty),
        EmbeddingInput::Tokens(tokens) => tokens.is_empty(),
        EmbeddingInput::TokenBatches(batches) => batches.is_empty() || batches.iter().any(Vec::is_empty),
    };
    if empty {
        return Err(InferenceError::invalid(
            "'input' must not be empty or contain empty items.",
            "input",
        ));
    }
    if request.input.len() > 2048 {
        return Err(InferenceError::invalid("'input' may hold at most 2048 items.", "input"));
    }
    if let Some(dimensions) = request.dimensions {
        if dimensions == 0 || dimensions > 8192 {
            return Err(InferenceError::invalid(
                "'dimensions' must be between 1 and 8192.",
                "dimensions",
            ));
        }
    }
    Ok(())
}
