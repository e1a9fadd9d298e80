//! Request checks beyond the JSON shape, each naming the offending parameter and giving
//! OpenAI's error code.

mod bounds;

use super::InferenceError;
use crate::openai::chat::{ChatCompletionRequest, ChatMessage, ResponseFormat, StopSequences, ToolChoice};
use crate::openai::embeddings::{EmbeddingInput, EmbeddingRequest};
use crate::openai::metadata::{self, MetadataProblem};
use crate::schema_limits::{SchemaLimitError, SCHEMA_LIMITS};
use crate::user_text::excerpt;
use bounds::{
    array_at_most, array_not_empty, decimal_in, integer_in, key_named, object_at_most, string_too_long,
    too_many_properties,
};

/// OpenAI's limits on chat completion parameters.
pub(crate) const MAX_STOP_SEQUENCES: usize = 4;
pub(crate) const MAX_CHOICES: i64 = 128;
pub(crate) const MAX_TOP_LOGPROBS: i64 = 20;
pub(crate) const MAX_LOGIT_BIAS_ENTRIES: usize = 300;
pub(crate) const MAX_LOGIT_BIAS: f64 = 100.0;

pub(crate) fn validate_chat(request: &ChatCompletionRequest) -> Result<(), InferenceError> {
    array_not_empty("messages", request.messages.len())?;
    check_sampling(request)?;
    check_output_limits(request)?;
    check_logit_bias(request)?;
    check_metadata(request)?;
    check_schemas(request)?;
    if request.stream_options.is_some() && !request.wants_stream() {
        return Err(InferenceError::invalid(
            "The 'stream_options' parameter is only allowed when 'stream' is enabled.",
            "stream_options",
            "invalid_value",
        ));
    }
    for (index, message) in request.messages.iter().enumerate() {
        if let ChatMessage::Tool { tool_call_id, .. } = message {
            if tool_call_id.is_empty() {
                return Err(InferenceError::invalid(
                    "Tool messages need a non-empty 'tool_call_id'.",
                    format!("messages[{index}].tool_call_id"),
                    "invalid_value",
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
                    excerpt(&named.function.name)
                ),
                "tool_choice",
                "invalid_value",
            ));
        }
    }
    Ok(())
}

/// The JSON Schemas of `response_format` and of the tools: within [`SCHEMA_LIMITS`] (a model, or
/// the dummy's generator, walks them).
fn check_schemas(request: &ChatCompletionRequest) -> Result<(), InferenceError> {
    let refuse = |param: String, error: SchemaLimitError| {
        InferenceError::invalid(
            format!("Invalid schema for '{param}': {error}."),
            param,
            "invalid_value",
        )
    };
    if let Some(ResponseFormat::JsonSchema { json_schema }) = &request.response_format {
        if let Some(schema) = json_schema.get("schema") {
            SCHEMA_LIMITS
                .check(schema)
                .map_err(|e| refuse("response_format.json_schema.schema".to_owned(), e))?;
        }
    }
    for (index, tool) in request.tools.iter().flatten().enumerate() {
        if let Some(parameters) = &tool.function.parameters {
            SCHEMA_LIMITS
                .check(parameters)
                .map_err(|e| refuse(format!("tools[{index}].function.parameters"), e))?;
        }
    }
    Ok(())
}

/// `temperature`, `top_p`, the penalties, `n`, `logprobs`/`top_logprobs`.
fn check_sampling(request: &ChatCompletionRequest) -> Result<(), InferenceError> {
    for (name, value, min, max) in [
        ("temperature", request.temperature, 0.0, 2.0),
        ("top_p", request.top_p, 0.0, 1.0),
        ("presence_penalty", request.presence_penalty, -2.0, 2.0),
        ("frequency_penalty", request.frequency_penalty, -2.0, 2.0),
    ] {
        if let Some(value) = value {
            decimal_in(name, value, min, max)?;
        }
    }
    if let Some(n) = request.n {
        integer_in("n", n, 1, Some(MAX_CHOICES))?;
    }
    if let Some(top) = request.top_logprobs {
        integer_in("top_logprobs", top, 0, Some(MAX_TOP_LOGPROBS))?;
        if request.logprobs != Some(true) {
            return Err(InferenceError::invalid(
                "Invalid value for 'top_logprobs': 'logprobs' must be true when 'top_logprobs' is given.",
                "top_logprobs",
                "invalid_value",
            ));
        }
    }
    Ok(())
}

/// `max_tokens` / `max_completion_tokens` and `stop`.
fn check_output_limits(request: &ChatCompletionRequest) -> Result<(), InferenceError> {
    for (name, value) in [
        ("max_tokens", request.max_tokens),
        ("max_completion_tokens", request.max_completion_tokens),
    ] {
        if let Some(value) = value {
            integer_in(name, value, 1, None)?;
        }
    }
    if let Some(StopSequences::Many(stops)) = &request.stop {
        array_at_most("stop", stops.len(), MAX_STOP_SEQUENCES)?;
    }
    Ok(())
}

/// At most 300 token ids, each mapped to a bias in -100..=100.
fn check_logit_bias(request: &ChatCompletionRequest) -> Result<(), InferenceError> {
    let Some(biases) = &request.logit_bias else {
        return Ok(());
    };
    object_at_most("logit_bias", biases.len(), MAX_LOGIT_BIAS_ENTRIES)?;
    for (token, bias) in biases {
        if token.parse::<u32>().is_err() {
            return Err(InferenceError::invalid(
                format!(
                    "Invalid 'logit_bias': the key '{}' is not a token id. Keys must be token ids (non-negative integers).",
                    excerpt(token)
                ),
                "logit_bias",
                "invalid_value",
            ));
        }
        decimal_in("logit_bias", *bias, -MAX_LOGIT_BIAS, MAX_LOGIT_BIAS)?;
    }
    Ok(())
}

/// OpenAI's metadata limits (`openai::metadata`), worded with the chat codes
/// (`object_above_max_properties`, `string_above_max_length`).
fn check_metadata(request: &ChatCompletionRequest) -> Result<(), InferenceError> {
    let Some(pairs) = &request.metadata else {
        return Ok(());
    };
    let checked = metadata::check_pairs(pairs.iter().map(|(key, value)| (key.as_str(), value.as_str())));
    checked.map_err(|problem| match problem {
        MetadataProblem::TooManyPairs { count } => too_many_properties(metadata::PARAM, count, metadata::MAX_PAIRS),
        MetadataProblem::KeyTooLong { key, length } => {
            string_too_long(metadata::PARAM, key_named(key), length, metadata::MAX_KEY_CHARS)
        }
        MetadataProblem::ValueTooLong { key, length } => string_too_long(
            metadata::PARAM,
            format!("the value of '{}'", excerpt(key)),
            length,
            metadata::MAX_VALUE_CHARS,
        ),
    })
}

pub(crate) fn validate_embeddings(request: &EmbeddingRequest) -> Result<(), InferenceError> {
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
            "invalid_value",
        ));
    }
    array_at_most("input", request.input.len(), 2048)?;
    if let Some(dimensions) = request.dimensions {
        integer_in("dimensions", i64::from(dimensions), 1, Some(8192))?;
    }
    Ok(())
}

#[cfg(test)]
mod tests;
