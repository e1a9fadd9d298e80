//! LMI answers → [`ModelResponse`]: the rolling-batch object, TGI's one-element array, the
//! dynamic-batch list, LMI's `chat.completion`, and embedding vectors.

use super::protocol::{finish_reason_from_lmi, is_error_line, reported_error, MODEL_ERROR_STATUS};
use crate::config::LmiSchema;
use crate::model::{ContentBlock, FinishReason, ModelChoice, ModelResponse, ModelUsage};
use crate::openai::chat::ChatCompletion;
use crate::openai::from_model::completion_to_model;
use crate::providers::ProviderError;
use serde::Deserialize;
use serde_json::Value;

/// One generation: `generated_text` and, when asked, `details`.
#[derive(Debug, Deserialize)]
pub struct Generation {
    #[serde(default)]
    pub generated_text: Option<String>,
    #[serde(default)]
    pub details: Option<Details>,
}

/// What LMI reports about a generation (`details: true`).
#[derive(Debug, Default, Deserialize)]
pub(crate) struct Details {
    /// LMI's own examples spell it `finish reason`.
    #[serde(default, alias = "finish reason")]
    pub finish_reason: Option<String>,
    #[serde(default)]
    pub generated_tokens: Option<u64>,
    #[serde(default)]
    pub tokens: Option<Vec<Value>>,
    /// One entry per prompt token.
    #[serde(default)]
    pub prefill: Option<Vec<Value>>,
}

impl Details {
    /// Tokens read (the prefill, when returned; else 0) and written (`generated_tokens`, else
    /// the tokens listed or counted in a stream).
    pub fn usage(&self, counted_tokens: u64) -> ModelUsage {
        let output = self
            .generated_tokens
            .or_else(|| self.tokens.as_ref().map(|t| t.len() as u64))
            .unwrap_or(counted_tokens);
        let input = self.prefill.as_ref().map_or(0, |p| p.len() as u64);
        ModelUsage::new(input, output)
    }
}

/// A 200 whose generation ended with `finish_reason: "error"`: the model failed.
pub(crate) fn model_reported_error(body: Option<Value>) -> ProviderError {
    ProviderError::Http {
        status: MODEL_ERROR_STATUS,
        message: "the model reported an error while generating (LMI finish_reason \"error\")".to_owned(),
        retry_after: None,
        body,
    }
}

fn invalid(what: &str, error: impl std::fmt::Display) -> ProviderError {
    ProviderError::InvalidResponse(format!("LMI {what}: {error}"))
}

/// A non-streamed chat answer on `schema`; `raw` is the body as received.
pub fn chat_answer(schema: LmiSchema, raw: &[u8]) -> Result<ModelResponse, ProviderError> {
    let value: Value = serde_json::from_slice(raw).map_err(|e| invalid("answer is not JSON", e))?;
    if let Some(reported) = reported_error(&value) {
        return Err(ProviderError::Http {
            status: reported.status,
            message: reported.message,
            retry_after: None,
            body: Some(value),
        });
    }
    let raw_text = String::from_utf8_lossy(raw).into_owned();
    if schema == LmiSchema::Chat {
        return chat_completion_answer(value, raw_text);
    }
    // The rolling-batch object; TGI's and dynamic batch's lists (one prompt was sent).
    let first = match value {
        Value::Array(items) => items
            .into_iter()
            .next()
            .ok_or_else(|| invalid("answer", "an empty list"))?,
        other => other,
    };
    let generation: Generation = serde_json::from_value(first.clone()).map_err(|e| invalid("answer", e))?;
    let details = generation.details.unwrap_or_default();
    if is_error_line(&first) {
        return Err(model_reported_error(Some(first)));
    }
    let text = generation
        .generated_text
        .ok_or_else(|| invalid("answer", "no `generated_text`"))?;
    Ok(ModelResponse {
        id: uuid::Uuid::now_v7().to_string(),
        choices: vec![ModelChoice {
            index: 0,
            content: vec![ContentBlock::Text { text }],
            finish_reason: Some(finish_reason_from_lmi(details.finish_reason.as_deref())),
            logprobs: None,
        }],
        usage: details.usage(0),
        system_fingerprint: None,
        raw_response: Some(raw_text),
        raw_request: None,
        provider_name: String::new(),
        provider_type: String::new(),
    })
}

/// LMI's `chat.completion` (its `id` minted when missing); a choice finished with `error` is an error.
fn chat_completion_answer(mut value: Value, raw_text: String) -> Result<ModelResponse, ProviderError> {
    let failed = value["choices"]
        .as_array()
        .is_some_and(|choices| choices.iter().any(|c| c["finish_reason"] == "error"));
    if failed {
        return Err(model_reported_error(Some(value)));
    }
    if let Some(object) = value.as_object_mut() {
        object
            .entry("id")
            .or_insert_with(|| Value::String(uuid::Uuid::now_v7().to_string()));
    }
    let reasons = lmi_finish_reasons(&value);
    let completion: ChatCompletion = serde_json::from_value(value).map_err(|e| invalid("chat completion", e))?;
    let mut response = completion_to_model(completion, Some(raw_text));
    for choice in &mut response.choices {
        if let Some(reason) = reasons.get(&u64::from(choice.index)) {
            choice.finish_reason = Some(*reason);
        }
    }
    Ok(response)
}

/// The finish reasons of a chat answer's (or chunk's) choices by index, read with LMI's map (its
/// `eos_token` and `stop_sequence` besides OpenAI's names).
pub(crate) fn lmi_finish_reasons(value: &Value) -> std::collections::HashMap<u64, FinishReason> {
    value["choices"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|choice| {
            let reason = choice["finish_reason"].as_str()?;
            let index = choice["index"].as_u64().unwrap_or(0);
            Some((index, finish_reason_from_lmi(Some(reason))))
        })
        .collect()
}

/// The vectors of an embedding answer: a list of vectors, `{"embeddings": [...]}`, or a list
/// holding that list; `expected` of them.
pub(crate) fn embedding_vectors(raw: &[u8], expected: usize) -> Result<Vec<Vec<f32>>, ProviderError> {
    #[derive(Deserialize)]
    #[serde(untagged)]
    enum Answer {
        Vectors(Vec<Vec<f32>>),
        Nested(Vec<Vec<Vec<f32>>>),
        Object { embeddings: Vec<Vec<f32>> },
    }
    let vectors = match serde_json::from_slice(raw).map_err(|e| invalid("embedding answer", e))? {
        Answer::Vectors(vectors) | Answer::Object { embeddings: vectors } => vectors,
        Answer::Nested(mut lists) if lists.len() == 1 => lists.swap_remove(0),
        Answer::Nested(_) => return Err(invalid("embedding answer", "several lists of vectors")),
    };
    if vectors.len() != expected {
        return Err(invalid(
            "embedding answer",
            format!("expected {expected} vectors, got {}", vectors.len()),
        ));
    }
    Ok(vectors)
}
