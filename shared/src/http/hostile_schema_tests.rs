//! #26 C5–C7, C10–C12, C21: hostile JSON Schemas and numbers through every route that takes a
//! schema. A schema past the bounds is a 4xx naming its field; extreme numbers get an answer; the
//! process (here: the test) lives, and the next request is served.

use super::tests::{adapters, state_for, CONFIG};
use super::*;
use crate::auth::AuthMode;
use crate::schema_limits::tests::ref_chain;
use axum::body::Body;
use axum::http::{Request, StatusCode};
use serde_json::{json, Value};
use tower::ServiceExt;

fn router(dir: &std::path::Path) -> Router {
    let config = format!(
        "{CONFIG}\n[functions.extract]\ntype = \"json\"\n[functions.extract.variants.only]\ntype = \"chat_completion\"\nmodel = \"dummy\"\n"
    );
    local_router(state_for(&config, &adapters(dir), AuthMode::OpenWhenNoKeys))
}

async fn post(router: &Router, path: &str, body: String) -> (StatusCode, Value) {
    let request = Request::builder()
        .method("POST")
        .uri(path)
        .header("content-type", "application/json")
        .body(Body::from(body))
        .unwrap();
    let response = router.clone().oneshot(request).await.unwrap();
    let status = response.status();
    let bytes = axum::body::to_bytes(response.into_body(), usize::MAX).await.unwrap();
    let value = serde_json::from_slice(&bytes).unwrap_or(Value::String(String::from_utf8_lossy(&bytes).into_owned()));
    (status, value)
}

fn hello() -> Value {
    json!({"messages": [{"role": "user", "content": "hi"}]})
}

/// The message of any surface's error body.
fn message(body: &Value) -> String {
    let error = &body["error"];
    error["message"]
        .as_str()
        .or(error.as_str())
        .unwrap_or_default()
        .to_owned()
}

/// `{"type": "object", "properties": {"a": {… depth levels …}}}`.
fn nested(depth: usize) -> Value {
    let mut schema = json!({"type": "string"});
    for _ in 0..depth {
        schema = json!({"type": "object", "properties": {"a": schema}});
    }
    schema
}

/// Every route that takes a client schema, with `schema` in it, and the field it must name.
fn schema_requests(schema: &Value) -> Vec<(&'static str, Value, &'static str)> {
    vec![
        (
            "/inference",
            json!({"function_name": "extract", "input": hello(), "output_schema": schema}),
            "output_schema",
        ),
        (
            "/inference",
            json!({"function_name": "extract", "input": hello(), "output_schema": schema,
                   "params": {"chat_completion": {"json_mode": "tool"}}}),
            "output_schema",
        ),
        (
            "/inference",
            json!({"model_name": "dummy", "input": hello(),
                   "additional_tools": [{"name": "t", "description": "d", "parameters": schema}]}),
            "parameters",
        ),
        (
            "/openai/v1/chat/completions",
            json!({"model": "tensorzero::function_name::extract", "messages": [{"role": "user", "content": "hi"}],
                   "response_format": {"type": "json_schema", "json_schema": {"name": "x", "schema": schema}}}),
            "output_schema",
        ),
        (
            "/v1/chat/completions",
            json!({"model": "dummy", "messages": [{"role": "user", "content": "hi"}],
                   "response_format": {"type": "json_schema", "json_schema": {"name": "x", "schema": schema}}}),
            "response_format.json_schema.schema",
        ),
        (
            "/v1/chat/completions",
            json!({"model": "dummy", "messages": [{"role": "user", "content": "hi"}],
                   "tools": [{"type": "function", "function": {"name": "t", "parameters": schema}}]}),
            "tools[0].function.parameters",
        ),
        (
            "/batch_inference",
            json!({"function_name": "extract", "inputs": [hello()], "output_schemas": [schema]}),
            "output_schema",
        ),
        (
            "/async_predict",
            json!({"endpoint": "/inference", "model_input":
                   {"function_name": "extract", "input": hello(), "output_schema": schema}}),
            "output_schema",
        ),
    ]
}

#[tokio::test]
async fn a_long_ref_chain_or_deep_nesting_is_refused_naming_the_field_and_the_server_lives() {
    let dir = tempfile::tempdir().unwrap();
    let router = router(dir.path());
    for schema in [ref_chain(3_000), ref_chain(100), nested(60)] {
        for (path, body, field) in schema_requests(&schema) {
            let (status, answer) = post(&router, path, body.to_string()).await;
            assert_eq!(status, StatusCode::BAD_REQUEST, "{path} {field}: {answer}");
            let text = answer.to_string();
            assert!(text.contains(field), "{path}: {answer}");
            assert!(text.len() < 2_000, "{path}: an answer of {} bytes", text.len());
        }
    }
    let (status, answer) = post(
        &router,
        "/inference",
        json!({"function_name": "extract", "input": hello()}).to_string(),
    )
    .await;
    assert_eq!(status, StatusCode::OK, "{answer}");
}

#[tokio::test]
async fn extreme_numeric_bounds_get_an_answer() {
    let dir = tempfile::tempdir().unwrap();
    let router = router(dir.path());
    for rule in [
        json!({"type": "integer", "minimum": 1e308}),
        json!({"type": "integer", "maximum": -1e308}),
        json!({"type": "integer", "minimum": 1e308, "maximum": -1e308}),
        json!({"type": "number", "multipleOf": 1e-300, "minimum": 1}),
    ] {
        let schema = json!({"type": "object", "properties": {"n": rule}, "required": ["n"]});
        for (path, body, _) in schema_requests(&schema).into_iter().take(5) {
            let (status, answer) = post(&router, path, body.to_string()).await;
            assert_eq!(status, StatusCode::OK, "{path} {rule}: {answer}");
        }
    }
}

#[tokio::test]
async fn a_failed_schema_rule_names_the_property() {
    let dir = tempfile::tempdir().unwrap();
    let router = router(dir.path());
    // The dummy answers a value for the schema; a demonstration is the client's value.
    let (status, answer) = post(
        &router,
        "/inference",
        json!({"function_name": "extract", "input": hello(),
               "output_schema": {"type": "object", "properties": {"name": {"type": "string"}}, "required": ["name"]}})
        .to_string(),
    )
    .await;
    assert_eq!(status, StatusCode::OK, "{answer}");
    let inference_id = answer["inference_id"].as_str().unwrap().to_owned();
    for (value, words) in [
        (json!({}), "property `name` is missing"),
        (json!({"name": 3}), "`/name`"),
    ] {
        let (status, answer) = post(
            &router,
            "/feedback",
            json!({"inference_id": inference_id, "metric_name": "demonstration", "value": value}).to_string(),
        )
        .await;
        assert_eq!(status, StatusCode::BAD_REQUEST, "{answer}");
        assert!(message(&answer).contains(words), "{answer}");
    }
}

#[tokio::test]
async fn smaller_inputs_are_refused_naming_the_field() {
    let dir = tempfile::tempdir().unwrap();
    let router = router(dir.path());
    let file = |data: &str| {
        json!({"model_name": "dummy", "input": {"messages": [{"role": "user", "content": [
            {"type": "file", "file_type": "base64", "mime_type": "image/png", "data": data}]}]}})
    };
    let mut wrong = Vec::new();
    for (path, body, words) in [
        (
            "/inference",
            json!({"model_name": "dummy", "input": hello(), "params": {"chat_completion": {"seed": -1}}}).to_string(),
            "seed",
        ),
        (
            "/batch_inference",
            json!({"function_name": "extract", "inputs": [hello()], "params": {"chat_completion": {"seed": [-1]}}})
                .to_string(),
            "seed",
        ),
        (
            "/openai/v1/chat/completions",
            json!({"model": "tensorzero::model_name::dummy", "messages": [{"role": "user", "content": "hi"}], "seed": -1})
                .to_string(),
            "seed",
        ),
        ("/inference", file("not base64!").to_string(), ".data"),
        (
            "/openai/v1/chat/completions",
            json!({"model": "tensorzero::model_name::dummy", "messages": [{"role": "user", "content": "hi"}],
                   "tensorzero::params": "fast"})
            .to_string(),
            "tensorzero::params",
        ),
        (
            "/v1/webhook_endpoints",
            json!({"url": "http://127.0.0.1:9/hooks", "event_types": ["batch.completed"], "colour": "red"}).to_string(),
            "colour",
        ),
    ] {
        let (status, answer) = post(&router, path, body.clone()).await;
        if status != StatusCode::BAD_REQUEST || !answer.to_string().contains(words) {
            wrong.push(format!("{path} {body}: {status} {answer}"));
        }
    }
    let (status, _) = post(&router, "/inference", file("aGVsbG8=").to_string()).await;
    assert_eq!(status, StatusCode::OK);
    let (status, answer) = post(&router, "/async_predict", "{\"model_input\": ".to_owned()).await;
    let named = answer["code"] == "MODEL_INVALID_INPUT"
        && answer["field"] == "body"
        && answer["error"].as_str().is_some_and(|e| e.contains("column"));
    if status != StatusCode::BAD_REQUEST || !named {
        wrong.push(format!("/async_predict malformed JSON: {status} {answer}"));
    }
    assert!(wrong.is_empty(), "{}", wrong.join("\n"));
}
