//! What `prepare` puts in the model request: json mode, schemas, tools, parameters.

use super::*;
use crate::app::LoadedConfig;
use crate::config::Config;
use crate::tensorzero::function_calls::request::InferenceRequest;
use serde_json::json;
use uuid::Uuid;

const CONFIG: &str = r#"
[models.m]
routing = ["d"]
[models.m.providers.d]
type = "dummy"

[tools.lookup]
description = "Look something up"
parameters = "unused"
[tools.other]
description = "Something else"
parameters = "unused"

[functions.chat]
type = "chat"
tools = ["lookup"]
[functions.chat.variants.v]
type = "chat_completion"
model = "m"
reasoning_effort = "low"
service_tier = "flex"
verbosity = "high"
thinking_budget_tokens = 1024

[functions.extract]
type = "json"
[functions.extract.variants.on]
type = "chat_completion"
model = "m"
json_mode = "on"
"#;

fn functions() -> FunctionSet {
    let mut files = std::collections::BTreeMap::new();
    files.insert("unused".to_owned(), r#"{"type": "object"}"#.to_owned());
    let config = Config::from_toml(CONFIG).unwrap();
    let loaded = LoadedConfig::compile(crate::config::ConfigSources { config, files }).unwrap();
    std::sync::Arc::try_unwrap(loaded.functions).unwrap()
}

/// The model request `body` prepares to (the variant drawn for it, or the model).
fn prepared(body: serde_json::Value) -> PreparedCall {
    use crate::ports::{SystemClock, UuidV7Ids};
    use crate::tensorzero::function_calls::checks::FunctionChecks;
    let checks = FunctionChecks::new(
        std::sync::Arc::new(functions()),
        std::sync::Arc::new(SystemClock),
        std::sync::Arc::new(UuidV7Ids),
    );
    let request: InferenceRequest = serde_json::from_value(body).unwrap();
    let call = request.into_call(1_790_000_000_000, Uuid::now_v7).unwrap();
    let target = checks.resolve(&call).unwrap();
    let plan = checks.next_plan(target, &call, &Default::default()).unwrap();
    prepare(checks.functions(), plan, &call).unwrap()
}

fn says(text: &str) -> serde_json::Value {
    json!({"messages": [{"role": "user", "content": text}]})
}

#[test]
fn a_model_name_call_with_an_output_schema_sends_the_schema() {
    let schema = json!({"type": "object", "properties": {"zeta": {"type": "string"}, "alpha": {"type": "string"}}});
    let call = prepared(json!({
        "model_name": "m", "input": says("hi"), "output_schema": schema,
        "params": {"chat_completion": {"json_mode": "strict"}}
    }));
    let OutputMode::JsonSchema { schema: Some(sent), .. } = &call.request.output else {
        panic!("{:?}", call.request.output);
    };
    assert_eq!(sent, &schema);
    // As written: `zeta` before `alpha`.
    let keys: Vec<&String> = sent["properties"].as_object().unwrap().keys().collect();
    assert_eq!(keys, ["zeta", "alpha"]);
    // A chat answer stays text: nothing checks it against the schema.
    assert!(call.rules.output_schema.is_none());
}

#[test]
fn json_mode_on_adds_the_json_instruction_unless_the_prompt_mentions_json() {
    let plain = prepared(json!({"function_name": "extract", "input": says("Who wrote this?")}));
    assert_eq!(plain.request.output, OutputMode::JsonObject);
    assert_eq!(plain.request.system.as_deref(), Some(JSON_INSTRUCTION));
    let with_system = prepared(json!({
        "function_name": "extract", "input": {"system": "Be brief.", "messages": [{"role": "user", "content": "x"}]}
    }));
    assert_eq!(
        with_system.request.system.as_deref(),
        Some(format!("{JSON_INSTRUCTION}\n\nBe brief.").as_str())
    );
    let mentioned = prepared(json!({"function_name": "extract", "input": says("Answer as Json please")}));
    assert_eq!(mentioned.request.system, None);
    let strict = prepared(json!({
        "function_name": "extract", "input": says("x"), "params": {"chat_completion": {"json_mode": "strict"}}
    }));
    assert_eq!(strict.request.system, None);
}

#[test]
fn reasoning_parameters_come_from_the_variant_and_the_request_beats_it() {
    let configured = prepared(json!({"function_name": "chat", "input": says("x")}));
    let params = &configured.request.params;
    assert_eq!(params.reasoning_effort.as_deref(), Some("low"));
    assert_eq!(params.service_tier.as_deref(), Some("flex"));
    assert_eq!(params.verbosity.as_deref(), Some("high"));
    assert_eq!(params.thinking_budget_tokens, Some(1024));
    let overridden = prepared(json!({
        "function_name": "chat", "input": says("x"),
        "params": {"chat_completion": {"reasoning_effort": "high", "service_tier": "priority",
            "verbosity": "low", "thinking_budget_tokens": 5}}
    }));
    let params = &overridden.request.params;
    assert_eq!(params.reasoning_effort.as_deref(), Some("high"));
    assert_eq!(params.service_tier.as_deref(), Some("priority"));
    assert_eq!(params.verbosity.as_deref(), Some("low"));
    assert_eq!(params.thinking_budget_tokens, Some(5));
    // TensorZero's `openai` provider spells the cap `max_completion_tokens`; one attempt per
    // provider unless configured.
    assert!(overridden.request.openai_pass_through.max_completion_tokens_spelling);
    assert_eq!(overridden.request.retries, RetryScope::Inference);
}

#[test]
fn allowed_tools_offers_every_tool_and_names_the_allowed_ones() {
    let all = prepared(json!({"function_name": "chat", "input": says("x")}));
    assert_eq!(all.request.allowed_tools, None);
    assert_eq!(all.request.tools.len(), 1);
    let restricted = prepared(json!({
        "function_name": "chat", "input": says("x"), "allowed_tools": ["other"],
        "additional_tools": [{"name": "extra", "description": "d", "parameters": {"type": "object"}}]
    }));
    let offered: Vec<&str> = restricted.request.tools.iter().map(|t| t.name.as_str()).collect();
    assert_eq!(offered, ["lookup", "other", "extra"]);
    assert_eq!(
        restricted.request.allowed_tools,
        Some(vec!["other".to_owned(), "extra".to_owned()])
    );
}
