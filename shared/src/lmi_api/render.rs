//! Neutral answers in LMI's non-streamed shapes.
//!
//! The gateway sees text, not the model's tokenizer: `details.generated_tokens` is the provider's
//! output token count (see [`generated_tokens`] when there are several sequences),
//! `details.tokens` is left out (no per-token ids or log-probabilities), and so is
//! `details.prefill` (asked with `decoder_input_details`): an empty list would read as a prompt of
//! no tokens.

use super::params::GenerationParameters;
use super::LmiApiError;
use crate::model::{ContentBlock, ModelChoice, ModelResponse};
use crate::providers::lmi::finish_reason_to_lmi;
use serde::Serialize;
use serde_json::{json, Map, Value};

/// `value` as JSON; a value that cannot be rendered is the gateway's error, never a `null` answer.
pub fn to_json<T: Serialize>(value: &T) -> Result<Value, LmiApiError> {
    serde_json::to_value(value).map_err(|e| LmiApiError::Render(e.to_string()))
}

/// The text of a choice (its text blocks, in order).
pub(crate) fn choice_text(choice: &ModelChoice) -> String {
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
pub(crate) fn full_text(prompt: &str, generated: &str, parameters: &GenerationParameters) -> String {
    if parameters.return_full_text {
        format!("{prompt}{generated}")
    } else {
        generated.to_owned()
    }
}

/// `{"generated_text", "details"?}` for a rolling-batch request.
pub(crate) fn rolling_answer(response: &ModelResponse, prompt: &str, parameters: &GenerationParameters) -> Value {
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
        let counts = generated_tokens(response);
        details.insert(
            "generated_tokens".to_owned(),
            json!(counts.first().copied().unwrap_or(0)),
        );
        details.insert("inputs".to_owned(), json!(prompt));
        let others: Vec<Value> = response
            .choices
            .iter()
            .zip(counts)
            .skip(1)
            .map(|(choice, tokens)| {
                json!({
                    "generated_text": full_text(prompt, &choice_text(choice), parameters),
                    "finish_reason": finish_reason_to_lmi(choice.finish_reason),
                    "generated_tokens": tokens,
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

/// Tokens generated for each choice, in order. Providers report one output count for all the
/// choices: a single choice has it all; several share it in proportion to their text's length
/// (a choice with text gets at least one token), unless a choice's OpenAI-shaped `logprobs`
/// (`{"content": [one entry per token]}`) counts its tokens exactly.
pub fn generated_tokens(response: &ModelResponse) -> Vec<u64> {
    let total = response.usage.output_tokens;
    if response.choices.len() <= 1 {
        return vec![total; response.choices.len()];
    }
    let lengths: Vec<u64> = response
        .choices
        .iter()
        .map(|choice| u64::try_from(choice_text(choice).chars().count()).unwrap_or(u64::MAX))
        .collect();
    let all_text = lengths
        .iter()
        .fold(0_u64, |sum, length| sum.saturating_add(*length))
        .max(1);
    response
        .choices
        .iter()
        .zip(&lengths)
        .map(|(choice, &length)| {
            counted_logprobs(choice).unwrap_or_else(|| {
                let share = u128::from(total) * u128::from(length) / u128::from(all_text);
                let share = u64::try_from(share).unwrap_or(total);
                if length > 0 {
                    share.max(1)
                } else {
                    share
                }
            })
        })
        .collect()
}

/// The number of token entries in a choice's OpenAI-shaped `logprobs`, if it has them.
fn counted_logprobs(choice: &ModelChoice) -> Option<u64> {
    let entries = choice.logprobs.as_ref()?.get("content")?.as_array()?;
    u64::try_from(entries.len()).ok()
}

/// `{"generated_text"}` for one prompt of a dynamic batch.
pub(crate) fn batch_answer(response: &ModelResponse, prompt: &str, parameters: &GenerationParameters) -> Value {
    let generated = response.choices.first().map(choice_text).unwrap_or_default();
    json!({"generated_text": full_text(prompt, &generated, parameters)})
}
