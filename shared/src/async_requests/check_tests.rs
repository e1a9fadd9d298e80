//! #26 C6/C10: `/async_predict` with `endpoint: "/inference"` is checked as `/inference` checks
//! it before anything is queued: input schemas, the variant, templates, the output schema.

use super::*;
use crate::adapters::embedded::{FileBlobStore, MemoryQueue, SqliteStateStore};
use crate::app::{function_checks, Adapters};
use serde_json::json;
use std::sync::Arc;

const CONFIG: &str = r#"
[models.dummy]
routing = ["d"]
[models.dummy.providers.d]
type = "dummy"

[functions.draft_email]
type = "chat"
system_schema = "system.json"
[functions.draft_email.variants.only]
type = "chat_completion"
model = "dummy"
system_template = "system.minijinja"

[functions.extract]
type = "json"
[functions.extract.variants.only]
type = "chat_completion"
model = "dummy"
"#;

/// The test configuration, loaded from a directory with its files, and adapters beside it.
async fn stack() -> (crate::app::LoadedConfig, Adapters) {
    let dir = tempfile::tempdir().unwrap().keep();
    for (path, text) in [
        ("nimbus.toml", CONFIG),
        (
            "system.json",
            r#"{"type": "object", "properties": {"recipient": {"type": "string"}}, "required": ["recipient"]}"#,
        ),
        ("system.minijinja", "Write to {{ recipient }}."),
    ] {
        std::fs::write(dir.join(path), text).unwrap();
    }
    let loaded = crate::app::load_local_config(&dir.join("nimbus.toml")).await.unwrap();
    let adapters = Adapters::new(
        Arc::new(SqliteStateStore::in_memory().unwrap()),
        Arc::new(FileBlobStore::open(dir.join("blobs")).unwrap()),
        Arc::new(MemoryQueue::new()),
    );
    (loaded, adapters)
}

async fn submission_check() -> SubmissionCheck {
    let (loaded, adapters) = stack().await;
    SubmissionCheck::new(&loaded.config, function_checks(&loaded, &adapters))
}

fn input(value: Value) -> Map<String, Value> {
    match value {
        Value::Object(map) => map,
        _ => unreachable!(),
    }
}

#[tokio::test]
async fn a_good_inference_passes_the_check() {
    let check = submission_check().await;
    let body = input(json!({"function_name": "draft_email", "input": {
        "system": {"recipient": "Ada"}, "messages": [{"role": "user", "content": "hi"}]}}));
    assert_eq!(check.check(AsyncEndpoint::Inference, &body), Ok(()));
}

#[tokio::test]
async fn schemas_variants_and_template_arguments_are_checked_at_submission() {
    let check = submission_check().await;
    for (body, field, words) in [
        (
            json!({"function_name": "draft_email", "input": {"system": {}, "messages": []}}),
            "input.system",
            "`recipient` is missing",
        ),
        (
            json!({"function_name": "draft_email", "input": {"system": {"recipient": 7}, "messages": []}}),
            "input.system",
            "/recipient",
        ),
        (
            json!({"function_name": "draft_email", "variant_name": "nope",
                   "input": {"system": {"recipient": "Ada"}, "messages": []}}),
            "variant_name",
            "Unknown variant",
        ),
    ] {
        let (found, message) = check.check(AsyncEndpoint::Inference, &input(body.clone())).unwrap_err();
        assert_eq!(found.as_deref(), Some(field), "{body}: {message}");
        assert!(message.contains(words), "{body}: {message}");
    }
}

#[tokio::test]
async fn a_poison_output_schema_is_refused_at_submission() {
    let check = submission_check().await;
    let chain = crate::schema_limits::tests::ref_chain(3_000);
    let body = input(json!({"function_name": "extract", "output_schema": chain,
        "input": {"messages": [{"role": "user", "content": "hi"}]}}));
    let (_, message) = check.check(AsyncEndpoint::Inference, &body).unwrap_err();
    assert!(
        message.contains("`output_schema`") && message.contains("$ref"),
        "{message}"
    );
}

#[tokio::test]
async fn a_submission_names_a_model_exactly_when_the_router_routes_it() {
    let (loaded, adapters) = stack().await;
    let check = SubmissionCheck::new(&loaded.config, function_checks(&loaded, &adapters));
    let router = crate::app::inference_service(&loaded.config, &adapters).unwrap();
    let empty = Map::new();
    for (name, known) in [
        ("dummy", true),
        ("dummy::echo", true),
        ("openai::gpt-4o-mini", true),
        ("openai::", false),
        ("nope::model", false),
        ("unknown", false),
    ] {
        for endpoint in [
            AsyncEndpoint::ChatCompletions,
            AsyncEndpoint::Embeddings,
            AsyncEndpoint::Inference,
        ] {
            assert_eq!(check.knows(endpoint, name, &empty), known, "{name} on {endpoint:?}");
        }
        assert_eq!(router.can_route(name), known, "{name}");
    }
}
