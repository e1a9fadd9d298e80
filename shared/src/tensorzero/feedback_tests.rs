use super::*;
use crate::adapters::embedded::{FileBlobStore, SqliteStateStore};
use crate::adapters::records::{StateFeedbackStore, StateInferenceStore};
use crate::config::MetricOptimize;
use crate::ports::inference_records::TokenUsage;
use crate::ports::ProjectId;
use crate::ports::{SystemClock, UuidV7Ids};
use serde_json::json;

struct Fixture {
    service: FeedbackService,
    inferences: Arc<StateInferenceStore>,
    feedback: Arc<StateFeedbackStore>,
    _dir: tempfile::TempDir,
}

fn metric(kind: MetricKind, level: MetricLevel) -> MetricConfig {
    MetricConfig {
        kind,
        level,
        optimize: MetricOptimize::Max,
    }
}

fn fixture(target_wait: Duration) -> Fixture {
    let dir = tempfile::tempdir().unwrap();
    let state: Arc<dyn crate::ports::StateStore> = Arc::new(SqliteStateStore::in_memory().unwrap());
    let blobs: Arc<dyn crate::ports::BlobStore> = Arc::new(FileBlobStore::open(dir.path()).unwrap());
    let retention = crate::adapters::records::RecordRetention::new(0, Arc::new(crate::ports::SystemClock));
    let inferences = Arc::new(StateInferenceStore::new(
        Arc::clone(&state),
        Arc::clone(&blobs),
        retention.clone(),
    ));
    let feedback = Arc::new(StateFeedbackStore::new(state, blobs, retention));
    let metrics = BTreeMap::from([
        (
            "accepted".to_owned(),
            metric(MetricKind::Boolean, MetricLevel::Inference),
        ),
        ("quality".to_owned(), metric(MetricKind::Float, MetricLevel::Inference)),
        ("solved".to_owned(), metric(MetricKind::Boolean, MetricLevel::Episode)),
        ("turns".to_owned(), metric(MetricKind::Float, MetricLevel::Episode)),
    ]);
    let service = FeedbackService::new(
        metrics,
        Arc::clone(&inferences) as Arc<dyn InferenceStore>,
        Arc::clone(&feedback) as Arc<dyn FeedbackStore>,
        Arc::new(SystemClock),
        Arc::new(UuidV7Ids),
    )
    .with_target_wait(target_wait);
    Fixture {
        service,
        inferences,
        feedback,
        _dir: dir,
    }
}

fn inference(project: &str, function_type: FunctionType) -> InferenceRecord {
    InferenceRecord {
        project: ProjectId::new(project),
        inference_id: Uuid::now_v7(),
        episode_id: Uuid::now_v7(),
        function_name: "f".into(),
        variant_name: "v".into(),
        function_type,
        input: json!({"messages": []}),
        output: json!([]),
        tags: BTreeMap::new(),
        tool_params: None,
        output_schema: (function_type == FunctionType::Json)
            .then(|| json!({"type": "object", "properties": {"name": {"type": "string"}}, "required": ["name"]})),
        inference_params: json!({}),
        processing_time_ms: 3,
        ttft_ms: None,
        usage: TokenUsage::default(),
        finish_reason: Some("stop".into()),
        cached: false,
        created_at: rfc3339(0),
        timestamp: 0,
        model_calls: vec![],
    }
}

fn request(body: Value) -> FeedbackRequest {
    serde_json::from_value(body).unwrap()
}

async fn stored(f: &Fixture, project: &str, id: FeedbackId) -> FeedbackRecord {
    f.feedback
        .get(&ProjectId::new(project), id.0)
        .await
        .unwrap()
        .expect("feedback stored")
}

fn invalid_message(result: Result<FeedbackId, FeedbackError>) -> String {
    match result {
        Err(FeedbackError::Invalid(message)) => message,
        other => panic!("expected a 400, got {other:?}"),
    }
}

#[tokio::test]
async fn metric_values_are_stored_with_their_kind_and_target() {
    let f = fixture(Duration::ZERO);
    let record = inference("p", FunctionType::Chat);
    f.inferences.put(&record).await.unwrap();

    let id = f
        .service
        .submit(&ProjectId::new("p"), request(json!({"metric_name": "accepted", "inference_id": record.inference_id, "value": true, "tags": {"who": "qa"}})))
        .await
        .unwrap();
    assert_eq!(id.0.get_version_num(), 7);
    let saved = stored(&f, "p", id).await;
    assert_eq!(
        (saved.kind, saved.target_type, saved.target_id, saved.value.clone()),
        (
            FeedbackKind::Boolean,
            FeedbackTarget::Inference,
            record.inference_id,
            json!(true)
        )
    );
    assert_eq!(saved.tags["who"], "qa");
    assert_eq!(saved.project.as_str(), "p");

    let id = f
        .service
        .submit(
            &ProjectId::new("p"),
            request(json!({"metric_name": "turns", "episode_id": record.episode_id, "value": 4.5})),
        )
        .await
        .unwrap();
    let saved = stored(&f, "p", id).await;
    assert_eq!(
        (saved.kind, saved.target_type, saved.target_id),
        (FeedbackKind::Float, FeedbackTarget::Episode, record.episode_id)
    );
}

#[tokio::test]
async fn values_must_have_the_metric_type() {
    let f = fixture(Duration::ZERO);
    let record = inference("p", FunctionType::Chat);
    f.inferences.put(&record).await.unwrap();
    let id = record.inference_id;
    for (metric, value, expected) in [
        ("accepted", json!(1), "a boolean"),
        ("accepted", json!("true"), "a boolean"),
        ("quality", json!("0.5"), "a number"),
        ("quality", json!(null), "a number"),
        ("comment", json!(3), "a string"),
    ] {
        let message = invalid_message(
            f.service
                .submit(
                    &ProjectId::new("p"),
                    request(json!({"metric_name": metric, "inference_id": id, "value": value})),
                )
                .await,
        );
        assert!(
            message.contains(expected) && message.contains(metric),
            "{metric}: {message}"
        );
    }
}

#[tokio::test]
async fn the_level_decides_which_id_is_needed() {
    let f = fixture(Duration::ZERO);
    let record = inference("p", FunctionType::Chat);
    f.inferences.put(&record).await.unwrap();
    let (inference_id, episode_id) = (record.inference_id, record.episode_id);
    let cases = [
        (
            json!({"metric_name": "accepted", "episode_id": episode_id, "value": true}),
            "inference_id",
        ),
        (
            json!({"metric_name": "solved", "inference_id": inference_id, "value": true}),
            "episode_id",
        ),
        (
            json!({"metric_name": "demonstration", "episode_id": episode_id, "value": "x"}),
            "inference_id",
        ),
        (json!({"metric_name": "comment", "value": "x"}), "exactly one"),
        (
            json!({"metric_name": "comment", "inference_id": inference_id, "episode_id": episode_id, "value": "x"}),
            "not both",
        ),
    ];
    for (body, expected) in cases {
        let message = invalid_message(f.service.submit(&ProjectId::new("p"), request(body.clone())).await);
        assert!(message.contains(expected), "{body}: {message}");
    }
    // The message names the metric and its level.
    let message = invalid_message(
        f.service
            .submit(
                &ProjectId::new("p"),
                request(json!({"metric_name": "solved", "inference_id": inference_id, "value": true})),
            )
            .await,
    );
    assert!(
        message.contains("`solved`") && message.contains("episode level"),
        "{message}"
    );
}

#[tokio::test]
async fn comments_go_on_either_level_and_unknown_metrics_are_404() {
    let f = fixture(Duration::ZERO);
    let record = inference("p", FunctionType::Chat);
    f.inferences.put(&record).await.unwrap();
    for body in [
        json!({"metric_name": "comment", "inference_id": record.inference_id, "value": "nice"}),
        json!({"metric_name": "comment", "episode_id": record.episode_id, "value": "nice"}),
    ] {
        let id = f.service.submit(&ProjectId::new("p"), request(body)).await.unwrap();
        assert_eq!(stored(&f, "p", id).await.kind, FeedbackKind::Comment);
    }
    let result = f
        .service
        .submit(
            &ProjectId::new("p"),
            request(json!({"metric_name": "nope", "inference_id": record.inference_id, "value": 1})),
        )
        .await;
    assert_eq!(result, Err(FeedbackError::UnknownMetric("nope".into())));
}

#[tokio::test]
async fn chat_demonstrations_become_content_blocks() {
    let f = fixture(Duration::ZERO);
    let record = inference("p", FunctionType::Chat);
    f.inferences.put(&record).await.unwrap();
    let project = ProjectId::new("p");
    let submit = |value: Value| {
        f.service.submit(
            &project,
            request(json!({"metric_name": "demonstration", "inference_id": record.inference_id, "value": value})),
        )
    };
    let id = submit(json!("Better answer")).await.unwrap();
    let saved = stored(&f, "p", id).await;
    assert_eq!(saved.kind, FeedbackKind::Demonstration);
    assert_eq!(saved.value, json!([{"type": "text", "text": "Better answer"}]));

    let blocks = json!([
        {"type": "text", "text": "Let me check."},
        {"type": "tool_call", "name": "get_weather", "arguments": {"city": "Oslo"}}
    ]);
    let id = submit(blocks.clone()).await.unwrap();
    assert_eq!(stored(&f, "p", id).await.value, blocks);

    for bad in [
        json!(5),
        json!([{"type": "image"}]),
        json!([{"type": "text"}]),
        json!([{"type": "text", "text": "x", "extra": 1}]),
        json!([{"type": "tool_call", "name": "t", "arguments": "{}"}]),
        json!(["plain"]),
    ] {
        invalid_message(submit(bad).await);
    }
}

#[tokio::test]
async fn json_demonstrations_are_checked_against_the_inference_output_schema() {
    let f = fixture(Duration::ZERO);
    let record = inference("p", FunctionType::Json);
    f.inferences.put(&record).await.unwrap();
    let project = ProjectId::new("p");
    let submit = |value: Value| {
        f.service.submit(
            &project,
            request(json!({"metric_name": "demonstration", "inference_id": record.inference_id, "value": value})),
        )
    };
    let id = submit(json!({"name": "Ada"})).await.unwrap();
    let saved = stored(&f, "p", id).await;
    assert_eq!(saved.value["parsed"], json!({"name": "Ada"}));
    assert_eq!(
        serde_json::from_str::<Value>(saved.value["raw"].as_str().unwrap()).unwrap(),
        json!({"name": "Ada"})
    );
    let message = invalid_message(submit(json!({"name": 7})).await);
    assert!(message.contains("output schema"), "{message}");
    invalid_message(submit(json!({})).await);
    invalid_message(submit(json!("Ada")).await);
}

#[tokio::test]
async fn targets_must_exist_in_the_callers_project() {
    let f = fixture(Duration::ZERO);
    let record = inference("p", FunctionType::Chat);
    f.inferences.put(&record).await.unwrap();
    let result = f
        .service
        .submit(
            &ProjectId::new("q"),
            request(json!({"metric_name": "accepted", "inference_id": record.inference_id, "value": true})),
        )
        .await;
    assert_eq!(
        result,
        Err(FeedbackError::TargetNotFound {
            target: FeedbackTarget::Inference,
            id: record.inference_id
        })
    );
    let result = f
        .service
        .submit(
            &ProjectId::new("q"),
            request(json!({"metric_name": "solved", "episode_id": record.episode_id, "value": true})),
        )
        .await;
    assert!(matches!(
        result,
        Err(FeedbackError::TargetNotFound {
            target: FeedbackTarget::Episode,
            ..
        })
    ));
    let missing = Uuid::now_v7();
    let result = f
        .service
        .submit(
            &ProjectId::new("p"),
            request(json!({"metric_name": "comment", "inference_id": missing, "value": "x"})),
        )
        .await;
    assert!(matches!(result, Err(FeedbackError::TargetNotFound { .. })));
}

/// Records are written just after the `/inference` response: feedback arriving first waits.
#[tokio::test]
async fn a_target_written_shortly_after_is_waited_for() {
    let f = fixture(Duration::from_secs(5));
    let record = inference("p", FunctionType::Chat);
    let inferences = Arc::clone(&f.inferences);
    let late = record.clone();
    let writer = tokio::spawn(async move {
        tokio::time::sleep(Duration::from_millis(300)).await;
        inferences.put(&late).await.unwrap();
    });
    let started = std::time::Instant::now();
    f.service
        .submit(
            &ProjectId::new("p"),
            request(json!({"metric_name": "solved", "episode_id": record.episode_id, "value": true})),
        )
        .await
        .unwrap();
    assert!(started.elapsed() < Duration::from_secs(4), "{:?}", started.elapsed());
    writer.await.unwrap();
}

#[tokio::test]
async fn dry_runs_check_but_store_nothing() {
    let f = fixture(Duration::ZERO);
    let record = inference("p", FunctionType::Chat);
    f.inferences.put(&record).await.unwrap();
    let id = f
        .service
        .submit(
            &ProjectId::new("p"),
            request(
                json!({"metric_name": "accepted", "inference_id": record.inference_id, "value": true, "dryrun": true}),
            ),
        )
        .await
        .unwrap();
    assert_eq!(f.feedback.get(&ProjectId::new("p"), id.0).await.unwrap(), None);
    invalid_message(
        f.service
            .submit(
                &ProjectId::new("p"),
                request(
                    json!({"metric_name": "accepted", "inference_id": record.inference_id, "value": 2, "dryrun": true}),
                ),
            )
            .await,
    );
}

#[tokio::test]
async fn reserved_tags_need_internal() {
    let f = fixture(Duration::ZERO);
    let record = inference("p", FunctionType::Chat);
    f.inferences.put(&record).await.unwrap();
    let body = |internal: Value| {
        request(
            json!({"metric_name": "comment", "inference_id": record.inference_id, "value": "x",
                       "tags": {"tensorzero::evaluation": "e1"}, "internal": internal}),
        )
    };
    let message = invalid_message(f.service.submit(&ProjectId::new("p"), body(json!(false))).await);
    assert!(message.contains("tensorzero::"), "{message}");
    f.service.submit(&ProjectId::new("p"), body(json!(true))).await.unwrap();
}

#[test]
fn the_clients_nulls_are_accepted_and_unknown_fields_are_not() {
    let body = json!({"metric_name": "m", "value": true, "inference_id": null, "episode_id": null,
                      "tags": null, "dryrun": null, "internal": null});
    let parsed: FeedbackRequest = serde_json::from_value(body).unwrap();
    assert_eq!((parsed.tags, parsed.dryrun, parsed.internal), (None, None, None));
    let err =
        serde_json::from_value::<FeedbackRequest>(json!({"metric_name": "m", "value": 1, "score": 2})).unwrap_err();
    assert!(err.to_string().contains("score"), "{err}");
    assert!(serde_json::from_value::<FeedbackRequest>(
        json!({"metric_name": "m", "value": 1, "inference_id": "not-a-uuid"})
    )
    .is_err());
}
