//! The neutral [`ModelRequest`] → the LMI body of the configured schema. What a prompt schema
//! cannot express is refused with [`ProviderError::UnsupportedParameter`] naming the parameter,
//! never dropped.

use super::chat_template::ChatTemplate;
use super::protocol::is_forwarded_parameter;
use crate::config::LmiSchema;
use crate::model::{ContentBlock, ModelRequest, OutputMode, Role};
use crate::openai::chat_body::model_to_chat_body;
use crate::openai::embeddings::EmbeddingInput;
use crate::providers::ProviderError;
use crate::user_text::excerpt;
use serde_json::{json, Map, Value};

fn unsupported(param: &str, message: impl Into<String>) -> ProviderError {
    ProviderError::UnsupportedParameter {
        param: param.to_owned(),
        message: message.into(),
    }
}

/// The body for a chat request on `schema`. `template` is needed by the prompt schemas;
/// `default_max_new_tokens` caps a request that names no cap.
pub fn chat_body(
    schema: LmiSchema,
    template: Option<&ChatTemplate>,
    request: &ModelRequest,
    stream: bool,
    default_max_new_tokens: Option<u64>,
) -> Result<Value, ProviderError> {
    match schema {
        LmiSchema::Chat => {
            let mut body = openai_chat_body(request, stream);
            if let Some(cap) = default_max_new_tokens {
                let object = body.as_object_mut();
                if let Some(object) =
                    object.filter(|o| !o.contains_key("max_tokens") && !o.contains_key("max_completion_tokens"))
                {
                    object.insert("max_tokens".into(), json!(cap));
                }
            }
            Ok(body)
        }
        LmiSchema::Embedding => Err(ProviderError::Misconfigured(
            "an LMI embedding model does not answer chat requests".to_owned(),
        )),
        LmiSchema::RollingBatch | LmiSchema::TgiCompat | LmiSchema::DynamicBatch => {
            check_prompt_request(request)?;
            let Some(template) = template else {
                return Err(ProviderError::Misconfigured("no chat template was compiled".to_owned()));
            };
            let prompt = if request.raw_prompt {
                raw_prompt(request)?
            } else {
                template.render(request)?
            };
            let details = schema != LmiSchema::DynamicBatch;
            let mut body = Map::new();
            let inputs = if schema == LmiSchema::DynamicBatch {
                json!([prompt])
            } else {
                json!(prompt)
            };
            body.insert("inputs".into(), inputs);
            body.insert(
                "parameters".into(),
                Value::Object(generation_parameters(request, details, default_max_new_tokens)),
            );
            if stream {
                body.insert("stream".into(), Value::Bool(true));
            }
            Ok(Value::Object(body))
        }
    }
}

/// The prompt of a request that carries one already formatted (`raw_prompt`): its one user
/// message's text, sent without the chat template.
fn raw_prompt(request: &ModelRequest) -> Result<String, ProviderError> {
    match (request.system.as_ref(), request.messages.as_slice()) {
        (None, [message]) if message.role == Role::User => {
            let mut prompt = String::new();
            for block in &message.content {
                match block {
                    ContentBlock::Text { text } => prompt.push_str(text),
                    _ => return Err(unsupported("messages", "a formatted prompt is text only")),
                }
            }
            Ok(prompt)
        }
        _ => Err(unsupported(
            "messages",
            "a formatted prompt is one user message, without instructions",
        )),
    }
}

/// LMI's OpenAI-style chat body: the OpenAI provider's body without `model` (the container serves
/// one model), asking for usage when streamed.
fn openai_chat_body(request: &ModelRequest, stream: bool) -> Value {
    let mut body = model_to_chat_body(request, "");
    body.remove("model");
    if stream {
        body.insert("stream".into(), Value::Bool(true));
        body.insert("stream_options".into(), json!({"include_usage": true}));
    }
    Value::Object(body)
}

/// Refuse what a prompt rendered from a chat template cannot carry.
fn check_prompt_request(request: &ModelRequest) -> Result<(), ProviderError> {
    const NO_TOOLS: &str = "this model takes a prompt rendered from a chat template and cannot call tools";
    if !request.tools.is_empty() {
        return Err(unsupported("tools", NO_TOOLS));
    }
    if request.tool_choice.is_some() {
        return Err(unsupported("tool_choice", NO_TOOLS));
    }
    if request.parallel_tool_calls == Some(true) {
        return Err(unsupported("parallel_tool_calls", NO_TOOLS));
    }
    match request.output {
        OutputMode::Text => {}
        OutputMode::JsonObject | OutputMode::JsonSchema { .. } => {
            return Err(unsupported(
                "response_format",
                "this model cannot be constrained to JSON; only text answers",
            ))
        }
    }
    let params = &request.params;
    if params.logit_bias.is_some() {
        return Err(unsupported("logit_bias", "LMI has no logit bias"));
    }
    if params.logprobs == Some(true) {
        return Err(unsupported(
            "logprobs",
            "log-probabilities are not returned for this model",
        ));
    }
    if params.top_logprobs.is_some() {
        return Err(unsupported(
            "top_logprobs",
            "log-probabilities are not returned for this model",
        ));
    }
    if params.user.is_some() {
        return Err(unsupported("user", "LMI containers take no end-user identifier"));
    }
    if let Some(field) = request
        .openai_pass_through
        .fields
        .keys()
        .find(|field| !is_forwarded_parameter(field))
    {
        return Err(ProviderError::UnsupportedParameter {
            param: excerpt(field).into_owned(),
            message: "not an LMI generation parameter".to_owned(),
        });
    }
    Ok(())
}

/// `parameters` of a prompt schema: the LMI generation parameters passed through, then the
/// modelled ones; `details` asks for finish reasons and token counts (rolling batch only).
fn generation_parameters(
    request: &ModelRequest,
    details: bool,
    default_max_new_tokens: Option<u64>,
) -> Map<String, Value> {
    let mut parameters: Map<String, Value> = request
        .openai_pass_through
        .fields
        .iter()
        .filter(|(field, _)| is_forwarded_parameter(field))
        .map(|(field, value)| (field.clone(), value.clone()))
        .collect();
    let params = &request.params;
    if let Some(max_tokens) = params.max_tokens.or(default_max_new_tokens) {
        parameters.insert("max_new_tokens".into(), json!(max_tokens));
    }
    match params.temperature {
        Some(temperature) if temperature > 0.0 => {
            parameters.insert("temperature".into(), json!(temperature));
            parameters.insert("do_sample".into(), Value::Bool(true));
        }
        // Temperature 0 is greedy decoding, which LMI asks for without a temperature.
        Some(_) => {
            parameters.insert("do_sample".into(), Value::Bool(false));
        }
        None => {}
    }
    let mut put = |key: &str, value: Option<Value>| {
        if let Some(value) = value {
            parameters.insert(key.to_owned(), value);
        }
    };
    put("top_p", params.top_p.map(|v| json!(v)));
    put("seed", params.seed.map(|v| json!(v)));
    put("frequency_penalty", params.frequency_penalty.map(|v| json!(v)));
    put("presence_penalty", params.presence_penalty.map(|v| json!(v)));
    if !params.stop_sequences.is_empty() {
        parameters.insert("stop_sequences".into(), json!(params.stop_sequences));
    }
    if details {
        parameters.insert("details".into(), Value::Bool(true));
    }
    parameters
}

/// The body of an embedding request: `{"inputs": [texts]}`.
pub(crate) fn embedding_body(input: &EmbeddingInput) -> Result<Value, ProviderError> {
    let texts: Vec<&str> = match input {
        EmbeddingInput::Text(text) => vec![text.as_str()],
        EmbeddingInput::Texts(texts) => texts.iter().map(String::as_str).collect(),
        EmbeddingInput::Tokens(_) | EmbeddingInput::TokenBatches(_) => {
            return Err(unsupported("input", "this model embeds text, not token arrays"))
        }
    };
    Ok(json!({ "inputs": texts }))
}
