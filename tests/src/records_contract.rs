//! The records ports (`InferenceStore`, `ModelCache`, `FeedbackStore`) as implemented once in
//! `nimbus_shared::adapters::records`, run over each set of storage adapters. Each function
//! panics (test failure) on a violation.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use crate::batch_harness::TestClock;
use nimbus_shared::adapters::records::{
    RecordRetention, StateFeedbackStore, StateInferenceStore, StateModelCache, SPILL_THRESHOLD_BYTES,
};
use nimbus_shared::model::{ContentBlock, Message, ModelChoice, ModelRequest, ModelResponse, ModelUsage, Role};
use nimbus_shared::ports::inference_records::{
    rfc3339, FeedbackKind, FeedbackRecord, FeedbackTarget, FunctionType, InferenceRecord, ModelCallRecord, TokenUsage,
};
use nimbus_shared::ports::ProjectId;
use nimbus_shared::ports::{
    batch_base, BatchItemId, BlobStore, CacheKey, CachedModelResponse, Clock, FeedbackStore, InferenceStore,
    ItemIdKind, ModelCache, StateStore, StorageError,
};
use serde_json::json;
use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;
use uuid::Uuid;

/// A UUIDv7 at `unix_ms`.
fn v7_at(unix_ms: u64) -> Uuid {
    let nanos = u32::try_from(unix_ms % 1000).unwrap() * 1_000_000;
    Uuid::new_v7(uuid::Timestamp::from_unix(uuid::NoContext, unix_ms / 1000, nanos))
}

/// A record whose model call answered `raw_response`.
pub fn inference(project: &str, episode_id: Uuid, at_ms: u64, raw_response: String) -> InferenceRecord {
    InferenceRecord {
        project: ProjectId::new(project),
        inference_id: v7_at(at_ms),
        episode_id,
        function_name: "extract_contact".into(),
        variant_name: "strict".into(),
        function_type: FunctionType::Json,
        input: json!({"system": {"tone": "dry"}, "messages": [{"role": "user", "content": "Ada, ada@example.com"}]}),
        output: json!({"raw": "{\"name\":\"Ada\"}", "parsed": {"name": "Ada"}}),
        tags: BTreeMap::from([("user".to_owned(), "u-7".to_owned())]),
        tool_params: None,
        output_schema: Some(json!({"type": "object"})),
        inference_params: json!({"chat_completion": {"temperature": 0.2}}),
        processing_time_ms: 42,
        ttft_ms: Some(7),
        usage: TokenUsage {
            input_tokens: 11,
            output_tokens: 5,
        },
        finish_reason: Some("stop".into()),
        cached: false,
        created_at: rfc3339(i64::try_from(at_ms).unwrap()),
        timestamp: i64::try_from(at_ms).unwrap(),
        model_calls: vec![ModelCallRecord {
            id: Uuid::now_v7(),
            model_name: "dummy".into(),
            provider_name: "dummy".into(),
            raw_request: "{\"model\":\"dummy\"}".into(),
            raw_response,
            usage: TokenUsage {
                input_tokens: 11,
                output_tokens: 5,
            },
            response_time_ms: 30,
            ttft_ms: None,
            cached: false,
            finish_reason: Some("stop".into()),
        }],
    }
}

/// No retention: these records' fixed times are long past.
fn forever() -> RecordRetention {
    RecordRetention::new(0, Arc::new(nimbus_shared::ports::SystemClock))
}

/// Larger than a record may be inline (and than a DynamoDB item may be).
fn large_text() -> String {
    "x".repeat(SPILL_THRESHOLD_BYTES + 150_000)
}

/// Put, get, duplicate ids, and project isolation.
pub async fn inference_records_round_trip(state: Arc<dyn StateStore>, blobs: Arc<dyn BlobStore>) {
    let store = StateInferenceStore::new(Arc::clone(&state), blobs, forever());
    let record = inference("p1", Uuid::now_v7(), 1_777_000_000_000, "{}".into());
    store.put(&record).await.unwrap();
    assert_eq!(
        store.get(&ProjectId::new("p1"), record.inference_id).await.unwrap(),
        Some(record.clone())
    );
    assert_eq!(
        store.get(&ProjectId::new("p2"), record.inference_id).await.unwrap(),
        None
    );
    assert_eq!(store.get(&ProjectId::new("p1"), Uuid::now_v7()).await.unwrap(), None);
    assert_eq!(store.put(&record).await, Err(StorageError::Conflict));
    // The same id in another project is another record.
    let mut other = record.clone();
    other.project = ProjectId::new("p2");
    other.function_name = "theirs".into();
    store.put(&other).await.unwrap();
    assert_eq!(
        store
            .get(&ProjectId::new("p2"), record.inference_id)
            .await
            .unwrap()
            .unwrap()
            .function_name,
        "theirs"
    );
    assert_eq!(
        store.get(&ProjectId::new("p1"), record.inference_id).await.unwrap(),
        Some(record)
    );
}

/// A record larger than the state store takes keeps its payload in a blob, read back whole.
pub async fn large_inference_records_spill_to_blobs(state: Arc<dyn StateStore>, blobs: Arc<dyn BlobStore>) {
    let store = StateInferenceStore::new(Arc::clone(&state), Arc::clone(&blobs), forever());
    let episode = Uuid::now_v7();
    let large = inference("p1", episode, 1_777_000_001_000, large_text());
    store.put(&large).await.unwrap();
    assert_eq!(
        store.get(&ProjectId::new("p1"), large.inference_id).await.unwrap(),
        Some(large.clone())
    );

    let id = format!("p1/{}", large.inference_id);
    let stored = state.get("inference", &id).await.unwrap().unwrap();
    assert!(
        stored.body.to_string().len() < 4096,
        "the state record keeps only a pointer"
    );
    assert_eq!(stored.owner, format!("p1/{episode}"));
    let key = stored.body["payload_blob"].as_str().unwrap().to_owned();
    assert!(
        key.starts_with(&format!("inferences/p1/{}/", large.inference_id)),
        "{key}"
    );
    assert!(blobs.size(&key).await.unwrap().unwrap() > u64::try_from(SPILL_THRESHOLD_BYTES).unwrap());

    // A second put of the id (a batch item run again) conflicts and leaves the first record whole:
    // its payload blob is not replaced.
    let mut rerun = inference("p1", episode, 1_777_000_001_000, format!("{}y", large_text()));
    rerun.inference_id = large.inference_id;
    assert_eq!(store.put(&rerun).await, Err(StorageError::Conflict));
    assert_eq!(
        store.get(&ProjectId::new("p1"), large.inference_id).await.unwrap(),
        Some(large.clone())
    );

    // Listed with the small ones.
    let small = inference("p1", episode, 1_777_000_002_000, "{}".into());
    store.put(&small).await.unwrap();
    let page = store
        .list_episode(&ProjectId::new("p1"), episode, None, 10)
        .await
        .unwrap();
    assert_eq!(page.records, vec![large, small]);
    assert!(!page.has_more);
}

/// Oldest first, `after` and `limit`, `has_more` exact, per project.
pub async fn episode_listing_pages_oldest_first(state: Arc<dyn StateStore>, blobs: Arc<dyn BlobStore>) {
    let store = StateInferenceStore::new(state, blobs, forever());
    let episode = Uuid::now_v7();
    let records: Vec<InferenceRecord> = (0..5u64)
        .map(|i| inference("p1", episode, 1_777_000_000_000 + i * 1000, "{}".into()))
        .collect();
    // Written newest first: the order comes from the ids, not the writes.
    for record in records.iter().rev() {
        store.put(record).await.unwrap();
    }
    // Another episode and another project's same episode do not mix in.
    store
        .put(&inference("p1", Uuid::now_v7(), 1_777_000_000_500, "{}".into()))
        .await
        .unwrap();
    store
        .put(&inference("p2", episode, 1_777_000_000_700, "{}".into()))
        .await
        .unwrap();

    let first = store
        .list_episode(&ProjectId::new("p1"), episode, None, 2)
        .await
        .unwrap();
    assert_eq!(first.records, records[..2]);
    assert!(first.has_more);
    let second = store
        .list_episode(&ProjectId::new("p1"), episode, Some(records[1].inference_id), 2)
        .await
        .unwrap();
    assert_eq!(second.records, records[2..4]);
    assert!(second.has_more);
    let last = store
        .list_episode(&ProjectId::new("p1"), episode, Some(records[3].inference_id), 2)
        .await
        .unwrap();
    assert_eq!(last.records, records[4..]);
    assert!(!last.has_more);
    let all = store
        .list_episode(&ProjectId::new("p1"), episode, None, 5)
        .await
        .unwrap();
    assert_eq!((all.records.len(), all.has_more), (5, false));
    assert!(store
        .list_episode(&ProjectId::new("p1"), episode, Some(records[4].inference_id), 2)
        .await
        .unwrap()
        .records
        .is_empty());

    let theirs = store
        .list_episode(&ProjectId::new("p2"), episode, None, 10)
        .await
        .unwrap();
    assert_eq!(theirs.records.len(), 1);
    assert!(store.episode_exists(&ProjectId::new("p1"), episode).await.unwrap());
    assert!(store.episode_exists(&ProjectId::new("p2"), episode).await.unwrap());
    assert!(!store.episode_exists(&ProjectId::new("p3"), episode).await.unwrap());
    assert!(!store
        .episode_exists(&ProjectId::new("p1"), Uuid::now_v7())
        .await
        .unwrap());
}

/// Put, get (per project), duplicates, and a large demonstration spilled to a blob.
pub async fn feedback_round_trip(state: Arc<dyn StateStore>, blobs: Arc<dyn BlobStore>) {
    let store = StateFeedbackStore::new(state, blobs, forever());
    let target = Uuid::now_v7();
    let record = FeedbackRecord {
        project: ProjectId::new("p1"),
        feedback_id: Uuid::now_v7(),
        target_type: FeedbackTarget::Inference,
        target_id: target,
        metric_name: "accepted".into(),
        kind: FeedbackKind::Boolean,
        value: json!(true),
        tags: BTreeMap::from([("who".to_owned(), "qa".to_owned())]),
        created_at: rfc3339(1_777_000_000_000),
        timestamp: 1_777_000_000_000,
    };
    store.put(&record).await.unwrap();
    assert_eq!(
        store.get(&ProjectId::new("p1"), record.feedback_id).await.unwrap(),
        Some(record.clone())
    );
    assert_eq!(
        store.get(&ProjectId::new("p2"), record.feedback_id).await.unwrap(),
        None
    );
    assert_eq!(store.put(&record).await, Err(StorageError::Conflict));

    let demonstration = FeedbackRecord {
        feedback_id: Uuid::now_v7(),
        metric_name: "demonstration".into(),
        kind: FeedbackKind::Demonstration,
        value: json!([{"type": "text", "text": large_text()}]),
        ..record
    };
    store.put(&demonstration).await.unwrap();
    assert_eq!(
        store
            .get(&ProjectId::new("p1"), demonstration.feedback_id)
            .await
            .unwrap(),
        Some(demonstration)
    );
}

fn model_request(text: &str) -> ModelRequest {
    ModelRequest {
        model: "dummy".into(),
        messages: vec![Message::new(Role::User, vec![ContentBlock::text_block(text)])],
        ..ModelRequest::default()
    }
}

fn model_response(text: String) -> ModelResponse {
    ModelResponse {
        id: "resp-1".into(),
        choices: vec![ModelChoice {
            index: 0,
            content: vec![ContentBlock::text_block(text)],
            finish_reason: None,
            logprobs: None,
        }],
        usage: ModelUsage::new(3, 2),
        system_fingerprint: None,
        raw_response: Some("{\"id\":\"resp-1\"}".into()),
        raw_request: Some("{\"model\":\"m\"}".into()),
        provider_name: "p".into(),
        provider_type: "dummy".into(),
    }
}

/// Hits, misses by project and stream flag, expiry by the clock (the stores themselves never
/// expire: SQLite and moto), `max_age_s`, replacing an entry, and large responses.
pub async fn model_cache_expiry_and_max_age(state: Arc<dyn StateStore>, blobs: Arc<dyn BlobStore>) {
    let clock = Arc::new(TestClock::default());
    let cache = StateModelCache::new(state, blobs, Arc::clone(&clock) as Arc<dyn Clock>);
    let ttl = Duration::from_secs(60);
    let key = CacheKey::new(&ProjectId::new("p1"), "dummy", &model_request("hi"), false);
    assert_eq!(cache.lookup(&key, None).await.unwrap(), None);

    let entry = CachedModelResponse {
        response: model_response("hello".into()),
        created_at_ms: clock.now_unix_ms(),
    };
    cache.store(&key, &entry, ttl).await.unwrap();
    assert_eq!(cache.lookup(&key, None).await.unwrap(), Some(entry.clone()));
    for other in [
        CacheKey::new(&ProjectId::new("p2"), "dummy", &model_request("hi"), false),
        CacheKey::new(&ProjectId::new("p1"), "dummy", &model_request("hi"), true),
        CacheKey::new(&ProjectId::new("p1"), "dummy", &model_request("ho"), false),
    ] {
        assert_eq!(cache.lookup(&other, None).await.unwrap(), None);
    }

    clock.advance(Duration::from_secs(30));
    assert_eq!(cache.lookup(&key, Some(60)).await.unwrap(), Some(entry.clone()));
    assert_eq!(
        cache.lookup(&key, Some(10)).await.unwrap(),
        None,
        "older than max_age_s"
    );
    assert_eq!(cache.lookup(&key, None).await.unwrap(), Some(entry.clone()));

    clock.advance(Duration::from_secs(31));
    assert_eq!(cache.lookup(&key, None).await.unwrap(), None, "past its TTL");

    // Storing again replaces the expired entry.
    let fresh = CachedModelResponse {
        response: model_response("hello again".into()),
        created_at_ms: clock.now_unix_ms(),
    };
    cache.store(&key, &fresh, ttl).await.unwrap();
    assert_eq!(cache.lookup(&key, None).await.unwrap(), Some(fresh.clone()));
    // And a concurrent writer's store over a live entry succeeds too.
    cache.store(&key, &fresh, ttl).await.unwrap();

    let large_key = CacheKey::new(&ProjectId::new("p1"), "dummy", &model_request("long"), false);
    let large = CachedModelResponse {
        response: model_response(large_text()),
        created_at_ms: clock.now_unix_ms(),
    };
    cache.store(&large_key, &large, ttl).await.unwrap();
    assert_eq!(cache.lookup(&large_key, None).await.unwrap(), Some(large));
}

/// A record of item `index` of `batch_id` (ids derived from the batch), on its minted episode or
/// on `episode` when given.
fn batch_item(project: &str, batch_id: Uuid, index: u32, episode: Option<Uuid>) -> InferenceRecord {
    let mut record = inference(project, Uuid::now_v7(), 1_800_000_000_000, format!("answer {index}"));
    record.inference_id = BatchItemId::inference(batch_id, index).id().unwrap();
    record.episode_id = episode.unwrap_or_else(|| BatchItemId::episode(batch_id, index).id().unwrap());
    record
}

/// A batch's records in pages: found by id and by minted episode once the index is written,
/// read by range in input order, scoped to the project; rewriting a page changes nothing.
pub async fn batch_pages_find_items_by_id_and_range(state: Arc<dyn StateStore>, blobs: Arc<dyn BlobStore>) {
    let store = StateInferenceStore::new(state, blobs, forever());
    let batch = batch_base(Uuid::now_v7());
    // Items 0..10; 3 and 7 failed (no record). Page 0 holds 0..5 given out of order, page 1 5..10.
    let records: Vec<InferenceRecord> = (0..10)
        .filter(|i| *i != 3 && *i != 7)
        .map(|i| batch_item("p1", batch, i, None))
        .collect();
    let mut first: Vec<InferenceRecord> = records.iter().filter(|r| pos(batch, r) < 5).cloned().collect();
    first.reverse();
    let second: Vec<InferenceRecord> = records.iter().filter(|r| pos(batch, r) >= 5).cloned().collect();
    let item = |i: u32| BatchItemId::inference(batch, i).id().unwrap();

    let span0 = store
        .put_batch_page(&ProjectId::new("p1"), batch, 0, &first)
        .await
        .unwrap()
        .unwrap();
    assert_eq!((span0.first, span0.last), (0, 4));
    // Not findable before the index.
    assert_eq!(store.get(&ProjectId::new("p1"), item(1)).await.unwrap(), None);
    assert!(store
        .batch_records(&ProjectId::new("p1"), batch, 0..10)
        .await
        .unwrap()
        .is_empty());
    let span1 = store
        .put_batch_page(&ProjectId::new("p1"), batch, 1, &second)
        .await
        .unwrap()
        .unwrap();
    assert_eq!((span1.first, span1.last), (5, 9));
    assert_eq!(
        store
            .put_batch_page(&ProjectId::new("p1"), batch, 2, &[])
            .await
            .unwrap(),
        None
    );
    store
        .put_batch_index(&ProjectId::new("p1"), batch, &[span0, span1])
        .await
        .unwrap();
    // Again, as a finalizer that runs twice does: nothing changes.
    store
        .put_batch_page(&ProjectId::new("p1"), batch, 0, &first)
        .await
        .unwrap();
    store
        .put_batch_index(&ProjectId::new("p1"), batch, &[span0, span1])
        .await
        .unwrap();

    for record in &records {
        assert_eq!(
            store
                .get(&ProjectId::new("p1"), record.inference_id)
                .await
                .unwrap()
                .as_ref(),
            Some(record)
        );
        assert!(store
            .episode_exists(&ProjectId::new("p1"), record.episode_id)
            .await
            .unwrap());
        let listed = store
            .list_episode(&ProjectId::new("p1"), record.episode_id, None, 10)
            .await
            .unwrap();
        assert_eq!(listed.records, vec![record.clone()]);
        assert!(!listed.has_more);
        let after = store
            .list_episode(&ProjectId::new("p1"), record.episode_id, Some(record.inference_id), 10)
            .await
            .unwrap();
        assert!(after.records.is_empty());
    }
    assert_eq!(
        store.get(&ProjectId::new("p1"), item(3)).await.unwrap(),
        None,
        "a failed item has no record"
    );
    assert!(!store
        .episode_exists(&ProjectId::new("p1"), BatchItemId::episode(batch, 3).id().unwrap())
        .await
        .unwrap());
    assert_eq!(
        store.get(&ProjectId::new("p1"), item(10)).await.unwrap(),
        None,
        "past the batch"
    );
    assert_eq!(
        store.get(&ProjectId::new("other"), item(1)).await.unwrap(),
        None,
        "another project's"
    );
    assert!(store
        .batch_records(&ProjectId::new("other"), batch, 0..10)
        .await
        .unwrap()
        .is_empty());

    let all = store.batch_records(&ProjectId::new("p1"), batch, 0..10).await.unwrap();
    assert_eq!(all, records, "every record, in input order");
    let window = store.batch_records(&ProjectId::new("p1"), batch, 2..6).await.unwrap();
    let ids: Vec<u32> = window.iter().map(|r| pos(batch, r)).collect();
    assert_eq!(ids, vec![2, 4, 5]);
    assert!(store
        .batch_records(&ProjectId::new("p1"), batch, 4..4)
        .await
        .unwrap()
        .is_empty());

    // A record of another batch is refused from this batch's page.
    let stranger = batch_item("p1", batch_base(Uuid::now_v7()), 0, None);
    assert!(matches!(
        store.put_batch_page(&ProjectId::new("p1"), batch, 3, &[stranger]).await,
        Err(StorageError::Invalid(_))
    ));
    // A later single inference on a batch item's episode lists after it.
    let episode = records[0].episode_id;
    let mut later = inference("p1", episode, 1_900_000_000_000, "later".into());
    later.inference_id = v7_at(1_900_000_000_000);
    store.put(&later).await.unwrap();
    let listed = store
        .list_episode(&ProjectId::new("p1"), episode, None, 10)
        .await
        .unwrap();
    assert_eq!(listed.records, vec![records[0].clone(), later.clone()]);
    let capped = store
        .list_episode(&ProjectId::new("p1"), episode, None, 1)
        .await
        .unwrap();
    assert_eq!((capped.records, capped.has_more), (vec![records[0].clone()], true));
}

fn pos(batch: Uuid, record: &InferenceRecord) -> u32 {
    BatchItemId::of_batch(record.inference_id, batch, ItemIdKind::Inference).unwrap()
}

/// Records carry their retention as the store's TTL (`expires_at`); once past it they are gone
/// for every read (a 404, not an error), whether or not the store has deleted them yet, and a
/// batch's pages too even when some of its blobs were deleted and not others.
pub async fn records_past_their_retention_are_gone(state: Arc<dyn StateStore>, blobs: Arc<dyn BlobStore>) {
    let clock = Arc::new(TestClock::default());
    let retention = RecordRetention::new(90, Arc::clone(&clock) as Arc<dyn Clock>);
    let inferences = StateInferenceStore::new(Arc::clone(&state), Arc::clone(&blobs), retention.clone());
    let feedback_store = StateFeedbackStore::new(Arc::clone(&state), Arc::clone(&blobs), retention);
    let now_ms = u64::try_from(clock.now_unix_ms()).unwrap();
    let episode = Uuid::now_v7();
    let record = inference("p1", episode, now_ms, "{}".into());
    let large = inference("p1", episode, now_ms + 1, large_text());
    inferences.put(&record).await.unwrap();
    inferences.put(&large).await.unwrap();
    let feedback = FeedbackRecord {
        project: ProjectId::new("p1"),
        feedback_id: Uuid::now_v7(),
        target_type: FeedbackTarget::Inference,
        target_id: record.inference_id,
        metric_name: "accepted".into(),
        kind: FeedbackKind::Boolean,
        value: json!(true),
        tags: BTreeMap::new(),
        created_at: rfc3339(i64::try_from(now_ms).unwrap()),
        timestamp: i64::try_from(now_ms).unwrap(),
    };
    feedback_store.put(&feedback).await.unwrap();
    let batch = batch_base(Uuid::now_v7());
    let item = batch_item("p1", batch, 0, None);
    let span = inferences
        .put_batch_page(&ProjectId::new("p1"), batch, 0, std::slice::from_ref(&item))
        .await
        .unwrap()
        .unwrap();
    inferences
        .put_batch_index(&ProjectId::new("p1"), batch, &[span])
        .await
        .unwrap();

    let ninety_days_s = 90 * 24 * 3600;
    let id = format!("p1/{}", record.inference_id);
    let stored = state.get("inference", &id).await.unwrap().unwrap();
    assert_eq!(
        stored.expires_at,
        Some(i64::try_from(now_ms / 1000).unwrap() + ninety_days_s)
    );
    let stored = state
        .get("feedback", &format!("p1/{}", feedback.feedback_id))
        .await
        .unwrap()
        .unwrap();
    assert!(stored
        .expires_at
        .is_some_and(|at| at >= i64::try_from(now_ms / 1000).unwrap() + ninety_days_s));
    assert!(inferences
        .get(&ProjectId::new("p1"), record.inference_id)
        .await
        .unwrap()
        .is_some());
    assert!(inferences
        .get(&ProjectId::new("p1"), item.inference_id)
        .await
        .unwrap()
        .is_some());
    assert!(feedback_store
        .get(&ProjectId::new("p1"), feedback.feedback_id)
        .await
        .unwrap()
        .is_some());

    clock.advance(Duration::from_secs(89 * 24 * 3600));
    assert_eq!(
        inferences
            .list_episode(&ProjectId::new("p1"), episode, None, 10)
            .await
            .unwrap()
            .records
            .len(),
        2
    );
    clock.advance(Duration::from_secs(2 * 24 * 3600));
    // Still stored (TTL deletes lazily), gone for readers.
    assert!(state.get("inference", &id).await.unwrap().is_some());
    assert_eq!(
        inferences
            .get(&ProjectId::new("p1"), record.inference_id)
            .await
            .unwrap(),
        None
    );
    assert_eq!(
        inferences.get(&ProjectId::new("p1"), large.inference_id).await.unwrap(),
        None
    );
    assert_eq!(
        feedback_store
            .get(&ProjectId::new("p1"), feedback.feedback_id)
            .await
            .unwrap(),
        None
    );
    let listed = inferences
        .list_episode(&ProjectId::new("p1"), episode, None, 10)
        .await
        .unwrap();
    assert!(listed.records.is_empty());
    assert!(!inferences.episode_exists(&ProjectId::new("p1"), episode).await.unwrap());
    // The lifecycle rule deleted a page before the index: no error, no record.
    blobs
        .delete(&format!("inferences/p1/batches/{}/page-000000.jsonl", batch.simple()))
        .await
        .unwrap();
    assert_eq!(
        inferences.get(&ProjectId::new("p1"), item.inference_id).await.unwrap(),
        None
    );
    assert!(inferences
        .batch_records(&ProjectId::new("p1"), batch, 0..1)
        .await
        .unwrap()
        .is_empty());
}
