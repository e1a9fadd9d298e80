use super::*;
use serde_json::{json, Value};

fn request(extra: Value) -> ChatCompletionRequest {
    let mut body = json!({"model": "m", "messages": [{"role": "user", "content": "x"}]});
    for (key, value) in extra.as_object().unwrap() {
        body[key] = value.clone();
    }
    serde_json::from_value(body).unwrap()
}

/// `(param, code)` of the error `extra` causes.
fn rejection(extra: Value) -> (String, &'static str, String) {
    match validate_chat(&request(extra.clone())) {
        Err(InferenceError::InvalidRequest {
            param: Some(param),
            code: Some(code),
            message,
        }) => (param, code, message),
        other => panic!("{extra} should be rejected with a param and a code, got {other:?}"),
    }
}

#[test]
fn values_at_the_bounds_are_accepted() {
    let stops: Vec<String> = (0..4).map(|i| format!("s{i}")).collect();
    let biases: serde_json::Map<String, Value> = (0..300).map(|i| (i.to_string(), json!(-100))).collect();
    let metadata: serde_json::Map<String, Value> =
        (0..16).map(|i| (format!("{i:0>64}"), json!("v".repeat(512)))).collect();
    for extra in [
        json!({"stop": stops}),
        json!({"stop": "one"}),
        json!({"logit_bias": biases}),
        json!({"logit_bias": {"50256": 100}}),
        json!({"metadata": metadata}),
        json!({"max_tokens": 1, "max_completion_tokens": 1}),
        json!({"n": 1}),
        json!({"n": 128}),
        json!({"logprobs": true, "top_logprobs": 0}),
        json!({"logprobs": true, "top_logprobs": 20}),
        json!({"presence_penalty": -2.0, "frequency_penalty": 2.0}),
        json!({"temperature": 0, "top_p": 1}),
        json!({"seed": -5}),
    ] {
        assert_eq!(validate_chat(&request(extra.clone())), Ok(()), "{extra}");
    }
}

#[test]
fn values_past_the_bounds_name_the_param_with_openai_codes() {
    let stops: Vec<String> = (0..5).map(|i| format!("s{i}")).collect();
    let biases: serde_json::Map<String, Value> = (0..301).map(|i| (i.to_string(), json!(1))).collect();
    let metadata: serde_json::Map<String, Value> = (0..17).map(|i| (i.to_string(), json!("v"))).collect();
    for (extra, param, code) in [
        (json!({"stop": stops}), "stop", "array_above_max_length"),
        (
            json!({"logit_bias": biases}),
            "logit_bias",
            "object_above_max_properties",
        ),
        (
            json!({"logit_bias": {"50256": 101}}),
            "logit_bias",
            "decimal_above_max_value",
        ),
        (
            json!({"logit_bias": {"50256": -100.5}}),
            "logit_bias",
            "decimal_below_min_value",
        ),
        (json!({"logit_bias": {"hello": 1}}), "logit_bias", "invalid_value"),
        (json!({"logit_bias": {"-1": 1}}), "logit_bias", "invalid_value"),
        (json!({"metadata": metadata}), "metadata", "object_above_max_properties"),
        (
            json!({"metadata": {"k".repeat(65): "v"}}),
            "metadata",
            "string_above_max_length",
        ),
        (
            json!({"metadata": {"k": "v".repeat(513)}}),
            "metadata",
            "string_above_max_length",
        ),
        (json!({"max_tokens": 0}), "max_tokens", "integer_below_min_value"),
        (json!({"max_tokens": -1}), "max_tokens", "integer_below_min_value"),
        (
            json!({"max_completion_tokens": -7}),
            "max_completion_tokens",
            "integer_below_min_value",
        ),
        (json!({"n": 0}), "n", "integer_below_min_value"),
        (json!({"n": 129}), "n", "integer_above_max_value"),
        (
            json!({"logprobs": true, "top_logprobs": 21}),
            "top_logprobs",
            "integer_above_max_value",
        ),
        (
            json!({"logprobs": true, "top_logprobs": -1}),
            "top_logprobs",
            "integer_below_min_value",
        ),
        (json!({"top_logprobs": 3}), "top_logprobs", "invalid_value"),
        (
            json!({"logprobs": false, "top_logprobs": 3}),
            "top_logprobs",
            "invalid_value",
        ),
        (
            json!({"presence_penalty": 2.5}),
            "presence_penalty",
            "decimal_above_max_value",
        ),
        (
            json!({"frequency_penalty": -2.5}),
            "frequency_penalty",
            "decimal_below_min_value",
        ),
        (json!({"temperature": 2.1}), "temperature", "decimal_above_max_value"),
        (json!({"top_p": -0.1}), "top_p", "decimal_below_min_value"),
        (json!({"messages": []}), "messages", "empty_array"),
    ] {
        let (got_param, got_code, message) = rejection(extra.clone());
        assert_eq!((got_param.as_str(), got_code), (param, code), "{extra}: {message}");
        assert!(message.contains(&format!("'{param}'")), "{message}");
    }
}

#[test]
fn messages_quote_at_most_a_prefix_of_client_keys() {
    let (_, _, message) = rejection(json!({"logit_bias": {"x".repeat(100_000): 1}}));
    assert!(message.len() < 300, "{}", message.len());
    let (_, _, message) = rejection(json!({"metadata": {"k".repeat(100_000): "v"}}));
    assert!(message.len() < 300, "{}", message.len());
    let (_, _, message) = rejection(json!({"presence_penalty": 1e300}));
    assert!(message.len() < 300, "{message}");
}
