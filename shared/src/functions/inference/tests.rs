use super::*;
use crate::config::{Config, LoadedConfig};
use crate::functions::inference::request::InferenceRequest as Request;
use crate::inference::InferenceService;
use crate::ports::{SystemClock, UuidV7Ids};
use crate::providers::router::ModelRouter;
use futures::StreamExt;
use serde_json::{json, Value};
use std::collections::BTreeSet;
use std::sync::Arc;
use uuid::Uuid;

const CONFIG: &str = r#"
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

fn service() -> FunctionService {
    let config = Config::from_toml(CONFIG).unwrap();
    let loaded = LoadedConfig::without_files(config).unwrap();
    let router = ModelRouter::from_config(&loaded.config).unwrap();
    let inference = Arc::new(InferenceService::new(
        router,
        Arc::new(SystemClock),
        Arc::new(UuidV7Ids),
    ));
    FunctionService::new(loaded.functions, inference, Arc::new(SystemClock), Arc::new(UuidV7Ids))
}

fn call(service: &FunctionService, body: Value) -> InferenceCall {
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
        let first = service.infer(&call(&service, body.clone())).await.unwrap();
        let again = service.infer(&call(&service, body)).await.unwrap();
        assert_eq!(first.variant_name, again.variant_name);
        assert_eq!(first.episode_id, episode);
        seen.insert(first.variant_name);
    }
    assert_eq!(seen.len(), 2, "{seen:?}");
}

#[tokio::test]
async fn a_failed_candidate_falls_back_and_a_pin_does_not() {
    let service = service();
    let answer = service.infer(&call(&service, hello("falls_back"))).await.unwrap();
    assert_eq!(answer.variant_name, "working");
    let mut pinned = hello("falls_back");
    pinned["variant_name"] = json!("broken");
    let error = service.infer(&call(&service, pinned)).await.unwrap_err();
    assert_eq!(status(error), Outcome::Failed(Some(FailureKind::Provider)));
    let mut unknown = hello("falls_back");
    unknown["variant_name"] = json!("nope");
    assert_eq!(
        status(service.infer(&call(&service, unknown)).await.unwrap_err()),
        Outcome::NotFound
    );
}

#[tokio::test]
async fn failures_map_to_tensorzero_statuses() {
    let service = service();
    let all_bad = service.infer(&call(&service, hello("all_bad"))).await.unwrap_err();
    assert!(matches!(all_bad, FunctionError::AllVariantsFailed(_)));
    assert_eq!(status(all_bad), Outcome::Failed(Some(FailureKind::Provider)));
    let slow = service.infer(&call(&service, hello("too_slow"))).await.unwrap_err();
    assert_eq!(status(slow), Outcome::Failed(Some(FailureKind::Timeout)));
    let mut streamed = hello("too_slow");
    streamed["stream"] = json!(true);
    let slow_stream = service.infer_stream(&call(&service, streamed)).await.err().unwrap();
    assert_eq!(status(slow_stream), Outcome::Failed(Some(FailureKind::Timeout)));
    let unknown = service.infer(&call(&service, hello("nope"))).await.unwrap_err();
    assert_eq!(status(unknown), Outcome::NotFound);
    let model = json!({"model_name": "no-such-model", "input": {"messages": []}});
    let missing = service.infer(&call(&service, model)).await.unwrap_err();
    assert_eq!(status(missing), Outcome::NotFound);
}

#[tokio::test]
async fn json_tool_mode_answers_through_the_respond_tool() {
    let service = service();
    let mut body = hello("extract");
    body["output_schema"] = json!({"type": "object", "properties": {"name": {"type": "string"}}, "required": ["name"]});
    let answer = service.infer(&call(&service, body)).await.unwrap();
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
    let stream = service.infer_stream(&call(&service, body)).await.unwrap();
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
