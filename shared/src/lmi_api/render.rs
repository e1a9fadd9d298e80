//! Neutral answers in LMI's non-streamed shapes.
//!
//! The gateway sees text, not the model's tokenizer: `details.generated_tokens` is the provider's
//! output token count, `details.tokens` is left out (no per-token ids or log-probabilities), and
//! `details.prefill` (asked with `decoder_input_details`) is an empty list.

use super::params::GenerationParameters;
use crate::model::{ContentBlock, FinishReason, ModelChoice, ModelResponse};
use serde_json::{json, Map, Value};

/// LMI's name for why generation stopped.
pub fn finish_reason_to_lmi(reason: Option<FinishReason>) -> &'static str {
    match reason {
        Some(FinishReason::Length) => "length",
        Some(FinishReason::StopSequence) => "stop_sequence",
        Some(FinishReason::Stop | FinishReason::ToolCall | FinishReason::ContentFilter | FinishReason::Unknown)
        | None => "eos_token",
    }
}

/// The text of a choice (its text blocks, in order).
pub fn choice_text(choice: &ModelChoice) -> String {
    choice
        .content
        .iter()
        .filter_map(|block| match block {
            ContentBlock::Text { text } => Some(text.as_str()),
            _ => None,
        })
        .collect()
}

/// `generated_text`, with the prompt before it when `return_full_text` was asked.
pub fn full_text(prompt: &str, generated: &str, parameters: &GenerationParameters) -> String {
    if parameters.return_full_text {
        format!("{prompt}{generated}")
    } else {
        generated.to_owned()
    }
}

/// `{"generated_text", "details"?}` for a rolling-batch request.
pub fn rolling_answer(response: &ModelResponse, prompt: &str, parameters: &GenerationParameters) -> Value {
    let first = response.choices.first();
    let generated = first.map(choice_text).unwrap_or_default();
    let mut answer = Map::new();
    answer.insert(
        "generated_text".to_owned(),
        json!(full_text(prompt, &generated, parameters)),
    );
    if parameters.details {
        let mut details = Map::new();
        details.insert(
            "finish_reason".to_owned(),
            json!(finish_reason_to_lmi(first.and_then(|c| c.finish_reason))),
        );
        details.insert("generated_tokens".to_owned(), json!(response.usage.output_tokens));
        details.insert("inputs".to_owned(), json!(prompt));
        if parameters.decoder_input_details {
            details.insert("prefill".to_owned(), json!([]));
        }
        let others: Vec<Value> = response
            .choices
            .iter()
            .skip(1)
            .map(|choice| {
                json!({
                    "generated_text": full_text(prompt, &choice_text(choice), parameters),
                    "finish_reason": finish_reason_to_lmi(choice.finish_reason),
                })
            })
            .collect();
        if !others.is_empty() {
            details.insert("best_of_sequences".to_owned(), Value::Array(others));
        }
        answer.insert("details".to_owned(), Value::Object(details));
    }
    Value::Object(answer)
}

/// `{"generated_text"}` for one prompt of a dynamic batch.
pub fn batch_answer(response: &ModelResponse, prompt: &str, parameters: &GenerationParameters) -> Value {
    let generated = response.choices.first().map(choice_text).unwrap_or_default();
    json!({"generated_text": full_text(prompt, &generated, parameters)})
}
