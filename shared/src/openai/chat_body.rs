//! [`ModelRequest`] → OpenAI chat body, for OpenAI-compatible providers: the inverse of
//! [`chat_request_to_model`](super::to_model::chat_request_to_model). OpenAI pass-through fields
//! come out as top-level body fields.

use crate::model::{ContentBlock, FileData, Message, ModelRequest, OutputMode, Role, ToolChoice, ToolDefinition};
use serde_json::{json, Map, Value};

/// The OpenAI chat body for `request`, naming `upstream_model`. Streaming fields are left to the
/// caller; `extra_body` is not applied here.
pub(crate) fn model_to_chat_body(request: &ModelRequest, upstream_model: &str) -> Map<String, Value> {
    let mut body = request.openai_pass_through.fields.clone();
    body.insert("model".into(), json!(upstream_model));
    body.insert("messages".into(), Value::Array(messages_to_wire(request)));
    let allowed = |tool: &&ToolDefinition| request.allowed_tools.as_ref().is_none_or(|a| a.contains(&tool.name));
    let tools: Vec<Value> = request.tools.iter().filter(allowed).map(tool_to_wire).collect();
    if !tools.is_empty() {
        body.insert("tools".into(), Value::Array(tools));
    }
    if let Some(choice) = &request.tool_choice {
        body.insert("tool_choice".into(), tool_choice_to_wire(choice));
    }
    let mut put = |key: &str, value: Option<Value>| {
        if let Some(value) = value {
            body.insert(key.to_owned(), value);
        }
    };
    put("parallel_tool_calls", request.parallel_tool_calls.map(Value::Bool));
    put("response_format", output_to_wire(&request.output));
    let params = &request.params;
    put("temperature", params.temperature.map(|v| json!(v)));
    put("top_p", params.top_p.map(|v| json!(v)));
    let cap_key = if request.openai_pass_through.max_completion_tokens_spelling {
        "max_completion_tokens"
    } else {
        "max_tokens"
    };
    put(cap_key, params.max_tokens.map(|v| json!(v)));
    put("presence_penalty", params.presence_penalty.map(|v| json!(v)));
    put("frequency_penalty", params.frequency_penalty.map(|v| json!(v)));
    put("seed", params.seed.map(|v| json!(v)));
    put(
        "stop",
        match params.stop_sequences.as_slice() {
            [] => None,
            [one] => Some(json!(one)),
            many => Some(json!(many)),
        },
    );
    put("n", params.n.map(|v| json!(v)));
    put("logprobs", params.logprobs.map(Value::Bool));
    put("top_logprobs", params.top_logprobs.map(|v| json!(v)));
    put("logit_bias", params.logit_bias.as_ref().map(|v| json!(v)));
    put("user", params.user.as_ref().map(|v| json!(v)));
    body
}

/// OpenAI's reasoning and tier parameters, from the neutral request's (they beat pass-through
/// fields of the same name). A thinking budget has no OpenAI field: it is ignored with a
/// warning, as TensorZero's `openai` provider does.
pub(crate) fn reasoning_params_to_wire(request: &ModelRequest, body: &mut Map<String, Value>) {
    let params = &request.params;
    let fields = [
        ("reasoning_effort", &params.reasoning_effort),
        ("service_tier", &params.service_tier),
        ("verbosity", &params.verbosity),
    ];
    for (key, value) in fields {
        if let Some(value) = value {
            body.insert(key.to_owned(), json!(value));
        }
    }
    if params.thinking_budget_tokens.is_some() {
        tracing::warn!("OpenAI-compatible providers take no thinking budget: `thinking_budget_tokens` is ignored");
    }
}

/// For servers that take OpenAI's `allowed_tools` tool choice (OpenAI itself): every tool of
/// `request` in `body`, and the allowed ones as the tool choice (`required` stays required;
/// `none` stays `none`, which OpenAI cannot combine with a list). A request without
/// `allowed_tools` is left as [`model_to_chat_body`] wrote it (its tools unfiltered).
pub(crate) fn offer_allowed_tools(request: &ModelRequest, body: &mut Map<String, Value>) {
    let Some(allowed) = &request.allowed_tools else {
        return;
    };
    if request.tools.is_empty() {
        return;
    }
    body.insert(
        "tools".into(),
        Value::Array(request.tools.iter().map(tool_to_wire).collect()),
    );
    let mode = match &request.tool_choice {
        Some(ToolChoice::None) => return,
        Some(ToolChoice::Required) => "required",
        _ => "auto",
    };
    let tools: Vec<Value> = allowed
        .iter()
        .map(|name| json!({"type": "function", "function": {"name": name}}))
        .collect();
    body.insert(
        "tool_choice".into(),
        json!({"type": "allowed_tools", "allowed_tools": {"mode": mode, "tools": tools}}),
    );
}

fn messages_to_wire(request: &ModelRequest) -> Vec<Value> {
    let mut out = Vec::with_capacity(request.messages.len() + 1);
    if let Some(system) = &request.system {
        let role = if request.system_is_developer {
            "developer"
        } else {
            "system"
        };
        out.push(json!({"role": role, "content": system}));
    }
    for message in &request.messages {
        match message.role {
            Role::System => {
                let role = if message.developer { "developer" } else { "system" };
                out.push(with_name(
                    json!({"role": role, "content": content_to_wire(&message.content)}),
                    message,
                ));
            }
            Role::User => {
                let (results, others): (Vec<&ContentBlock>, Vec<&ContentBlock>) = message
                    .content
                    .iter()
                    .partition(|block| matches!(block, ContentBlock::ToolResult { .. }));
                for block in results {
                    if let ContentBlock::ToolResult { id, result, .. } = block {
                        out.push(json!({"role": "tool", "tool_call_id": id, "content": result}));
                    }
                }
                if !others.is_empty() || message.content.is_empty() {
                    let others: Vec<ContentBlock> = others.into_iter().cloned().collect();
                    out.push(with_name(
                        json!({"role": "user", "content": content_to_wire(&others)}),
                        message,
                    ));
                }
            }
            Role::Assistant => out.push(with_name(assistant_to_wire(&message.content), message)),
        }
    }
    out
}

fn with_name(mut value: Value, message: &Message) -> Value {
    if let Some(name) = &message.name {
        value["name"] = json!(name);
    }
    value
}

fn assistant_to_wire(blocks: &[ContentBlock]) -> Value {
    let mut message = json!({"role": "assistant"});
    let mut content: Vec<ContentBlock> = Vec::new();
    let mut calls = Vec::new();
    for block in blocks {
        match block {
            ContentBlock::Refusal { text } => message["refusal"] = json!(text),
            ContentBlock::ToolCall { id, name, arguments } => calls.push(json!({
                "id": id, "type": "function", "function": {"name": name, "arguments": arguments}
            })),
            ContentBlock::Thought { .. } => {}
            other => content.push(other.clone()),
        }
    }
    message["content"] = if content.is_empty() {
        Value::Null
    } else {
        content_to_wire(&content)
    };
    if !calls.is_empty() {
        message["tool_calls"] = Value::Array(calls);
    }
    message
}

/// A lone text block is sent as a string; anything else as a list of parts.
fn content_to_wire(blocks: &[ContentBlock]) -> Value {
    if let [ContentBlock::Text { text }] = blocks {
        return json!(text);
    }
    Value::Array(blocks.iter().filter_map(part_to_wire).collect())
}

fn data_url(mime: Option<&str>, data: &str) -> String {
    format!("data:{};base64,{data}", mime.unwrap_or("application/octet-stream"))
}

fn part_to_wire(block: &ContentBlock) -> Option<Value> {
    Some(match block {
        ContentBlock::Text { text } => json!({"type": "text", "text": text}),
        ContentBlock::Refusal { text } => json!({"type": "refusal", "refusal": text}),
        ContentBlock::ToolResult { result, .. } => json!({"type": "text", "text": result}),
        ContentBlock::ToolCall { name, arguments, .. } => {
            json!({"type": "text", "text": format!("{name} {arguments}")})
        }
        ContentBlock::Thought { .. } => return None,
        ContentBlock::Unknown { data } => data.clone(),
        ContentBlock::File {
            data,
            mime_type,
            filename,
            detail,
        } => {
            let mime = mime_type.as_deref();
            let is_image = mime.is_none_or(|m| m.starts_with("image/"));
            match data {
                FileData::Url { url } => image_part(url.clone(), detail),
                FileData::Base64 { data } if is_image => image_part(data_url(mime, data), detail),
                FileData::Base64 { data } if mime.is_some_and(|m| m.starts_with("audio/")) => {
                    let format = mime.and_then(|m| m.strip_prefix("audio/")).unwrap_or_default();
                    json!({"type": "input_audio", "input_audio": {"data": data, "format": format}})
                }
                FileData::Base64 { data } => {
                    let mut file = json!({"file_data": data_url(mime, data)});
                    if let Some(filename) = filename {
                        file["filename"] = json!(filename);
                    }
                    json!({"type": "file", "file": file})
                }
                FileData::ProviderFileId { id } => {
                    let mut file = json!({"file_id": id});
                    if let Some(filename) = filename {
                        file["filename"] = json!(filename);
                    }
                    json!({"type": "file", "file": file})
                }
            }
        }
    })
}

fn image_part(url: String, detail: &Option<String>) -> Value {
    let mut image_url = json!({"url": url});
    if let Some(detail) = detail {
        image_url["detail"] = json!(detail);
    }
    json!({"type": "image_url", "image_url": image_url})
}

/// OpenAI's function object has the neutral tool's fields and spellings.
fn tool_to_wire(tool: &ToolDefinition) -> Value {
    json!({"type": "function", "function": tool})
}

fn tool_choice_to_wire(choice: &ToolChoice) -> Value {
    match choice {
        ToolChoice::None => json!("none"),
        ToolChoice::Auto => json!("auto"),
        ToolChoice::Required => json!("required"),
        ToolChoice::Specific(name) => json!({"type": "function", "function": {"name": name}}),
    }
}

fn output_to_wire(output: &OutputMode) -> Option<Value> {
    Some(match output {
        OutputMode::Text => return None,
        OutputMode::JsonObject => json!({"type": "json_object"}),
        OutputMode::JsonSchema {
            name,
            description,
            schema,
            strict,
        } => {
            let mut json_schema = json!({"name": name});
            if let Some(description) = description {
                json_schema["description"] = json!(description);
            }
            if let Some(schema) = schema {
                json_schema["schema"] = schema.clone();
            }
            if let Some(strict) = strict {
                json_schema["strict"] = json!(strict);
            }
            json!({"type": "json_schema", "json_schema": json_schema})
        }
    })
}
