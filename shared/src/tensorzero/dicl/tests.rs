use super::examples::CurrentSet;
use super::index::cosine_distance;
use super::prompt::{with_examples, without_examples};
use super::stored_input::{has_tool_blocks, stored_input_json, StoredInputError};
use super::*;
use crate::adapters::embedded::FileBlobStore;
use crate::config::functions::FunctionKind;
use crate::ports::inference_records::FunctionType;
use crate::ports::{BlobStore, ProjectId};
use crate::tensorzero::function_calls::input::{FunctionInput, InputBlock, InputRole};
use serde_json::{json, Value};
use std::sync::Arc;
use std::time::Duration;
use uuid::Uuid;

fn example(id: u128, input: &str, output: Value, embedding: Vec<f32>) -> DiclExample {
    DiclExample {
        inference_id: Uuid::from_u128(id),
        input: input.to_owned(),
        output,
        embedding,
    }
}

fn chat_output(text: &str) -> Value {
    json!([{"type": "text", "text": text}])
}

fn ids(found: &[Neighbour<'_>]) -> Vec<u128> {
    found.iter().map(|n| n.example.inference_id.as_u128()).collect()
}

#[test]
fn cosine_distance_is_zero_for_one_direction_and_two_for_the_opposite() {
    assert!(cosine_distance(&[1.0, 0.0], &[3.0, 0.0]).unwrap().abs() < 1e-6);
    assert!((cosine_distance(&[1.0, 0.0], &[0.0, 2.0]).unwrap() - 1.0).abs() < 1e-6);
    assert!((cosine_distance(&[1.0, 1.0], &[-1.0, -1.0]).unwrap() - 2.0).abs() < 1e-6);
    assert_eq!(cosine_distance(&[0.0, 0.0], &[1.0, 0.0]), None);
}

#[test]
fn nearest_orders_by_cosine_distance_and_keeps_k() {
    let index = ExampleIndex::new(vec![
        example(1, "a", chat_output("a"), vec![0.0, 1.0]),
        example(2, "b", chat_output("b"), vec![1.0, 0.1]),
        example(3, "c", chat_output("c"), vec![-1.0, 0.0]),
        example(4, "d", chat_output("d"), vec![10.0, 0.0]),
    ]);
    assert_eq!(index.len(), 4);
    // Length does not matter, direction does: 4 is exactly along the query.
    assert_eq!(ids(&index.nearest(&[1.0, 0.0], 2, None)), vec![4, 2]);
    assert_eq!(ids(&index.nearest(&[1.0, 0.0], 10, None)), vec![4, 2, 1, 3]);
    let found = index.nearest(&[1.0, 0.0], 1, None);
    assert!(found[0].distance.abs() < 1e-6);
    assert!(index.nearest(&[1.0, 0.0], 0, None).is_empty());
}

#[test]
fn max_distance_filters_after_the_k_nearest() {
    let index = ExampleIndex::new(vec![
        example(1, "a", chat_output("a"), vec![1.0, 0.0]),
        example(2, "b", chat_output("b"), vec![1.0, 1.0]),
        example(3, "c", chat_output("c"), vec![0.0, 1.0]),
    ]);
    // Distances 0, 0.29, 1: a cut-off at 0.5 keeps two, at 0 keeps the exact match only.
    assert_eq!(ids(&index.nearest(&[1.0, 0.0], 3, Some(0.5))), vec![1, 2]);
    assert_eq!(ids(&index.nearest(&[1.0, 0.0], 3, Some(0.0))), vec![1]);
    // LIMIT k first: the third is never considered, whatever the cut-off.
    assert_eq!(ids(&index.nearest(&[0.0, 1.0], 1, Some(2.0))), vec![3]);
    assert!(index.nearest(&[-1.0, -0.01], 3, Some(0.1)).is_empty());
}

#[test]
fn queries_and_embeddings_of_another_length_or_no_direction_find_nothing() {
    let index = ExampleIndex::new(vec![
        example(1, "a", chat_output("a"), vec![1.0, 0.0]),
        example(2, "b", chat_output("b"), vec![1.0, 0.0, 0.0]),
        example(3, "c", chat_output("c"), vec![0.0, 0.0]),
    ]);
    assert_eq!(ids(&index.nearest(&[1.0, 0.0], 5, None)), vec![1]);
    assert!(index.nearest(&[1.0, 0.0, 0.0], 5, None).is_empty());
    assert!(index.nearest(&[0.0, 0.0], 5, None).is_empty());
    assert!(ExampleIndex::new(Vec::new()).nearest(&[1.0], 3, None).is_empty());
}

fn input(value: Value) -> FunctionInput {
    serde_json::from_value(value).unwrap()
}

#[test]
fn stored_input_is_the_untemplated_input_as_json() {
    let text = stored_input_json(&input(json!({
        "system": {"tone": "dry"},
        "messages": [
            {"role": "user", "content": "What is 2+2?"},
            {"role": "assistant", "content": [{"type": "raw_text", "value": "as is"}]},
            {"role": "user", "content": {"topic": "x"}},
            {"role": "user", "content": [{"type": "template", "name": "greet", "arguments": {"who": "Bo"}}]}
        ]
    })))
    .unwrap();
    let stored: Value = serde_json::from_str(&text).unwrap();
    assert_eq!(stored["system"], json!({"tone": "dry"}));
    assert_eq!(
        stored["messages"][0],
        json!({"role": "user", "content": [{"type": "text", "text": "What is 2+2?"}]})
    );
    assert_eq!(
        stored["messages"][1]["content"][0],
        json!({"type": "raw_text", "value": "as is"})
    );
    // Template arguments: a text block holding the stringified template block.
    let legacy: Value = serde_json::from_str(stored["messages"][2]["content"][0]["text"].as_str().unwrap()).unwrap();
    assert_eq!(
        legacy,
        json!({"type": "template", "name": "user", "arguments": {"topic": "x"}})
    );
    let named: Value = serde_json::from_str(stored["messages"][3]["content"][0]["text"].as_str().unwrap()).unwrap();
    assert_eq!(
        named,
        json!({"type": "template", "name": "greet", "arguments": {"who": "Bo"}})
    );
    // No system: no key; keys in TensorZero's order.
    let plain = stored_input_json(&input(json!({"messages": [{"role": "user", "content": "hi"}]}))).unwrap();
    assert_eq!(
        plain,
        r#"{"messages":[{"role":"user","content":[{"type":"text","text":"hi"}]}]}"#
    );
}

#[test]
fn files_have_no_stored_text_and_tool_blocks_are_seen() {
    let with_file = input(json!({"messages": [{"role": "user", "content": [
        {"type": "file", "url": "https://e.x/a.png"}
    ]}]}));
    assert_eq!(
        stored_input_json(&with_file),
        Err(StoredInputError::File("input.messages[0].content[0]".to_owned()))
    );
    let with_tool = input(json!({"messages": [{"role": "user", "content": [
        {"type": "tool_result", "id": "1", "name": "f", "result": "ok"}
    ]}]}));
    assert!(has_tool_blocks(&with_tool));
    assert!(!has_tool_blocks(&input(
        json!({"messages": [{"role": "user", "content": "hi"}]})
    )));
}

fn texts(blocks: &[InputBlock]) -> Vec<String> {
    blocks
        .iter()
        .map(|block| match block {
            InputBlock::RawText(raw) => raw.value.clone(),
            other => format!("{other:?}"),
        })
        .collect()
}

#[test]
fn the_prompt_has_each_example_as_a_user_and_assistant_turn_then_the_request() {
    let examples = [
        example(1, r#"{"messages":"one"}"#, chat_output("first answer"), vec![1.0, 0.0]),
        example(
            2,
            r#"{"messages":"two"}"#,
            json!([{"type": "thought", "text": "hm"}, {"type": "text", "text": "second"}]),
            vec![0.0, 1.0],
        ),
    ];
    let index = ExampleIndex::new(examples.to_vec());
    let neighbours = index.nearest(&[1.0, 0.1], 2, None);
    let prompt = with_examples("Learn.", FunctionKind::Chat, &neighbours, r#"{"messages":"now"}"#).unwrap();
    assert_eq!(prompt.system, "Learn.");
    let roles: Vec<InputRole> = prompt.messages.iter().map(|m| m.role).collect();
    assert_eq!(
        roles,
        [
            InputRole::User,
            InputRole::Assistant,
            InputRole::User,
            InputRole::Assistant,
            InputRole::User
        ]
    );
    assert_eq!(texts(&prompt.messages[0].content), [r#"{"messages":"one"}"#]);
    assert_eq!(texts(&prompt.messages[1].content), ["first answer"]);
    assert!(matches!(&prompt.messages[3].content[0], InputBlock::Thought(t) if t.text.as_deref() == Some("hm")));
    assert_eq!(texts(&prompt.messages[4].content), [r#"{"messages":"now"}"#]);

    // json: the assistant turn is the raw text.
    let json_index = ExampleIndex::new(vec![example(
        3,
        "in",
        json!({"raw": "{\"a\":1}", "parsed": {"a": 1}}),
        vec![1.0],
    )]);
    let found = json_index.nearest(&[1.0], 1, None);
    let prompt = with_examples("Learn.", FunctionKind::Json, &found, "req").unwrap();
    assert_eq!(texts(&prompt.messages[1].content), ["{\"a\":1}"]);
    // An example without output cannot be shown.
    let empty = ExampleIndex::new(vec![example(4, "in", json!({"raw": "", "parsed": null}), vec![1.0])]);
    let found = empty.nearest(&[1.0], 1, None);
    assert!(with_examples("Learn.", FunctionKind::Json, &found, "req").is_err());
}

#[test]
fn without_examples_the_request_system_is_dropped_and_templates_stringified() {
    let request = input(json!({
        "system": "be brief",
        "messages": [
            {"role": "user", "content": {"topic": "x"}},
            {"role": "assistant", "content": "ok"},
            {"role": "user", "content": [{"type": "thought", "text": "t"}]}
        ]
    }));
    let prompt = without_examples("Learn.", &request);
    assert_eq!(prompt.system, "Learn.");
    assert_eq!(prompt.messages.len(), 3);
    let stringified: Value = serde_json::from_str(&texts(&prompt.messages[0].content)[0]).unwrap();
    assert_eq!(
        stringified,
        json!({"type": "template", "name": "user", "arguments": {"topic": "x"}})
    );
    assert_eq!(texts(&prompt.messages[1].content), ["ok"]);
    assert!(matches!(prompt.messages[2].content[0], InputBlock::Thought(_)));
}

fn blobs() -> Arc<dyn BlobStore> {
    Arc::new(FileBlobStore::open(tempfile::tempdir().unwrap().keep()).unwrap())
}

fn set(version: u128, examples: Vec<DiclExample>) -> ExampleSet {
    ExampleSet {
        version: Uuid::from_u128(version),
        function_name: "f/with slash".to_owned(),
        variant_name: "dicl".to_owned(),
        function_type: FunctionType::Chat,
        embedding_model: "dummy::e".to_owned(),
        output_source: OutputSource::Inference,
        built_at: "2026-11-29T00:00:00Z".to_owned(),
        examples,
    }
}

#[tokio::test]
async fn a_published_set_round_trips_and_replaces_the_previous_one() {
    let blobs = blobs();
    let store = ExampleStore::new(Arc::clone(&blobs));
    let project = ProjectId::new("p");
    assert_eq!(store.current(&project, "f/with slash", "dicl").await.unwrap(), None);
    let first = set(1, vec![example(1, "a", chat_output("a"), vec![0.25, -1.5, 3.0e-8])]);
    store.publish(&project, &first).await.unwrap();
    assert_eq!(
        store.current(&project, "f/with slash", "dicl").await.unwrap(),
        Some(CurrentSet {
            version: first.version,
            examples: 1
        })
    );
    assert_eq!(
        store
            .load(&project, "f/with slash", "dicl", first.version)
            .await
            .unwrap(),
        first
    );
    let second = set(2, Vec::new());
    store.publish(&project, &second).await.unwrap();
    assert!(store
        .load(&project, "f/with slash", "dicl", first.version)
        .await
        .is_err());
    // Another project sees nothing.
    assert_eq!(
        store
            .current(&ProjectId::new("q"), "f/with slash", "dicl")
            .await
            .unwrap(),
        None
    );
}

#[tokio::test]
async fn loaded_sets_are_refreshed_only_once_the_interval_passed_and_the_version_changed() {
    let store = ExampleStore::new(blobs());
    let project = ProjectId::new("p");
    let clock: Arc<dyn crate::ports::Clock> = Arc::new(crate::ports::SystemClock);
    let slow = LoadedSets::new(store.clone(), Arc::clone(&clock)).with_refresh(Duration::from_secs(3600));
    let eager = LoadedSets::new(store.clone(), clock).with_refresh(Duration::ZERO);
    assert!(slow
        .get(&project, "f/with slash", "dicl")
        .await
        .unwrap()
        .index
        .is_empty());
    store
        .publish(&project, &set(1, vec![example(1, "a", chat_output("a"), vec![1.0])]))
        .await
        .unwrap();
    // Within the interval the instance keeps what it had; a build on it drops its copy.
    assert!(slow
        .get(&project, "f/with slash", "dicl")
        .await
        .unwrap()
        .index
        .is_empty());
    let eager_first = eager.get(&project, "f/with slash", "dicl").await.unwrap();
    assert_eq!(eager_first.index.len(), 1);
    // Same version: the copy in memory is kept, not read again.
    let eager_again = eager.get(&project, "f/with slash", "dicl").await.unwrap();
    assert!(Arc::ptr_eq(&eager_first, &eager_again));
    slow.forget(&project, "f/with slash", "dicl");
    let reloaded = slow.get(&project, "f/with slash", "dicl").await.unwrap();
    assert_eq!(reloaded.index.len(), 1);
    assert_eq!(reloaded.embedding_model.as_deref(), Some("dummy::e"));
}
