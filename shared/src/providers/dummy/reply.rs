//! Deterministic chat replies: the same request gives the same answer, different inputs differ.

use super::schema_instance::{instance_for, mix};
use crate::model::{
    ContentBlock, FinishReason, ModelChoice, ModelRequest, ModelResponse, ModelUsage, OutputMode, Role, ToolChoice,
    ToolDefinition,
};
use serde_json::json;
use sha2::{Digest, Sha256};

/// Whitespace-separated words: the dummy's token count.
pub(crate) fn count_tokens(text: &str) -> u64 {
    u64::try_from(text.split_whitespace().count()).unwrap_or(u64::MAX)
}

/// A digest of everything that shapes the answer.
fn digest_of(request: &ModelRequest) -> u64 {
    let mut hasher = Sha256::new();
    hasher.update(serde_json::to_vec(&request.system).unwrap_or_default());
    hasher.update([0]);
    for message in &request.messages {
        hasher.update(serde_json::to_vec(message).unwrap_or_default());
        hasher.update([0]);
    }
    for part in [
        serde_json::to_vec(&request.tools).unwrap_or_default(),
        serde_json::to_vec(&request.tool_choice).unwrap_or_default(),
        serde_json::to_vec(&request.output).unwrap_or_default(),
        serde_json::to_vec(&request.params.seed).unwrap_or_default(),
    ] {
        hasher.update(part);
        hasher.update([0]);
    }
    let mut first = [0u8; 8];
    first.copy_from_slice(&hasher.finalize()[..8]);
    u64::from_be_bytes(first)
}

/// The text of the last user message that is not only tool results (else the last message, else
/// the instructions).
fn last_user_text(request: &ModelRequest) -> String {
    request
        .messages
        .iter()
        .rev()
        .find(|m| {
            m.role == Role::User
                && m.content
                    .iter()
                    .any(|block| !matches!(block, ContentBlock::ToolResult { .. }))
        })
        .or(request.messages.last())
        .map(|m| m.text())
        .or_else(|| request.system.clone())
        .unwrap_or_default()
}

fn forced_tool(request: &ModelRequest) -> Option<&ToolDefinition> {
    match request.tool_choice.as_ref()? {
        ToolChoice::Required => request.tools.first(),
        ToolChoice::Specific(name) => request.tools.iter().find(|t| &t.name == name),
        ToolChoice::None | ToolChoice::Auto => None,
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
pub(crate) fn reply_for(request: &ModelRequest) -> ModelResponse {
    let digest = digest_of(request);
    let instructions = request.system.as_deref().map(count_tokens).unwrap_or(0);
    let prompt_tokens: u64 =
        (instructions + request.messages.iter().map(|m| count_tokens(&m.text())).sum::<u64>()).max(1);
    let choices: Vec<ModelChoice> = (0..request.choice_count())
        .map(|index| choice_for(request, variant(digest, index), index))
        .collect();
    let completion_tokens = choices.iter().map(|c| completion_tokens(&c.content)).sum();
    ModelResponse {
        id: format!("chatcmpl-dummy-{digest:016x}"),
        choices,
        usage: ModelUsage::new(prompt_tokens, completion_tokens),
        system_fingerprint: None,
        raw_response: None,
        raw_request: None,
        provider_name: String::new(),
        provider_type: String::new(),
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

fn choice_for(request: &ModelRequest, digest: u64, index: u32) -> ModelChoice {
    let (content, finish_reason) = if let Some(tool) = forced_tool(request) {
        let arguments = match tool.parameters.as_ref() {
            Some(schema) => instance_for(schema, digest),
            None => json!({}),
        };
        let call = ContentBlock::ToolCall {
            id: format!("call_{digest:016x}"),
            name: tool.name.clone(),
            arguments: arguments.to_string(),
        };
        (call, FinishReason::ToolCall)
    } else {
        let mut content = content_for(request, digest);
        let mut finish = FinishReason::Stop;
        for stop in request.params.stop_sequences.iter().filter(|s| !s.is_empty()) {
            if let Some(position) = content.find(stop.as_str()) {
                content.truncate(position);
                finish = FinishReason::StopSequence;
            }
        }
        if let Some(max) = request.params.max_tokens {
            let max = usize::try_from(max).unwrap_or(usize::MAX);
            if content.split_whitespace().count() > max {
                content = truncate_words(&content, max);
                finish = FinishReason::Length;
            }
        }
        (ContentBlock::Text { text: content }, finish)
    };
    ModelChoice {
        index,
        content: vec![content],
        finish_reason: Some(finish_reason),
        logprobs: None,
    }
}

/// Text, or JSON for the JSON output modes (an instance of the schema for `json_schema`).
fn content_for(request: &ModelRequest, digest: u64) -> String {
    let echo: String = truncate_words(&last_user_text(request), 12);
    match &request.output {
        OutputMode::JsonSchema {
            schema: Some(schema), ..
        } => instance_for(schema, digest).to_string(),
        OutputMode::JsonObject | OutputMode::JsonSchema { schema: None, .. } => {
            json!({"digest": format!("{digest:016x}"), "echo": echo}).to_string()
        }
        OutputMode::Text => format!("Dummy reply {digest:016x} to: {echo}"),
    }
}

fn completion_tokens(content: &[ContentBlock]) -> u64 {
    content
        .iter()
        .map(|block| match block {
            ContentBlock::Text { text } => count_tokens(text),
            _ => 1,
        })
        .sum()
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::Value;

    fn request(body: Value) -> ModelRequest {
        let typed = serde_json::from_value(body.clone()).unwrap();
        let Value::Object(raw) = body else { unreachable!() };
        crate::openai::to_model::chat_request_to_model(&typed, &raw)
    }

    fn text_of(choice: &ModelChoice) -> Option<String> {
        match choice.content.first() {
            Some(ContentBlock::Text { text }) => Some(text.clone()),
            _ => None,
        }
    }

    /// The first choice's tool call: (name, arguments).
    fn call_of(reply: &ModelResponse) -> (String, String) {
        match reply.choices[0].content.first() {
            Some(ContentBlock::ToolCall { name, arguments, .. }) => (name.clone(), arguments.clone()),
            other => panic!("not a tool call: {other:?}"),
        }
    }

    fn content(c: &ModelResponse) -> String {
        text_of(&c.choices[0]).unwrap_or_default()
    }

    #[test]
    fn same_input_same_answer_and_different_inputs_differ() {
        let a = request(json!({"model": "dummy", "messages": [{"role": "user", "content": "hello there"}]}));
        let b = request(json!({"model": "dummy", "messages": [{"role": "user", "content": "hello where"}]}));
        assert_eq!(reply_for(&a), reply_for(&a));
        assert_ne!(content(&reply_for(&a)), content(&reply_for(&b)));
        let usage = reply_for(&a).usage;
        assert_eq!(usage.input_tokens, 2);
    }

    #[test]
    fn max_tokens_truncates_with_length_finish() {
        let r =
            request(json!({"model": "dummy", "max_tokens": 2, "messages": [{"role": "user", "content": "a b c d"}]}));
        let reply = reply_for(&r);
        assert_eq!(reply.usage.output_tokens, 2);
        assert_eq!(reply.choices[0].finish_reason, Some(FinishReason::Length));
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
        let (name, arguments) = call_of(&reply);
        assert_eq!(name, "get_weather");
        let args: Value = serde_json::from_str(&arguments).unwrap();
        assert!(args["city"].is_string() && args["days"].is_i64(), "{args}");
        assert_eq!(reply.choices[0].finish_reason, Some(FinishReason::ToolCall));
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
        let args: Value = serde_json::from_str(&call_of(&reply).1).unwrap();
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
        let distinct: std::collections::HashSet<String> = many.choices.iter().map(|c| text_of(c).unwrap()).collect();
        assert_eq!(distinct.len(), 4);
        assert_eq!(many.usage.input_tokens, single.usage.input_tokens);
        assert_eq!(many.usage.output_tokens, 4 * single.usage.output_tokens);
    }

    #[test]
    fn stop_sequences_cut_the_answer() {
        let r = request(json!({"model": "dummy", "stop": "to:", "messages": [{"role": "user", "content": "x"}]}));
        let reply = reply_for(&r);
        assert!(!content(&reply).contains("to:"));
        assert_eq!(reply.choices[0].finish_reason, Some(FinishReason::StopSequence));
    }

    #[test]
    fn instructions_and_tool_results_count_and_the_last_user_words_are_echoed() {
        let r = request(json!({"model": "dummy", "messages": [
            {"role": "system", "content": "be brief"},
            {"role": "user", "content": "weather in Oslo"},
            {"role": "assistant", "tool_calls": [
                {"id": "c1", "type": "function", "function": {"name": "w", "arguments": "{}"}}]},
            {"role": "tool", "tool_call_id": "c1", "content": "sunny"}]}));
        let reply = reply_for(&r);
        assert!(content(&reply).ends_with("to: weather in Oslo"), "{}", content(&reply));
        assert_eq!(reply.usage.input_tokens, 2 + 3 + 2 + 1);
    }
}
