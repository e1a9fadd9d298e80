//! LMI's `parameters` (GenerationParameters, named in `providers::lmi::protocol`): the modelled
//! ones become [`SamplingParams`], the other generation parameters of LMI's lists travel in
//! [`OpenAiPassThrough`] (OpenAI-compatible
//! upstreams such as vLLM read them; LMI upstreams map them back), anything else is refused.
//!
//! `do_sample: false` asks for greedy decoding: the request then carries temperature 0, whatever
//! `temperature` says (LMI ignores it when not sampling). `do_sample: true` without a temperature
//! carries LMI's default, 1.0, so that every provider samples (LMI upstreams sample only when the
//! temperature is above 0). Without `do_sample` the temperature is the client's, or the provider's
//! default.

use super::LmiApiError;
use crate::model::{ContentBlock, Message, ModelRequest, OpenAiPassThrough, Role, SamplingParams, StreamOptions};
use crate::providers::lmi::{is_generation_parameter, PASS_THROUGH_PARAMETERS};
use crate::user_text::excerpt;
use serde_json::{Map, Value};

/// The temperature LMI samples with when `do_sample` is asked without one.
const LMI_DEFAULT_TEMPERATURE: f64 = 1.0;

/// Choices one request may ask for (`n`), at most.
const MAX_CHOICES: i64 = 128;

/// The request's `parameters`, read.
#[derive(Debug, Clone, PartialEq, Default)]
pub(crate) struct GenerationParameters {
    pub sampling: SamplingParams,
    pub pass_through: Map<String, Value>,
    /// Answer with `details`.
    pub details: bool,
    /// Put the prompt before the generated text.
    pub return_full_text: bool,
    /// `details.prefill` is wanted.
    pub decoder_input_details: bool,
}

impl GenerationParameters {
    pub fn parse(parameters: Option<&Value>) -> Result<Self, LmiApiError> {
        let map = match parameters {
            None | Some(Value::Null) => return Ok(Self::default()),
            Some(Value::Object(map)) => map,
            Some(_) => return Err(LmiApiError::invalid("Invalid `parameters`: expected an object.")),
        };
        let unknown: Vec<String> = map
            .keys()
            .filter(|key| !is_generation_parameter(key))
            .map(|key| format!("`{}`", excerpt(key)))
            .collect();
        if !unknown.is_empty() {
            return Err(LmiApiError::invalid(format!(
                "Unknown generation parameter(s) {}: not among LMI's GenerationParameters.",
                unknown.join(", ")
            )));
        }
        // A null is the parameter's default, as if it were not sent.
        let get = |name: &str| map.get(name).filter(|v| !v.is_null());
        if get("stop").and_then(Value::as_bool) == Some(true) {
            return Err(LmiApiError::invalid(
                "Unsupported generation parameter `parameters.stop`: use `stop_sequences`.",
            ));
        }
        let do_sample = optional_bool(get("do_sample"), "do_sample")?;
        let mut temperature = optional_number(get("temperature"), "temperature")?;
        if temperature.is_some_and(|t| t < 0.0) {
            return Err(out_of_range("temperature", "must be at least 0"));
        }
        match do_sample {
            Some(false) => temperature = Some(0.0),
            Some(true) => temperature = temperature.or(Some(LMI_DEFAULT_TEMPERATURE)),
            None => {}
        }
        let top_p = optional_number(get("top_p"), "top_p")?;
        if top_p.is_some_and(|p| p <= 0.0 || p > 1.0) {
            return Err(out_of_range("top_p", "must be above 0 and at most 1"));
        }
        let max_new_tokens = optional_integer(get("max_new_tokens"), "max_new_tokens")?;
        if max_new_tokens.is_some_and(|m| m < 1) {
            return Err(out_of_range("max_new_tokens", "must be at least 1"));
        }
        let n = optional_integer(get("n"), "n")?;
        if n.is_some_and(|n| !(1..=MAX_CHOICES).contains(&n)) {
            return Err(out_of_range("n", "must be between 1 and 128"));
        }
        let logprobs = optional_integer(get("logprobs"), "logprobs")?;
        if logprobs.is_some_and(|l| !(0..=20).contains(&l)) {
            return Err(out_of_range("logprobs", "must be between 0 and 20"));
        }
        let sampling = SamplingParams {
            temperature,
            top_p,
            max_tokens: max_new_tokens.and_then(|m| u64::try_from(m).ok()),
            presence_penalty: optional_number(get("presence_penalty"), "presence_penalty")?,
            frequency_penalty: optional_number(get("frequency_penalty"), "frequency_penalty")?,
            seed: optional_integer(get("seed"), "seed")?,
            stop_sequences: stop_sequences(get("stop_sequences"))?,
            n: n.and_then(|n| u32::try_from(n).ok()),
            logprobs: logprobs.map(|_| true),
            top_logprobs: logprobs.and_then(|l| u32::try_from(l).ok()).filter(|l| *l > 0),
            ..SamplingParams::default()
        };
        let pass_through = map
            .iter()
            .filter(|(key, value)| PASS_THROUGH_PARAMETERS.contains(&key.as_str()) && !value.is_null())
            .map(|(key, value)| (key.clone(), value.clone()))
            .collect();
        Ok(Self {
            sampling,
            pass_through,
            details: optional_bool(get("details"), "details")?.unwrap_or(false),
            return_full_text: optional_bool(get("return_full_text"), "return_full_text")?.unwrap_or(false),
            decoder_input_details: optional_bool(get("decoder_input_details"), "decoder_input_details")?
                .unwrap_or(false),
        })
    }

    /// The neutral request for one prompt on `model`: a user message marked as a complete,
    /// already formatted prompt (`raw_prompt`, so that an LMI upstream does not wrap it in its chat
    /// template again); a streamed one asks for usage, which gives `details.generated_tokens`.
    pub fn model_request(&self, model: &str, prompt: &str, stream: bool) -> ModelRequest {
        ModelRequest {
            model: model.to_owned(),
            messages: vec![Message::new(Role::User, vec![ContentBlock::text_block(prompt)])],
            params: self.sampling.clone(),
            stream: stream.then_some(StreamOptions {
                include_usage: true,
                ..StreamOptions::default()
            }),
            openai_pass_through: OpenAiPassThrough {
                fields: self.pass_through.clone(),
                max_completion_tokens_spelling: false,
            },
            raw_prompt: true,
            ..ModelRequest::default()
        }
    }
}

fn invalid_type(name: &str, expected: &str) -> LmiApiError {
    LmiApiError::invalid(format!("Invalid `parameters.{name}`: expected {expected}."))
}

fn out_of_range(name: &str, rule: &str) -> LmiApiError {
    LmiApiError::invalid(format!("Invalid `parameters.{name}`: {rule}."))
}

fn optional_bool(value: Option<&Value>, name: &str) -> Result<Option<bool>, LmiApiError> {
    value
        .map(|v| v.as_bool().ok_or_else(|| invalid_type(name, "a boolean")))
        .transpose()
}

fn optional_number(value: Option<&Value>, name: &str) -> Result<Option<f64>, LmiApiError> {
    value
        .map(|v| v.as_f64().ok_or_else(|| invalid_type(name, "a number")))
        .transpose()
}

fn optional_integer(value: Option<&Value>, name: &str) -> Result<Option<i64>, LmiApiError> {
    value
        .map(|v| v.as_i64().ok_or_else(|| invalid_type(name, "an integer")))
        .transpose()
}

/// A list of strings (a single string is taken as a one-element list).
fn stop_sequences(value: Option<&Value>) -> Result<Vec<String>, LmiApiError> {
    match value {
        None => Ok(Vec::new()),
        Some(Value::String(stop)) => Ok(vec![stop.clone()]),
        Some(Value::Array(items)) => items
            .iter()
            .map(|item| {
                item.as_str()
                    .map(str::to_owned)
                    .ok_or_else(|| invalid_type("stop_sequences", "a list of strings"))
            })
            .collect(),
        Some(_) => Err(invalid_type("stop_sequences", "a list of strings")),
    }
}
