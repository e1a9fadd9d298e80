//! Deterministic chat replies: the same request gives the same answer, different inputs differ.

use crate::openai::chat::{
    AssistantMessage, ChatCompletion, ChatCompletionRequest, Choice, FunctionCall, ResponseFormat, Tool, ToolCall,
    ToolChoice, ToolChoiceMode, Usage,
};
use serde_json::{json, Map, Value};
use sha2::{Digest, Sha256};

/// Whitespace-separated words: the dummy's token count.
pub fn count_tokens(text: &str) -> u64 {
    u64::try_from(text.split_whitespace().count()).unwrap_or(u64::MAX)
}

fn digest_of(request: &ChatCompletionRequest) -> String {
    let mut hasher = Sha256::new();
    for message in &request.messages {
        hasher.update(serde_json::to_vec(message).unwrap_or_default());
        hasher.update([0]);
    }
    for part in [
        serde_json::to_vec(&request.tools).unwrap_or_default(),
        serde_json::to_vec(&request.tool_choice).unwrap_or_default(),
        serde_json::to_vec(&request.response_format).unwrap_or_default(),
        serde_json::to_vec(&request.seed).unwrap_or_default(),
    ] {
        hasher.update(part);
        hasher.update([0]);
    }
    hex::encode(&hasher.finalize()[..8])
}

fn last_user_text(request: &ChatCompletionRequest) -> String {
    request
        .messages
        .iter()
        .rev()
        .find(|m| matches!(m, crate::openai::chat::ChatMessage::User { .. }))
        .or(request.messages.last())
        .map(|m| m.text())
        .unwrap_or_default()
}

/// A value that fits a JSON schema's declared type (required properties filled in).
fn example_for_schema(schema: Option<&Value>) -> Value {
    let Some(schema) = schema else {
        return json!({});
    };
    match schema.get("type").and_then(Value::as_str) {
        Some("string") => json!("dummy"),
        Some("integer") | Some("number") => json!(0),
        Some("boolean") => json!(false),
        Some("array") => json!([]),
        Some("null") => Value::Null,
        _ => {
            let mut object = Map::new();
            let properties = schema.get("properties").and_then(Value::as_object);
            let required = schema.get("required").and_then(Value::as_array);
            for name in required.into_iter().flatten().filter_map(Value::as_str) {
                let property = properties.and_then(|p| p.get(name));
                object.insert(name.to_owned(), example_for_schema(property));
            }
            Value::Object(object)
        }
    }
}

fn forced_tool(request: &ChatCompletionRequest) -> Option<&Tool> {
    let tools = request.tools.as_ref()?;
    match request.tool_choice.as_ref()? {
        ToolChoice::Mode(ToolChoiceMode::Required) => tools.first(),
        ToolChoice::Named(named) => tools.iter().find(|t| t.function.name == named.function.name),
        ToolChoice::Mode(_) => None,
    }
}

fn truncate_words(text: &str, max_words: usize) -> String {
    let mut out = String::new();
    let mut words = 0;
    for piece in text.split_inclusive(char::is_whitespace) {
        if !piece.trim().is_empty() {
            if words == max_words {
                break;
            }
            words += 1;
        }
        out.push_str(piece);
    }
    out.trim_end().to_owned()
}

/// The dummy model's answer to `request`.
pub fn reply_for(request: &ChatCompletionRequest) -> ChatCompletion {
    let digest = digest_of(request);
    let prompt_tokens: u64 = request
        .messages
        .iter()
        .map(|m| count_tokens(&m.text()))
        .sum::<u64>()
        .max(1);
    let (message, finish_reason) = if let Some(tool) = forced_tool(request) {
        let arguments = example_for_schema(tool.function.parameters.as_ref()).to_string();
        let message = AssistantMessage {
            role: "assistant".to_owned(),
            content: None,
            tool_calls: Some(vec![ToolCall {
                id: format!("call_{digest}"),
                kind: "function".to_owned(),
                function: FunctionCall {
                    name: tool.function.name.clone(),
                    arguments,
                },
            }]),
            refusal: None,
        };
        (message, "tool_calls")
    } else {
        let echo: String = truncate_words(&last_user_text(request), 12);
        let mut content = match &request.response_format {
            Some(ResponseFormat::JsonObject) | Some(ResponseFormat::JsonSchema { .. }) => {
                json!({"digest": digest, "echo": echo}).to_string()
            }
            _ => format!("Dummy reply {digest} to: {echo}"),
        };
        let mut finish = "stop";
        for stop in request.stop_sequences().into_iter().filter(|s| !s.is_empty()) {
            if let Some(position) = content.find(stop) {
                content.truncate(position);
            }
        }
        if let Some(max) = request.max_output_tokens() {
            let max = usize::try_from(max).unwrap_or(usize::MAX);
            if content.split_whitespace().count() > max {
                content = truncate_words(&content, max);
                finish = "length";
            }
        }
        let message = AssistantMessage {
            role: "assistant".to_owned(),
            content: Some(content),
            tool_calls: None,
            refusal: None,
        };
        (message, finish)
    };
    let completion_tokens = message.content.as_deref().map(count_tokens).unwrap_or_else(|| {
        message
            .tool_calls
            .as_ref()
            .map_or(0, |c| u64::try_from(c.len()).unwrap_or(0))
    });
    ChatCompletion {
        id: format!("chatcmpl-dummy-{digest}"),
        object: "chat.completion".to_owned(),
        created: 0,
        model: request.model.clone(),
        choices: vec![Choice {
            index: 0,
            message,
            logprobs: None,
            finish_reason: Some(finish_reason.to_owned()),
        }],
        usage: Usage::new(prompt_tokens, completion_tokens),
        system_fingerprint: None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn request(body: Value) -> ChatCompletionRequest {
        serde_json::from_value(body).unwrap()
    }

    fn content(c: &ChatCompletion) -> String {
        c.choices[0].message.content.clone().unwrap_or_default()
    }

    #[test]
    fn same_input_same_answer_and_different_inputs_differ() {
        let a = request(json!({"model": "dummy", "messages": [{"role": "user", "content": "hello there"}]}));
        let b = request(json!({"model": "dummy", "messages": [{"role": "user", "content": "hello where"}]}));
        assert_eq!(reply_for(&a), reply_for(&a));
        assert_ne!(content(&reply_for(&a)), content(&reply_for(&b)));
        let usage = reply_for(&a).usage;
        assert_eq!(usage.prompt_tokens, 2);
        assert_eq!(usage.total_tokens, usage.prompt_tokens + usage.completion_tokens);
    }

    #[test]
    fn max_tokens_truncates_with_length_finish() {
        let r =
            request(json!({"model": "dummy", "max_tokens": 2, "messages": [{"role": "user", "content": "a b c d"}]}));
        let reply = reply_for(&r);
        assert_eq!(reply.usage.completion_tokens, 2);
        assert_eq!(reply.choices[0].finish_reason.as_deref(), Some("length"));
    }

    #[test]
    fn forced_tool_choice_yields_a_tool_call_with_required_arguments() {
        let r = request(json!({
            "model": "dummy",
            "messages": [{"role": "user", "content": "weather in Oslo"}],
            "tools": [{"type": "function", "function": {"name": "get_weather", "parameters": {
                "type": "object", "properties": {"city": {"type": "string"}, "days": {"type": "integer"}},
                "required": ["city", "days"]}}}],
            "tool_choice": "required"
        }));
        let reply = reply_for(&r);
        let call = &reply.choices[0].message.tool_calls.as_ref().unwrap()[0];
        assert_eq!(call.function.name, "get_weather");
        let args: Value = serde_json::from_str(&call.function.arguments).unwrap();
        assert_eq!(args, json!({"city": "dummy", "days": 0}));
        assert_eq!(reply.choices[0].finish_reason.as_deref(), Some("tool_calls"));
    }

    #[test]
    fn json_response_format_gives_json() {
        let r = request(json!({"model": "dummy", "response_format": {"type": "json_object"},
            "messages": [{"role": "user", "content": "x"}]}));
        let parsed: Value = serde_json::from_str(&content(&reply_for(&r))).unwrap();
        assert_eq!(parsed["echo"], "x");
    }

    #[test]
    fn stop_sequences_cut_the_answer() {
        let r = request(json!({"model": "dummy", "stop": "to:", "messages": [{"role": "user", "content": "x"}]}));
        assert!(!content(&reply_for(&r)).contains("to:"));
    }
}
