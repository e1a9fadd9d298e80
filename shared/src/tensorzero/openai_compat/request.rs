//! An OpenAI chat body → an `/inference` request: messages become the function's input
//! (`tensorzero::arguments` text parts become template arguments), OpenAI parameters become
//! `params.chat_completion`, tools become `additional_tools`, and the `tensorzero::*` body
//! extensions become the matching `/inference` fields.

use crate::tensorzero::function_calls::{FunctionError, InferenceRequest};
use crate::user_text::excerpt;
use serde_json::{json, Map, Value};

pub(crate) const FUNCTION_PREFIX: &str = "tensorzero::function_name::";
pub(crate) const MODEL_PREFIX: &str = "tensorzero::model_name::";
pub(crate) const EMBEDDING_MODEL_PREFIX: &str = "tensorzero::embedding_model_name::";

/// What an OpenAI `model` names.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum OpenAiTarget {
    Function(String),
    Model(String),
}

impl OpenAiTarget {
    pub fn parse(model: &str) -> Result<Self, FunctionError> {
        if let Some(function) = model.strip_prefix(FUNCTION_PREFIX).filter(|f| !f.is_empty()) {
            return Ok(Self::Function(function.to_owned()));
        }
        if let Some(model) = model.strip_prefix(MODEL_PREFIX).filter(|m| !m.is_empty()) {
            return Ok(Self::Model(model.to_owned()));
        }
        Err(FunctionError::invalid(format!(
            "`model` must start with `{FUNCTION_PREFIX}` or `{MODEL_PREFIX}` (got `{}`)",
            excerpt(model)
        )))
    }
}

/// The `/inference` request an OpenAI chat body stands for.
pub(crate) fn inference_request_of(
    mut body: Map<String, Value>,
) -> Result<(OpenAiTarget, InferenceRequest), FunctionError> {
    let model = match body.remove("model") {
        Some(Value::String(model)) => model,
        _ => return Err(FunctionError::invalid("`model` is required and must be a string")),
    };
    let target = OpenAiTarget::parse(&model)?;
    let messages = match body.remove("messages") {
        Some(Value::Array(messages)) => messages,
        _ => return Err(FunctionError::invalid("`messages` is required and must be an array")),
    };
    let mut request = Map::new();
    match &target {
        OpenAiTarget::Function(f) => request.insert("function_name".into(), json!(f)),
        OpenAiTarget::Model(m) => request.insert("model_name".into(), json!(m)),
    };
    request.insert("input".into(), input_of(&messages)?);
    let mut params = Map::new();
    for (from, to) in [
        ("temperature", "temperature"),
        ("top_p", "top_p"),
        ("seed", "seed"),
        ("presence_penalty", "presence_penalty"),
        ("frequency_penalty", "frequency_penalty"),
        ("max_tokens", "max_tokens"),
        ("max_completion_tokens", "max_tokens"),
        ("reasoning_effort", "reasoning_effort"),
        ("service_tier", "service_tier"),
        ("verbosity", "verbosity"),
    ] {
        if let Some(value) = body.remove(from).filter(|v| !v.is_null()) {
            params.insert(to.into(), value);
        }
    }
    match body.remove("stop") {
        Some(Value::String(stop)) => {
            params.insert("stop_sequences".into(), json!([stop]));
        }
        Some(stop @ Value::Array(_)) => {
            params.insert("stop_sequences".into(), stop);
        }
        _ => {}
    }
    if let Some(format) = body.remove("response_format").filter(|v| !v.is_null()) {
        match format.get("type").and_then(Value::as_str) {
            Some("text") => {}
            Some("json_object") => {
                params.insert("json_mode".into(), json!("on"));
            }
            Some("json_schema") => {
                params.insert("json_mode".into(), json!("strict"));
                if let Some(schema) = format.pointer("/json_schema/schema") {
                    request.insert("output_schema".into(), schema.clone());
                }
            }
            _ => {
                return Err(FunctionError::invalid(
                    "`response_format.type` must be text, json_object or json_schema",
                ))
            }
        }
    }
    match body.remove("tensorzero::params") {
        None | Some(Value::Null) => {}
        Some(Value::Object(extra)) => match extra.get("chat_completion") {
            None | Some(Value::Null) => {}
            Some(Value::Object(chat)) => params.extend(chat.clone()),
            Some(_) => {
                return Err(FunctionError::invalid(
                    "`tensorzero::params.chat_completion` must be an object",
                ))
            }
        },
        Some(_) => {
            return Err(FunctionError::invalid(
                "`tensorzero::params` must be an object (`{\"chat_completion\": {…}}`)",
            ))
        }
    }
    request.insert("params".into(), json!({ "chat_completion": params }));
    if let Some(tools) = body.remove("tools").filter(|v| !v.is_null()) {
        request.insert("additional_tools".into(), tools_of(tools)?);
    }
    if let Some(choice) = body.remove("tool_choice").filter(|v| !v.is_null()) {
        request.insert("tool_choice".into(), tool_choice_of(choice)?);
    }
    for key in ["parallel_tool_calls", "stream"] {
        if let Some(value) = body.remove(key).filter(|v| !v.is_null()) {
            request.insert(key.into(), value);
        }
    }
    if let Some(n) = body.remove("n").and_then(|n| n.as_u64()) {
        if n != 1 {
            return Err(FunctionError::invalid("`n` must be 1 for tensorzero:: models"));
        }
    }
    for field in [
        "episode_id",
        "variant_name",
        "dryrun",
        "cache_options",
        "tags",
        "credentials",
        "extra_body",
        "extra_headers",
        "include_original_response",
    ] {
        if let Some(value) = body.remove(&format!("tensorzero::{field}")) {
            request.insert(field.into(), value);
        }
    }
    let deny_unknown = body.remove("tensorzero::deny_unknown_fields") == Some(Value::Bool(true));
    // OpenAI fields with no meaning here (stream_options, user, metadata, store, logprobs …).
    let known_ignored = [
        "stream_options",
        "user",
        "metadata",
        "store",
        "logprobs",
        "top_logprobs",
        "logit_bias",
    ];
    let unknown: Vec<&String> = body.keys().filter(|k| !known_ignored.contains(&k.as_str())).collect();
    if let Some(field) = unknown.iter().find(|k| k.starts_with("tensorzero::")) {
        return Err(FunctionError::invalid(format!(
            "unknown extension `{}`",
            excerpt(field)
        )));
    }
    if deny_unknown {
        if let Some(field) = unknown.first() {
            return Err(FunctionError::invalid(format!("unknown field `{}`", excerpt(field))));
        }
    }
    let request = serde_path_to_error::deserialize::<_, InferenceRequest>(Value::Object(request))
        .map_err(|e| FunctionError::invalid(format!("at `{}`: {}", e.path(), e.inner())))?;
    Ok((target, request))
}

/// OpenAI messages → `{system, messages}`.
fn input_of(messages: &[Value]) -> Result<Value, FunctionError> {
    let mut system: Option<Value> = None;
    let mut out = Vec::new();
    let mut tool_names = std::collections::BTreeMap::new();
    for (index, message) in messages.iter().enumerate() {
        let field = format!("messages[{index}]");
        let role = message.get("role").and_then(Value::as_str).unwrap_or_default();
        let content = message.get("content").cloned().unwrap_or(Value::Null);
        match role {
            "system" | "developer" => {
                if system.is_some() {
                    return Err(FunctionError::invalid(format!(
                        "`{field}`: only one system message is supported"
                    )));
                }
                system = Some(system_of(&content, &field)?);
            }
            "user" => out.push(json!({"role": "user", "content": blocks_of("user", &content, &field)?})),
            "assistant" => {
                let mut blocks = match content {
                    Value::Null => Vec::new(),
                    content => blocks_of("assistant", &content, &field)?,
                };
                for call in message
                    .get("tool_calls")
                    .and_then(Value::as_array)
                    .into_iter()
                    .flatten()
                {
                    let id = call.get("id").and_then(Value::as_str).unwrap_or_default();
                    let name = call
                        .pointer("/function/name")
                        .and_then(Value::as_str)
                        .unwrap_or_default();
                    let arguments = call
                        .pointer("/function/arguments")
                        .and_then(Value::as_str)
                        .unwrap_or("{}");
                    tool_names.insert(id.to_owned(), name.to_owned());
                    blocks.push(json!({"type": "tool_call", "id": id, "name": name, "arguments": arguments}));
                }
                out.push(json!({"role": "assistant", "content": blocks}));
            }
            "tool" => {
                let id = message.get("tool_call_id").and_then(Value::as_str).unwrap_or_default();
                let result = match &content {
                    Value::String(text) => text.clone(),
                    other => text_of_parts(other),
                };
                let name = tool_names.get(id).cloned().unwrap_or_default();
                out.push(json!({"role": "user", "content": [{"type": "tool_result", "id": id, "name": name, "result": result}]}));
            }
            other => {
                return Err(FunctionError::invalid(format!(
                    "`{field}.role` `{}` is not supported",
                    excerpt(other)
                )))
            }
        }
    }
    let mut input = Map::new();
    if let Some(system) = system {
        input.insert("system".into(), system);
    }
    input.insert("messages".into(), Value::Array(out));
    Ok(Value::Object(input))
}

fn text_of_parts(content: &Value) -> String {
    content
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|part| part.get("text").and_then(Value::as_str))
        .collect::<Vec<_>>()
        .join("")
}

/// A system message: text, or template arguments (`tensorzero::arguments`).
fn system_of(content: &Value, field: &str) -> Result<Value, FunctionError> {
    match content {
        Value::String(text) => Ok(Value::String(text.clone())),
        Value::Array(parts) => {
            if let [part] = parts.as_slice() {
                if let Some(arguments) = part.get("tensorzero::arguments") {
                    return Ok(arguments.clone());
                }
            }
            Ok(Value::String(text_of_parts(content)))
        }
        _ => Err(FunctionError::invalid(format!(
            "`{field}.content` must be a string or parts"
        ))),
    }
}

/// Content → `/inference` blocks.
fn blocks_of(role: &str, content: &Value, field: &str) -> Result<Vec<Value>, FunctionError> {
    let parts = match content {
        Value::String(text) => return Ok(vec![json!({"type": "text", "text": text})]),
        Value::Array(parts) => parts,
        _ => {
            return Err(FunctionError::invalid(format!(
                "`{field}.content` must be a string or parts"
            )))
        }
    };
    parts
        .iter()
        .enumerate()
        .map(|(index, part)| {
            let field = format!("{field}.content[{index}]");
            match part.get("type").and_then(Value::as_str) {
                Some("text") => match part.get("tensorzero::arguments") {
                    Some(arguments) => Ok(json!({"type": "template", "name": role, "arguments": arguments})),
                    None => Ok(json!({"type": "text", "text": part.get("text").cloned().unwrap_or(json!(""))})),
                },
                Some("tensorzero::raw_text") => Ok(json!({"type": "raw_text", "value": part.get("value")})),
                Some("tensorzero::template") => Ok(json!({
                    "type": "template", "name": part.get("name"), "arguments": part.get("arguments")
                })),
                Some("image_url") => {
                    let url = part.pointer("/image_url/url").cloned().unwrap_or(Value::Null);
                    Ok(json!({"type": "file", "file_type": "url", "url": url}))
                }
                Some(other) => Err(FunctionError::invalid(format!(
                    "`{field}.type` `{}` is not supported",
                    excerpt(other)
                ))),
                None => Err(FunctionError::invalid(format!("`{field}.type` is required"))),
            }
        })
        .collect()
}

fn tools_of(tools: Value) -> Result<Value, FunctionError> {
    let Value::Array(tools) = tools else {
        return Err(FunctionError::invalid("`tools` must be an array"));
    };
    let converted = tools
        .iter()
        .map(|tool| {
            let function = tool.get("function").cloned().unwrap_or(Value::Null);
            json!({
                "name": function.get("name").cloned().unwrap_or(Value::Null),
                "description": function.get("description").cloned().unwrap_or(Value::Null),
                "parameters": function.get("parameters").cloned().unwrap_or(json!({"type": "object"})),
                "strict": function.get("strict").cloned().unwrap_or(Value::Null),
            })
        })
        .collect();
    Ok(Value::Array(converted))
}

fn tool_choice_of(choice: Value) -> Result<Value, FunctionError> {
    match &choice {
        Value::String(mode) if ["none", "auto", "required"].contains(&mode.as_str()) => Ok(choice),
        Value::Object(_) => match choice.pointer("/function/name").and_then(Value::as_str) {
            Some(name) => Ok(json!({"specific": name})),
            None => Err(FunctionError::invalid("`tool_choice.function.name` is required")),
        },
        _ => Err(FunctionError::invalid(
            "`tool_choice` must be none, auto, required or a named function",
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn convert(body: Value) -> Result<InferenceRequest, FunctionError> {
        let Value::Object(body) = body else { unreachable!() };
        inference_request_of(body).map(|(_, request)| request)
    }

    #[test]
    fn an_openai_body_becomes_an_inference_request() {
        let request = convert(json!({
            "model": "tensorzero::function_name::draft_email",
            "messages": [
                {"role": "system", "content": [{"type": "text", "tensorzero::arguments": {"sender_name": "Ann"}}]},
                {"role": "user", "content": [{"type": "text", "tensorzero::arguments": {"recipient": "Bob", "topic": "x"}}]},
                {"role": "assistant", "content": null, "tool_calls": [{"id": "c1", "type": "function", "function": {"name": "f", "arguments": "{}"}}]},
                {"role": "tool", "tool_call_id": "c1", "content": "ok"}
            ],
            "temperature": 0.5, "max_completion_tokens": 9, "stop": "END",
            "response_format": {"type": "json_object"},
            "tensorzero::episode_id": null, "tensorzero::tags": {"a": "b"}, "stream_options": {"include_usage": true}
        }))
        .unwrap();
        assert_eq!(request.function_name.as_deref(), Some("draft_email"));
        assert_eq!(request.input.system, Some(json!({"sender_name": "Ann"})));
        assert_eq!(request.input.messages.len(), 3);
        let params = request.params.unwrap().chat_completion;
        assert_eq!(params.max_tokens, Some(9));
        assert_eq!(params.stop_sequences, Some(vec!["END".to_owned()]));
        assert_eq!(request.tags.unwrap()["a"], "b");
    }

    #[test]
    fn other_models_and_unknown_extensions_are_refused() {
        assert!(convert(json!({"model": "gpt-4o", "messages": []})).is_err());
        assert!(
            convert(json!({"model": "tensorzero::model_name::dummy", "messages": [], "tensorzero::nope": 1})).is_err()
        );
        assert!(convert(json!({"model": "tensorzero::model_name::dummy", "messages": [], "n": 2})).is_err());
    }
}
