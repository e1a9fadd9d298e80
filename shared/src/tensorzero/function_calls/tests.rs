use super::*;
use crate::app::LoadedConfig;
use crate::config::Config;
use crate::ports::ProjectId;
use crate::tensorzero::function_calls::request::InferenceRequest as Request;
use futures::StreamExt;
use serde_json::{json, Value};
use std::collections::BTreeSet;
use std::sync::Arc;
use uuid::Uuid;

pub(crate) const CONFIG: &str = r#"
[gateway.retries]
max_retries = 0

[models.good]
routing = ["d"]
[models.good.providers.d]
type = "dummy"

[models.bad]
routing = ["d"]
[models.bad.providers.d]
type = "dummy"
fail_with_status = 500

[models.slow]
routing = ["d"]
[models.slow.providers.d]
type = "dummy"
latency_ms = 400

[functions.weighted]
type = "chat"
[functions.weighted.variants.a]
type = "chat_completion"
model = "good"
weight = 0.5
[functions.weighted.variants.b]
type = "chat_completion"
model = "dummy::b"
weight = 0.5

[functions.falls_back]
type = "chat"
[functions.falls_back.experimentation]
type = "static"
candidate_variants = ["broken"]
fallback_variants = ["working"]
[functions.falls_back.variants.broken]
type = "chat_completion"
model = "bad"
retries = { num_retries = 1, max_delay_s = 0.01 }
[functions.falls_back.variants.working]
type = "chat_completion"
model = "good"

[functions.all_bad]
type = "chat"
[functions.all_bad.variants.x]
type = "chat_completion"
model = "bad"

[functions.too_slow]
type = "chat"
[functions.too_slow.variants.slow]
type = "chat_completion"
model = "slow"
timeouts = { non_streaming = { total_ms = 50 }, streaming = { ttft_ms = 50 } }

[functions.extract]
type = "json"
[functions.extract.variants.tool]
type = "chat_completion"
model = "good"
json_mode = "tool"
"#;

fn service() -> Arc<FunctionService> {
    service_with_records().0
}

fn service_with_records() -> (Arc<FunctionService>, Arc<dyn crate::ports::InferenceStore>) {
    service_for(CONFIG)
}

/// The function layer as the app wires it, over embedded adapters, for `config`; and its records.
pub(crate) fn service_for(config: &str) -> (Arc<FunctionService>, Arc<dyn crate::ports::InferenceStore>) {
    use crate::adapters::embedded::{FileBlobStore, MemoryQueue, SqliteStateStore};
    use crate::app::{function_service, inference_service, Adapters};
    let loaded = LoadedConfig::without_files(Config::from_toml(config).unwrap()).unwrap();
    let adapters = Adapters::new(
        Arc::new(SqliteStateStore::in_memory().unwrap()),
        Arc::new(FileBlobStore::open(tempfile::tempdir().unwrap().keep()).unwrap()),
        Arc::new(MemoryQueue::new()),
    );
    let inference = inference_service(&loaded.config, &adapters).unwrap();
    let records = adapters.inference_records();
    (
        function_service(&loaded, &adapters, inference, Arc::clone(&records)),
        records,
    )
}

pub(crate) fn call(service: &FunctionService, body: Value) -> InferenceCall {
    let request: Request = serde_json::from_value(body).unwrap();
    request.into_call(service.now_ms(), Uuid::now_v7).unwrap()
}

fn hello(function: &str) -> Value {
    json!({"function_name": function, "input": {"messages": [{"role": "user", "content": "hello"}]}})
}

/// What the error says about the request: 404 lookups, or how every variant failed.
#[derive(Debug, PartialEq)]
enum Outcome {
    NotFound,
    Failed(Option<FailureKind>),
    Other,
}

fn status(error: FunctionError) -> Outcome {
    match error {
        FunctionError::UnknownFunction(_) | FunctionError::UnknownVariant { .. } | FunctionError::UnknownModel(_) => {
            Outcome::NotFound
        }
        FunctionError::AllVariantsFailed(_) => Outcome::Failed(error.uniform_failure()),
        _ => Outcome::Other,
    }
}

#[tokio::test]
async fn an_episode_keeps_its_variant_and_episodes_spread_over_both() {
    let service = service();
    let mut seen = BTreeSet::new();
    for _ in 0..24 {
        let episode = Uuid::now_v7();
        let mut body = hello("weighted");
        body["episode_id"] = json!(episode.to_string());
        let first = service
            .infer(&ProjectId::new("p"), &call(&service, body.clone()))
            .await
            .unwrap();
        let again = service
            .infer(&ProjectId::new("p"), &call(&service, body))
            .await
            .unwrap();
        assert_eq!(first.variant_name, again.variant_name);
        assert_eq!(first.episode_id, episode);
        seen.insert(first.variant_name);
    }
    assert_eq!(seen.len(), 2, "{seen:?}");
}

#[tokio::test]
async fn a_failed_candidate_falls_back_and_a_pin_does_not() {
    let service = service();
    let answer = service
        .infer(&ProjectId::new("p"), &call(&service, hello("falls_back")))
        .await
        .unwrap();
    assert_eq!(answer.variant_name, "working");
    let mut pinned = hello("falls_back");
    pinned["variant_name"] = json!("broken");
    let error = service
        .infer(&ProjectId::new("p"), &call(&service, pinned))
        .await
        .unwrap_err();
    assert_eq!(status(error), Outcome::Failed(Some(FailureKind::Provider)));
    let mut unknown = hello("falls_back");
    unknown["variant_name"] = json!("nope");
    assert_eq!(
        status(
            service
                .infer(&ProjectId::new("p"), &call(&service, unknown))
                .await
                .unwrap_err()
        ),
        Outcome::NotFound
    );
}

#[tokio::test]
async fn failures_map_to_tensorzero_statuses() {
    let service = service();
    let all_bad = service
        .infer(&ProjectId::new("p"), &call(&service, hello("all_bad")))
        .await
        .unwrap_err();
    assert!(matches!(all_bad, FunctionError::AllVariantsFailed(_)));
    assert_eq!(status(all_bad), Outcome::Failed(Some(FailureKind::Provider)));
    let slow = service
        .infer(&ProjectId::new("p"), &call(&service, hello("too_slow")))
        .await
        .unwrap_err();
    assert_eq!(status(slow), Outcome::Failed(Some(FailureKind::Timeout)));
    let mut streamed = hello("too_slow");
    streamed["stream"] = json!(true);
    let slow_stream = service
        .infer_stream(&ProjectId::new("p"), &call(&service, streamed))
        .await
        .err()
        .unwrap();
    assert_eq!(status(slow_stream), Outcome::Failed(Some(FailureKind::Timeout)));
    let unknown = service
        .infer(&ProjectId::new("p"), &call(&service, hello("nope")))
        .await
        .unwrap_err();
    assert_eq!(status(unknown), Outcome::NotFound);
    let model = json!({"model_name": "no-such-model", "input": {"messages": []}});
    let missing = service
        .infer(&ProjectId::new("p"), &call(&service, model))
        .await
        .unwrap_err();
    assert_eq!(status(missing), Outcome::NotFound);
}

#[tokio::test]
async fn json_tool_mode_answers_through_the_respond_tool() {
    let service = service();
    let mut body = hello("extract");
    body["output_schema"] = json!({"type": "object", "properties": {"name": {"type": "string"}}, "required": ["name"]});
    let answer = service
        .infer(&ProjectId::new("p"), &call(&service, body))
        .await
        .unwrap();
    let FunctionOutput::Json(output) = answer.output else {
        panic!("not json")
    };
    assert!(output.parsed.unwrap()["name"].is_string(), "{:?}", output.raw);
}

#[tokio::test]
async fn a_stream_falls_back_before_it_starts_and_ends_with_usage() {
    let service = service();
    let mut body = hello("falls_back");
    body["stream"] = json!(true);
    let stream = service
        .infer_stream(&ProjectId::new("p"), &call(&service, body))
        .await
        .unwrap();
    assert_eq!(stream.variant_name, "working");
    let chunks: Vec<_> = stream.chunks.collect().await;
    assert!(chunks.iter().all(Result::is_ok));
    let last = chunks.last().unwrap().as_ref().unwrap();
    assert!(last.usage.is_some());
    let text: String = chunks
        .iter()
        .filter_map(|c| match &c.as_ref().unwrap().body {
            ChunkBody::Chat { content } => Some(content.clone()),
            ChunkBody::Json { .. } => None,
        })
        .flatten()
        .filter_map(|piece| match piece {
            ContentChunk::Text { text, .. } => Some(text),
            _ => None,
        })
        .collect();
    assert!(text.contains("hello"), "{text}");
}

pub(crate) async fn stored(
    records: &Arc<dyn crate::ports::InferenceStore>,
    id: Uuid,
) -> crate::ports::inference_records::InferenceRecord {
    for _ in 0..200 {
        if let Some(record) = records.get(&ProjectId::new("p"), id).await.unwrap() {
            return record;
        }
        tokio::time::sleep(std::time::Duration::from_millis(10)).await;
    }
    panic!("inference {id} was never stored")
}

#[tokio::test]
async fn the_second_identical_call_is_a_cache_hit_with_zero_usage_and_both_are_recorded() {
    let (service, records) = service_with_records();
    let mut body = hello("falls_back");
    body["variant_name"] = json!("working");
    body["cache_options"] = json!({"enabled": "on"});
    let first = service
        .infer(&ProjectId::new("p"), &call(&service, body.clone()))
        .await
        .unwrap();
    assert!(!first.model_calls[0].cached);
    assert!(first.usage.input_tokens > 0);
    let mut second = None;
    for _ in 0..200 {
        let answer = service
            .infer(&ProjectId::new("p"), &call(&service, body.clone()))
            .await
            .unwrap();
        if answer.model_calls[0].cached {
            second = Some(answer);
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(10)).await;
    }
    let second = second.expect("the cache entry was never written");
    assert_eq!(second.usage, crate::model::ModelUsage::default());
    assert_eq!(second.output, first.output);
    let record = stored(&records, first.inference_id).await;
    assert_eq!(record.variant_name, "working");
    assert_eq!(record.model_calls[0].provider_name, "d");
    assert!(record.model_calls[0].raw_request.contains("hello"));
    assert!(stored(&records, second.inference_id).await.cached);
    // Another project neither sees the records nor hits the cache.
    assert!(records
        .get(&ProjectId::new("other"), first.inference_id)
        .await
        .unwrap()
        .is_none());
    let elsewhere = service
        .infer(&ProjectId::new("other"), &call(&service, body))
        .await
        .unwrap();
    assert!(!elsewhere.model_calls[0].cached);
}

#[tokio::test]
async fn a_dryrun_stores_nothing_and_a_stream_is_recorded_when_it_ends() {
    let (service, records) = service_with_records();
    let mut dry = hello("falls_back");
    dry["dryrun"] = json!(true);
    let answer = service.infer(&ProjectId::new("p"), &call(&service, dry)).await.unwrap();
    let mut streamed = hello("falls_back");
    streamed["stream"] = json!(true);
    let stream = service
        .infer_stream(&ProjectId::new("p"), &call(&service, streamed))
        .await
        .unwrap();
    let id = stream.inference_id;
    let _: Vec<_> = stream.chunks.collect().await;
    let record = stored(&records, id).await;
    assert!(record.ttft_ms.is_some());
    assert!(record.output[0]["text"].as_str().unwrap().contains("hello"));
    assert!(records
        .get(&ProjectId::new("p"), answer.inference_id)
        .await
        .unwrap()
        .is_none());
}

/// What `/batch_inference` polls answer, rebuilt from the stored record, is exactly the reply
/// `/inference` gave (without raw provider data), for chat and json functions.
#[tokio::test]
async fn a_reply_rebuilt_from_its_record_is_the_reply_inference_gave() {
    let (service, records) = service_with_records();
    for (function, variant) in [("weighted", "a"), ("extract", "tool")] {
        let mut body = hello(function);
        body["variant_name"] = json!(variant);
        body["tags"] = json!({"k": "v"});
        let result = service
            .infer(&ProjectId::new("p"), &call(&service, body))
            .await
            .unwrap();
        let given = InferenceReply::new(&result, Includes::default());
        let record = stored(&records, result.inference_id).await;
        let rebuilt = InferenceReply::from_record(&record).unwrap();
        assert_eq!(rebuilt, given, "{function}");
        assert_eq!(
            serde_json::to_value(&rebuilt).unwrap(),
            serde_json::to_value(&given).unwrap(),
            "{function}"
        );
        assert_eq!(rebuilt.content.is_some(), function == "weighted");
        assert_eq!(rebuilt.output.is_some(), function == "extract");
    }
}

#[test]
fn from_record_reads_usage_and_finish_reason_and_refuses_a_record_that_does_not_fit() {
    use crate::ports::inference_records::{FunctionType, InferenceRecord, TokenUsage};
    let record = InferenceRecord {
        project: ProjectId::new("p"),
        inference_id: Uuid::now_v7(),
        episode_id: Uuid::now_v7(),
        function_name: "f".into(),
        variant_name: "v".into(),
        function_type: FunctionType::Chat,
        input: json!({}),
        output: json!([{"type": "text", "text": "hi"}]),
        tags: Default::default(),
        tool_params: None,
        output_schema: None,
        inference_params: json!({}),
        processing_time_ms: 1,
        ttft_ms: None,
        usage: TokenUsage {
            input_tokens: 2,
            output_tokens: 1,
        },
        finish_reason: Some("length".into()),
        cached: false,
        created_at: "2026-01-01T00:00:00Z".into(),
        timestamp: 0,
        model_calls: vec![],
    };
    let reply = InferenceReply::from_record(&record).unwrap();
    assert_eq!(reply.finish_reason, Some(crate::model::FinishReason::Length));
    assert_eq!((reply.usage.input_tokens, reply.usage.output_tokens), (2, 1));
    assert!(reply.raw_response.is_none() && reply.original_response.is_none());

    let as_json = InferenceRecord {
        function_type: FunctionType::Json,
        ..record.clone()
    };
    assert!(
        InferenceReply::from_record(&as_json).is_err(),
        "chat blocks are no json output"
    );
    let odd_finish = InferenceRecord {
        finish_reason: Some("sideways".into()),
        ..record
    };
    assert!(InferenceReply::from_record(&odd_finish).is_err());
}
