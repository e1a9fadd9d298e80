//! DICL through the function layer as the app wires it (embedded adapters, the dummy provider):
//! examples built from stored inferences, then `/inference` on the DICL variant with and without
//! neighbours, whole and streamed; and what a build refuses.

use super::*;
use crate::adapters::embedded::{FileBlobStore, MemoryQueue, SqliteStateStore};
use crate::app::{dicl_builder, function_service, inference_service, Adapters, LoadedConfig, ModelLayers};
use crate::config::{Config, ConfigSources, DEFAULT_SYSTEM_INSTRUCTIONS};
use crate::ports::inference_records::{FeedbackKind, FeedbackRecord, FeedbackTarget, InferenceRecord};
use crate::ports::{FeedbackStore, InferenceStore, ProjectId};
use crate::tensorzero::function_calls::{ChunkBody, FunctionService, InferenceCall, InferenceRequest};
use futures::StreamExt;
use serde_json::{json, Value};
use std::collections::BTreeMap;
use std::sync::Arc;
use uuid::Uuid;

const CONFIG: &str = r#"
[functions.qa]
type = "chat"
[functions.qa.variants.base]
type = "chat_completion"
model = "dummy::gen"
weight = 1
[functions.qa.variants.dicl]
type = "experimental_dynamic_in_context_learning"
embedding_model = "dummy::embed"
model = "dummy::gen"
k = 2
[functions.qa.variants.near]
type = "experimental_dynamic_in_context_learning"
embedding_model = "dummy::embed"
model = "dummy::gen"
k = 2
max_distance = 0.01

[functions.extract]
type = "json"
[functions.extract.variants.base]
type = "chat_completion"
model = "dummy::gen"
weight = 1
[functions.extract.variants.dicl]
type = "experimental_dynamic_in_context_learning"
embedding_model = "dummy::embed"
model = "dummy::gen"
k = 1
json_mode = "strict"

[models.slow_embed]
routing = ["d"]
[models.slow_embed.providers.d]
type = "dummy"
latency_ms = 400

[functions.patient]
type = "chat"
[functions.patient.experimentation]
type = "static"
candidate_variants = ["slow"]
fallback_variants = ["plain"]
[functions.patient.variants.slow]
type = "experimental_dynamic_in_context_learning"
embedding_model = "slow_embed"
model = "dummy::gen"
k = 1
timeouts = { non_streaming = { total_ms = 50 } }
[functions.patient.variants.plain]
type = "chat_completion"
model = "dummy::gen"

[tools.lookup]
description = "Look something up"
parameters = "lookup.json"

[functions.with_tools]
type = "chat"
tools = ["lookup"]
[functions.with_tools.variants.dicl]
type = "experimental_dynamic_in_context_learning"
embedding_model = "dummy::embed"
model = "dummy::gen"
k = 1
"#;

struct Stack {
    service: Arc<FunctionService>,
    builder: Arc<DiclBuilder>,
    records: Arc<dyn InferenceStore>,
    feedback: Arc<dyn FeedbackStore>,
}

fn stack() -> Stack {
    let files = BTreeMap::from([("lookup.json".to_owned(), r#"{"type": "object"}"#.to_owned())]);
    let loaded = LoadedConfig::compile(ConfigSources {
        config: Config::from_toml(CONFIG).unwrap(),
        files,
    })
    .unwrap();
    let adapters = Adapters::new(
        Arc::new(SqliteStateStore::in_memory().unwrap()),
        Arc::new(FileBlobStore::open(tempfile::tempdir().unwrap().keep()).unwrap()),
        Arc::new(MemoryQueue::new()),
    );
    let inference = inference_service(&loaded.config, &adapters).unwrap();
    let records = adapters.inference_records();
    let service = function_service(&loaded, &adapters, Arc::clone(&inference), Arc::clone(&records));
    let layers = ModelLayers {
        inference,
        functions: Arc::clone(&service),
        records: Arc::clone(&records),
    };
    Stack {
        builder: dicl_builder(&loaded, &adapters, &layers),
        feedback: adapters.feedback_store(),
        service,
        records,
    }
}

fn project() -> ProjectId {
    ProjectId::new("p")
}

fn call(service: &FunctionService, body: Value) -> InferenceCall {
    let request: InferenceRequest = serde_json::from_value(body).unwrap();
    request.into_call(service.now_ms(), Uuid::now_v7).unwrap()
}

fn asking(function: &str, variant: &str, question: &str) -> Value {
    json!({
        "function_name": function,
        "variant_name": variant,
        "input": {"system": "be brief", "messages": [{"role": "user", "content": question}]}
    })
}

async fn stored(records: &Arc<dyn InferenceStore>, id: Uuid) -> InferenceRecord {
    for _ in 0..300 {
        if let Some(record) = records.get(&project(), id).await.unwrap() {
            return record;
        }
        tokio::time::sleep(std::time::Duration::from_millis(10)).await;
    }
    panic!("inference {id} was never stored")
}

/// Run `questions` on the base variant and wait for their records.
async fn seed(stack: &Stack, function: &str, questions: &[&str]) -> Vec<InferenceRecord> {
    let mut out = Vec::new();
    for question in questions {
        let body = asking(function, "base", question);
        let result = stack
            .service
            .infer(&project(), &call(&stack.service, body))
            .await
            .unwrap();
        out.push(stored(&stack.records, result.inference_id).await);
    }
    out
}

fn build_request(function: &str, variant: &str) -> DiclBuildRequest {
    serde_json::from_value(json!({"function_name": function, "variant_name": variant})).unwrap()
}

/// The chat messages the generation call sent: `(role, text)`.
fn sent_messages(record: &InferenceRecord) -> Vec<(String, String)> {
    // Whole: the embedding first; streamed: it is stored after the streamed call.
    let generation = record
        .model_calls
        .iter()
        .find(|c| c.model_name != "dummy::embed")
        .unwrap();
    let body: Value = serde_json::from_str(&generation.raw_request).unwrap();
    body["messages"]
        .as_array()
        .unwrap()
        .iter()
        .map(|message| {
            let text = match &message["content"] {
                Value::String(text) => text.clone(),
                Value::Array(parts) => parts.iter().filter_map(|p| p["text"].as_str()).collect(),
                other => other.to_string(),
            };
            (message["role"].as_str().unwrap().to_owned(), text)
        })
        .collect()
}

const QUESTIONS: [&str; 3] = [
    "What is the capital of France?",
    "How many legs has a spider?",
    "Who wrote Hamlet?",
];

#[tokio::test]
async fn the_nearest_examples_come_before_the_request_and_the_embedding_is_recorded_first() {
    let stack = stack();
    let seeded = seed(&stack, "qa", &QUESTIONS).await;
    let report = stack
        .builder
        .build(&project(), &build_request("qa", "dicl"))
        .await
        .unwrap();
    assert_eq!(
        (report.examples, report.added, report.skipped_without_output),
        (3, 3, 0)
    );
    assert_eq!(report.embedding_model, "dummy::embed");

    let body = asking("qa", "dicl", QUESTIONS[1]);
    let result = stack
        .service
        .infer(&project(), &call(&stack.service, body))
        .await
        .unwrap();
    assert_eq!(result.variant_name, "dicl");
    let record = stored(&stack.records, result.inference_id).await;
    assert_eq!(record.model_calls.len(), 2);
    let embedding = &record.model_calls[0];
    assert_eq!(embedding.model_name, "dummy::embed");
    assert!(embedding.usage.input_tokens > 0);
    assert_eq!(
        record.usage.input_tokens,
        embedding.usage.input_tokens + record.model_calls[1].usage.input_tokens,
        "the embedding's tokens count in the usage"
    );
    assert_eq!(result.usage.input_tokens, record.usage.input_tokens);

    let sent = sent_messages(&record);
    assert_eq!(sent.len(), 6, "system, 2 examples × 2, the request: {sent:?}");
    assert_eq!(sent[0], ("system".to_owned(), DEFAULT_SYSTEM_INSTRUCTIONS.to_owned()));
    // The same input is at distance 0: first. Its turn is the stored input JSON, then its output.
    let same = &seeded[1];
    let same_input: Value = serde_json::from_str(&sent[1].1).unwrap();
    assert_eq!(same_input["messages"][0]["content"][0]["text"], QUESTIONS[1]);
    assert_eq!(same_input["system"], "be brief");
    assert_eq!(sent[1].0, "user");
    assert_eq!(
        sent[2],
        (
            "assistant".to_owned(),
            same.output[0]["text"].as_str().unwrap().to_owned()
        )
    );
    assert_eq!(sent[3].0, "user");
    assert_eq!(sent[4].0, "assistant");
    // Last: the request as StoredInput JSON, its system included.
    assert_eq!(sent[5].0, "user");
    assert_eq!(serde_json::from_str::<Value>(&sent[5].1).unwrap(), same_input);
}

#[tokio::test]
async fn without_near_examples_it_is_a_plain_chat_with_the_instructions_as_system() {
    let stack = stack();
    // Nothing built: no examples at all.
    let result = stack
        .service
        .infer(&project(), &call(&stack.service, asking("qa", "near", "Something new")))
        .await
        .unwrap();
    let record = stored(&stack.records, result.inference_id).await;
    assert_eq!(record.model_calls.len(), 2, "the embedding call still happens");
    let sent = sent_messages(&record);
    assert_eq!(
        sent,
        [
            ("system".to_owned(), DEFAULT_SYSTEM_INSTRUCTIONS.to_owned()),
            ("user".to_owned(), "Something new".to_owned())
        ]
    );
    // Built, but all beyond max_distance: the same.
    seed(&stack, "qa", &QUESTIONS).await;
    stack
        .builder
        .build(&project(), &build_request("qa", "near"))
        .await
        .unwrap();
    let result = stack
        .service
        .infer(
            &project(),
            &call(&stack.service, asking("qa", "near", "Something else again")),
        )
        .await
        .unwrap();
    let sent = sent_messages(&stored(&stack.records, result.inference_id).await);
    assert_eq!(sent.len(), 2, "{sent:?}");
    // The exact input is within it.
    let result = stack
        .service
        .infer(&project(), &call(&stack.service, asking("qa", "near", QUESTIONS[0])))
        .await
        .unwrap();
    let sent = sent_messages(&stored(&stack.records, result.inference_id).await);
    assert_eq!(sent.len(), 4, "one example: {sent:?}");
}

#[tokio::test]
async fn a_streamed_dicl_inference_streams_the_generation_and_counts_the_embedding() {
    let stack = stack();
    seed(&stack, "qa", &QUESTIONS).await;
    stack
        .builder
        .build(&project(), &build_request("qa", "dicl"))
        .await
        .unwrap();
    let mut body = asking("qa", "dicl", QUESTIONS[2]);
    body["stream"] = json!(true);
    let stream = stack
        .service
        .infer_stream(&project(), &call(&stack.service, body))
        .await
        .unwrap();
    let id = stream.inference_id;
    let chunks: Vec<_> = stream.chunks.collect().await;
    let mut text = String::new();
    let mut usage = None;
    for chunk in chunks {
        let chunk = chunk.unwrap();
        assert_eq!(chunk.variant_name, "dicl");
        if let ChunkBody::Chat { content } = &chunk.body {
            for piece in content {
                if let crate::tensorzero::function_calls::ContentChunk::Text { text: t, .. } = piece {
                    text.push_str(t);
                }
            }
        }
        usage = chunk.usage.or(usage);
    }
    assert!(text.starts_with("Dummy reply"), "{text}");
    let record = stored(&stack.records, id).await;
    assert_eq!(record.model_calls.len(), 2);
    assert_eq!(sent_messages(&record).len(), 6);
    let usage = usage.expect("a usage chunk");
    assert_eq!(usage.input_tokens, record.usage.input_tokens);
    assert_eq!(
        record.usage.input_tokens,
        record.model_calls[0].usage.input_tokens + record.model_calls[1].usage.input_tokens
    );
}

#[tokio::test]
async fn json_examples_show_the_raw_output() {
    let stack = stack();
    let seeded = seed(&stack, "extract", &QUESTIONS[..1]).await;
    stack
        .builder
        .build(&project(), &build_request("extract", "dicl"))
        .await
        .unwrap();
    let result = stack
        .service
        .infer(
            &project(),
            &call(&stack.service, asking("extract", "dicl", QUESTIONS[0])),
        )
        .await
        .unwrap();
    let sent = sent_messages(&stored(&stack.records, result.inference_id).await);
    assert_eq!(sent.len(), 4, "{sent:?}");
    assert_eq!(sent[2].1, seeded[0].output["raw"].as_str().unwrap());
}

#[tokio::test]
async fn inference_level_extra_body_and_batch_inference_are_refused() {
    let stack = stack();
    let mut body = asking("qa", "dicl", "hi");
    body["extra_body"] = json!([{"variant_name": "dicl", "pointer": "/x", "value": 1}]);
    let error = stack
        .service
        .infer(&project(), &call(&stack.service, body))
        .await
        .unwrap_err();
    assert!(error.to_string().contains("extra_body"), "{error}");
    let error = stack
        .service
        .checks()
        .batch_variant("qa", Some("dicl"), Uuid::now_v7())
        .unwrap_err();
    assert!(error.to_string().contains("batch inference"), "{error}");
    assert!(stack
        .service
        .checks()
        .batch_variant("qa", Some("base"), Uuid::now_v7())
        .is_ok());
}

#[tokio::test]
async fn a_build_refuses_what_tensorzero_refuses() {
    let stack = stack();
    let refused = |result: Result<DiclBuildReport, DiclBuildError>| result.unwrap_err();
    let b = &stack.builder;
    assert!(matches!(
        refused(b.build(&project(), &build_request("nope", "dicl")).await),
        DiclBuildError::NotFound(_)
    ));
    assert!(matches!(
        refused(b.build(&project(), &build_request("qa", "nope")).await),
        DiclBuildError::NotFound(_)
    ));
    let not_dicl = refused(b.build(&project(), &build_request("qa", "base")).await);
    assert!(
        not_dicl
            .to_string()
            .contains("experimental_dynamic_in_context_learning"),
        "{not_dicl}"
    );
    let tools = refused(b.build(&project(), &build_request("with_tools", "dicl")).await);
    assert!(tools.to_string().contains("has tools"), "{tools}");
    let nothing = refused(b.build(&project(), &build_request("qa", "dicl")).await);
    assert!(nothing.to_string().contains("no stored inference"), "{nothing}");

    // A tool call in an example's input.
    let body = json!({
        "function_name": "qa", "variant_name": "base",
        "input": {"messages": [
            {"role": "user", "content": "hi"},
            {"role": "assistant", "content": [{"type": "tool_call", "id": "1", "name": "lookup", "arguments": "{}"}]},
            {"role": "user", "content": [{"type": "tool_result", "id": "1", "name": "lookup", "result": "x"}]}
        ]}
    });
    let result = stack
        .service
        .infer(&project(), &call(&stack.service, body))
        .await
        .unwrap();
    stored(&stack.records, result.inference_id).await;
    let tool = refused(b.build(&project(), &build_request("qa", "dicl")).await);
    assert!(tool.to_string().contains("tool calls or tool results"), "{tool}");
}

#[tokio::test]
async fn examples_exist_until_appended_or_replaced_and_demonstrations_replace_outputs() {
    let stack = stack();
    let seeded = seed(&stack, "qa", &QUESTIONS[..2]).await;
    let b = &stack.builder;
    b.build(&project(), &build_request("qa", "dicl")).await.unwrap();
    let again = b.build(&project(), &build_request("qa", "dicl")).await.unwrap_err();
    assert!(matches!(again, DiclBuildError::Exists { .. }), "{again}");
    let mut append = build_request("qa", "dicl");
    append.append = true;
    let appended = b.build(&project(), &append).await.unwrap();
    assert_eq!((appended.examples, appended.added), (2, 0));

    // Demonstrations: only the inference that has one makes an example, with its value.
    let mut demo = build_request("qa", "dicl");
    demo.replace = true;
    demo.output_source = OutputSource::Demonstration;
    let none = b.build(&project(), &demo).await.unwrap_err();
    assert!(none.to_string().contains("a demonstration"), "{none}");
    let feedback_id = Uuid::now_v7();
    stack
        .feedback
        .put(&FeedbackRecord {
            project: project(),
            feedback_id,
            target_type: FeedbackTarget::Inference,
            target_id: seeded[0].inference_id,
            metric_name: "demonstration".to_owned(),
            kind: FeedbackKind::Demonstration,
            value: json!([{"type": "text", "text": "Paris."}]),
            tags: BTreeMap::new(),
            created_at: "2026-11-29T00:00:00Z".to_owned(),
            timestamp: 0,
        })
        .await
        .unwrap();
    let built = b.build(&project(), &demo).await.unwrap();
    assert_eq!((built.examples, built.skipped_without_output), (1, 1));
    let result = stack
        .service
        .infer(&project(), &call(&stack.service, asking("qa", "dicl", QUESTIONS[0])))
        .await
        .unwrap();
    let sent = sent_messages(&stored(&stack.records, result.inference_id).await);
    assert_eq!(sent[2], ("assistant".to_owned(), "Paris.".to_owned()));
    // Another project has none of them.
    let other = b
        .build(&ProjectId::new("q"), &build_request("qa", "dicl"))
        .await
        .unwrap_err();
    assert!(other.to_string().contains("no stored inference"), "{other}");
}

#[tokio::test]
async fn the_variant_timeout_bounds_the_embedding_and_the_next_variant_answers() {
    let stack = stack();
    let mut body = asking("patient", "slow", "hi");
    let pinned = stack
        .service
        .infer(&project(), &call(&stack.service, body.clone()))
        .await
        .unwrap_err();
    assert_eq!(
        pinned.uniform_failure(),
        Some(crate::tensorzero::function_calls::FailureKind::Timeout),
        "{pinned}"
    );
    body["variant_name"] = Value::Null;
    let fell_back = stack
        .service
        .infer(&project(), &call(&stack.service, body))
        .await
        .unwrap();
    assert_eq!(fell_back.variant_name, "plain");
}
