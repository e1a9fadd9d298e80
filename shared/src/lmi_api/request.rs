//! LMI request bodies: which schema a body follows, and its fields read with LMI's validation
//! errors (every problem names the field).

use super::params::GenerationParameters;
use super::LmiApiError;
use crate::user_text::excerpt;
use serde_json::{Map, Value};

/// The top-level fields of the rolling-batch and dynamic-batch schemas.
const GENERATE_FIELDS: [&str; 3] = ["inputs", "parameters", "stream"];

/// Prompts in one dynamic batch, at most.
pub(crate) const MAX_BATCH_INPUTS: usize = 128;

/// A request in one of LMI's schemas.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum LmiRequest {
    /// A body with `messages`: OpenAI chat, as LMI ≥ 0.27 accepts on `/invocations` (the raw body).
    Chat(Map<String, Value>),
    /// `inputs` with `parameters`: rolling batch (one prompt) or dynamic batch (a list).
    Rolling(Box<RollingRequest>),
}

/// `{"inputs", "parameters", "stream"}`.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct RollingRequest {
    pub inputs: Inputs,
    pub parameters: GenerationParameters,
    pub stream: bool,
}

/// One prompt, or a dynamic batch of prompts answered in order.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Inputs {
    One(String),
    Many(Vec<String>),
}

impl LmiRequest {
    pub fn parse(body: Map<String, Value>) -> Result<Self, LmiApiError> {
        if body.contains_key("messages") {
            return Ok(Self::Chat(body));
        }
        let unknown: Vec<String> = body
            .keys()
            .filter(|key| !GENERATE_FIELDS.contains(&key.as_str()))
            .map(|key| format!("`{}`", excerpt(key)))
            .collect();
        if !unknown.is_empty() {
            return Err(LmiApiError::invalid(format!(
                "Unknown request field(s) {}: the body takes `inputs`, `parameters` and `stream` (or OpenAI chat `messages`).",
                unknown.join(", ")
            )));
        }
        let inputs = match body.get("inputs") {
            None | Some(Value::Null) => {
                return Err(LmiApiError::invalid(
                    "Missing required field `inputs` (a prompt string or a list of prompts).",
                ))
            }
            Some(Value::String(prompt)) => Inputs::One(prompt.clone()),
            Some(Value::Array(items)) => Inputs::Many(batch_inputs(items)?),
            Some(_) => {
                return Err(LmiApiError::invalid(
                    "Invalid `inputs`: expected a prompt string or a list of prompt strings.",
                ))
            }
        };
        let stream = match body.get("stream") {
            None | Some(Value::Null) => false,
            Some(Value::Bool(stream)) => *stream,
            Some(_) => return Err(LmiApiError::invalid("Invalid `stream`: expected a boolean.")),
        };
        let parameters = GenerationParameters::parse(body.get("parameters"))?;
        Ok(Self::Rolling(Box::new(RollingRequest {
            inputs,
            parameters,
            stream,
        })))
    }
}

fn batch_inputs(items: &[Value]) -> Result<Vec<String>, LmiApiError> {
    if items.is_empty() {
        return Err(LmiApiError::invalid("Invalid `inputs`: the list of prompts is empty."));
    }
    if items.len() > MAX_BATCH_INPUTS {
        return Err(LmiApiError::invalid(format!(
            "Invalid `inputs`: {} prompts, at most {MAX_BATCH_INPUTS} per request.",
            items.len()
        )));
    }
    items
        .iter()
        .enumerate()
        .map(|(index, item)| match item {
            Value::String(prompt) => Ok(prompt.clone()),
            _ => Err(LmiApiError::invalid(format!(
                "Invalid `inputs[{index}]`: expected a prompt string."
            ))),
        })
        .collect()
}
