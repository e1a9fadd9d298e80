//! Deterministic chat replies: the same request gives the same answer, different inputs differ.

use super::schema_instance::{instance_for, mix};
use crate::openai::chat::{
    AssistantMessage, ChatCompletion, ChatCompletionRequest, Choice, FunctionCall, ResponseFormat, Tool, ToolCall,
    ToolChoice, ToolChoiceMode, Usage,
};
use serde_json::json;
use sha2::{Digest, Sha256};

/// Whitespace-separated words: the dummy's token count.
pub fn count_tokens(text: &str) -> u64 {
    u64::try_from(text.split_whitespace().count()).unwrap_or(u64::MAX)
}

/// A digest of everything that shapes the answer.
fn digest_of(request: &ChatCompletionRequest) -> u64 {
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
    let mut first = [0u8; 8];
    first.copy_from_slice(&hasher.finalize()[..8]);
    u64::from_be_bytes(first)
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

/// The dummy model's answer to `request`: `n` choices (choice 0 is the same whatever `n`),
/// usage counting the prompt once and every choice's completion.
pub fn reply_for(request: &ChatCompletionRequest) -> ChatCompletion {
    let digest = digest_of(request);
    let prompt_tokens: u64 = request
        .messages
        .iter()
        .map(|m| count_tokens(&m.text()))
        .sum::<u64>()
        .max(1);
    let choices: Vec<Choice> = (0..request.choice_count())
        .map(|index| choice_for(request, variant(digest, index), index))
        .collect();
    let completion_tokens = choices.iter().map(|c| completion_tokens(&c.message)).sum();
    ChatCompletion {
        id: format!("chatcmpl-dummy-{digest:016x}"),
        object: "chat.completion".to_owned(),
        created: 0,
        model: request.model.clone(),
        choices,
        usage: Usage::new(prompt_tokens, completion_tokens),
        system_fingerprint: None,
    }
}

/// The digest of choice `index`: the request's own for the first choice.
fn variant(digest: u64, index: u32) -> u64 {
    if index == 0 {
        digest
    } else {
        mix(digest, &index.to_le_bytes())
    }
}

fn choice_for(request: &ChatCompletionRequest, digest: u64, index: u32) -> Choice {
    let (message, finish_reason) = if let Some(tool) = forced_tool(request) {
        let arguments = match tool.function.parameters.as_ref() {
            Some(schema) => instance_for(schema, digest),
            None => json!({}),
        };
        let message = AssistantMessage {
            role: "assistant".to_owned(),
            content: None,
            tool_calls: Some(vec![ToolCall {
                id: format!("call_{digest:016x}"),
                kind: "function".to_owned(),
                function: FunctionCall {
                    name: tool.function.name.clone(),
                    arguments: arguments.to_string(),
                },
            }]),
            refusal: None,
        };
        (message, "tool_calls")
    } else {
        let mut content = content_for(request, digest);
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
    Choice {
        index,
        message,
        logprobs: None,
        finish_reason: Some(finish_reason.to_owned()),
    }
}

/// Text, or JSON for the JSON response formats (an instance of the schema for `json_schema`).
fn content_for(request: &ChatCompletionRequest, digest: u64) -> String {
    let echo: String = truncate_words(&last_user_text(request), 12);
    let schema = match &request.response_format {
        Some(ResponseFormat::JsonSchema { json_schema }) => json_schema.get("schema"),
        _ => None,
    };
    match (&request.response_format, schema) {
        (_, Some(schema)) => instance_for(schema, digest).to_string(),
        (Some(ResponseFormat::JsonObject) | Some(ResponseFormat::JsonSchema { .. }), None) => {
            json!({"digest": format!("{digest:016x}"), "echo": echo}).to_string()
        }
        _ => format!("Dummy reply {digest:016x} to: {echo}"),
    }
}

fn completion_tokens(message: &AssistantMessage) -> u64 {
    match (&message.content, &message.tool_calls) {
        (Some(content), _) => count_tokens(content),
        (None, Some(calls)) => u64::try_from(calls.len()).unwrap_or(0),
        (None, None) => 0,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::Value;

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
        assert!(args["city"].is_string() && args["days"].is_i64(), "{args}");
        assert_eq!(reply.choices[0].finish_reason.as_deref(), Some("tool_calls"));
    }

    #[test]
    fn json_response_format_gives_json() {
        let r = request(json!({"model": "dummy", "response_format": {"type": "json_object"},
            "messages": [{"role": "user", "content": "x"}]}));
        let parsed: Value = serde_json::from_str(&content(&reply_for(&r))).unwrap();
        assert_eq!(parsed["echo"], "x");
    }

    fn assert_valid(schema: &Value, instance: &Value) {
        let validator = jsonschema::validator_for(schema).unwrap();
        let errors: Vec<String> = validator.iter_errors(instance).map(|e| e.to_string()).collect();
        assert!(errors.is_empty(), "{instance} against {schema}: {errors:?}");
    }

    fn weather_schema() -> Value {
        json!({
            "type": "object", "additionalProperties": false,
            "properties": {
                "city": {"type": "string"},
                "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]},
                "days": {"type": "integer", "minimum": 1, "maximum": 14},
                "hourly": {"type": ["boolean", "null"]}
            },
            "required": ["city", "unit"]
        })
    }

    #[test]
    fn json_schema_answers_are_instances_of_the_schema() {
        let r = request(
            json!({"model": "dummy", "messages": [{"role": "user", "content": "weather?"}],
            "response_format": {"type": "json_schema",
                                "json_schema": {"name": "w", "strict": true, "schema": weather_schema()}}}),
        );
        let answer: Value = serde_json::from_str(&content(&reply_for(&r))).unwrap();
        assert_valid(&weather_schema(), &answer);
        assert!(
            answer.get("days").is_some() && answer.get("hourly").is_some(),
            "{answer}"
        );
        assert_eq!(reply_for(&r), reply_for(&r));
    }

    #[test]
    fn tool_arguments_are_instances_of_the_parameters() {
        let r = request(json!({
            "model": "dummy",
            "messages": [{"role": "user", "content": "weather in Oslo"}],
            "tools": [{"type": "function", "function": {"name": "get_weather", "parameters": weather_schema()}}],
            "tool_choice": {"type": "function", "function": {"name": "get_weather"}}
        }));
        let reply = reply_for(&r);
        let call = &reply.choices[0].message.tool_calls.as_ref().unwrap()[0];
        let args: Value = serde_json::from_str(&call.function.arguments).unwrap();
        assert_valid(&weather_schema(), &args);
        assert!(args.get("days").is_some(), "optional properties are filled: {args}");
    }

    #[test]
    fn n_choices_differ_and_the_first_is_the_single_answer() {
        let body = json!({"model": "dummy", "messages": [{"role": "user", "content": "a b"}]});
        let mut with_n = body.clone();
        with_n["n"] = json!(4);
        let single = reply_for(&request(body));
        let many = reply_for(&request(with_n));
        assert_eq!(many.choices.len(), 4);
        assert_eq!(many.choices[0], single.choices[0]);
        let distinct: std::collections::HashSet<String> = many
            .choices
            .iter()
            .map(|c| c.message.content.clone().unwrap())
            .collect();
        assert_eq!(distinct.len(), 4);
        assert_eq!(many.usage.prompt_tokens, single.usage.prompt_tokens);
        assert_eq!(many.usage.completion_tokens, 4 * single.usage.completion_tokens);
    }

    #[test]
    fn stop_sequences_cut_the_answer() {
        let r = request(json!({"model": "dummy", "stop": "to:", "messages": [{"role": "user", "content": "x"}]}));
        assert!(!content(&reply_for(&r)).contains("to:"));
    }
}
