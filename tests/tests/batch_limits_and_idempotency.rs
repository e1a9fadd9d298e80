//! Model concurrency limits and idempotent creation, on the embedded adapters: a model's limit
//! holds across workers (and a killed worker's slots free up with its lease), and an
//! idempotency key creates one batch however the requests race or fail.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use nimbus_integration_tests::batch_assertions::{assert_counts_and_usage, each_called_once};
use nimbus_integration_tests::batch_harness::{
    custom_ids, lines_for, project, settings, Harness, ScriptedProvider, MODEL, VISIBILITY,
};
use nimbus_shared::batches::{BatchesError, ListBatches, BATCH_PAGE};
use nimbus_shared::openai::batches::BatchStatus;
use nimbus_shared::ports::{JobOutcome, JobQueue};
use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;
use std::time::Duration;
use tokio::time::Instant;

// Model limits ------------------------------------------------------------------------------------

#[tokio::test(flavor = "multi_thread", worker_threads = 8)]
async fn a_model_limit_holds_across_workers() {
    let limited = ScriptedProvider::new(Duration::from_millis(20));
    let free = ScriptedProvider::new(Duration::from_millis(20));
    let mut s = settings();
    s.line_concurrency = 8;
    s.model_limits = HashMap::from([("limited".to_owned(), 3)]);
    let h = Arc::new(Harness::new(
        s,
        &[("limited", Arc::clone(&limited)), ("free", Arc::clone(&free))],
    ));
    // Four chunks of the limited model, one of the unlimited one.
    let limited_ids = custom_ids(40, None);
    let free_ids: Vec<String> = (0..10).map(|i| format!("free-{i:04}")).collect();
    let mut lines = lines_for("limited", &limited_ids);
    lines.extend(lines_for("free", &free_ids));
    let created = h.create_batch(&lines).await;
    h.validate().await;
    assert_eq!(h.queue.len(), 5);

    let workers: Vec<_> = (0..4)
        .map(|_| {
            let h = Arc::clone(&h);
            let id = created.id.clone();
            tokio::spawn(async move {
                let give_up = Instant::now() + Duration::from_secs(20);
                while !h.batch(&id).await.status.is_terminal() {
                    assert!(Instant::now() < give_up, "the batch did not finish");
                    let received = h.queue.receive(1, Duration::from_millis(50), VISIBILITY).await.unwrap();
                    for message in received {
                        h.handle(&message).await;
                    }
                }
            })
        })
        .collect();
    for worker in workers {
        worker.await.unwrap();
    }
    let batch = h.batch(&created.id).await;
    assert_eq!(batch.status, BatchStatus::Completed);
    assert_eq!(limited.max_in_flight(), 3, "the limit is used and never exceeded");
    assert!(
        free.max_in_flight() > 3,
        "the unlimited model runs {} at once",
        free.max_in_flight()
    );
    let mut all = limited_ids.clone();
    all.extend(free_ids.clone());
    assert_counts_and_usage(&batch, &all, &all);
    h.results(&batch).await.assert_each_once(&all);
    each_called_once(&limited, &limited_ids);
    each_called_once(&free, &free_ids);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_killed_workers_model_slots_expire_with_its_lease() {
    let provider = ScriptedProvider::new(Duration::from_millis(30));
    let mut s = settings();
    s.line_concurrency = 2;
    s.model_limits = HashMap::from([(MODEL.to_owned(), 2)]);
    let h = Harness::new(s, &[(MODEL, Arc::clone(&provider))]);
    let ids = custom_ids(20, None);
    let created = h.create_batch(&lines_for(MODEL, &ids)).await;
    h.validate().await;
    let chunk0 = h.receive().await.unwrap();
    let chunk1 = h.receive().await.unwrap();
    let run = h.spawn_run(&chunk0);
    h.wait_for_saved(&created.id, 0, 2, "saved progress").await;
    run.abort();
    assert!(run.await.unwrap_err().is_cancelled());
    h.queue.delete(&chunk0.receipt).await.unwrap();

    // Past the dead run's lease its slots are free again: the other chunk runs without waiting
    // for them, and the poller brings the killed one back.
    h.clock.advance(Duration::from_secs(100));
    let started = Instant::now();
    assert_eq!(h.handle(&chunk1).await, JobOutcome::Done);
    assert!(started.elapsed() < Duration::from_secs(5), "the run waited for slots");
    assert_eq!(h.schedule_pass().await.unwrap().chunks_requeued, 1);
    let batch = h.run_to_end(&created.id).await;
    assert_eq!(batch.status, BatchStatus::Completed);
    assert_counts_and_usage(&batch, &ids, &ids);
    h.results(&batch).await.assert_each_once(&ids);
    assert!(provider.max_in_flight() <= 2);
    each_called_once(&provider, &ids[10..]);
}

// Idempotency keys --------------------------------------------------------------------------------

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn creating_with_an_idempotency_key_creates_one_batch() {
    let (h, provider) = Harness::with_model(settings(), Duration::from_millis(2));
    let ids = custom_ids(5, None);
    let file = h.upload(&lines_for(MODEL, &ids)).await;
    let request = Harness::create_request(&file.id);

    let first = h
        .api
        .create_batch(&project(), request.clone(), Some("key-1"))
        .await
        .unwrap();
    let again = h
        .api
        .create_batch(&project(), request.clone(), Some("key-1"))
        .await
        .unwrap();
    assert_eq!(again.id, first.id);
    assert_eq!(h.queue.len(), 1, "one validation enqueued");

    let mut other = request.clone();
    other.metadata = Some(BTreeMap::from([("k".to_owned(), serde_json::json!("v"))]));
    match h.api.create_batch(&project(), other, Some("key-1")).await {
        Err(BatchesError::Invalid { code, .. }) => assert_eq!(code, Some("idempotency_key_reused")),
        other => panic!("expected idempotency_key_reused, got {other:?}"),
    }

    // Two retries at once.
    let p = project();
    let (a, b) = tokio::join!(
        h.api.create_batch(&p, request.clone(), Some("key-2")),
        h.api.create_batch(&p, request.clone(), Some("key-2"))
    );
    let (a, b) = (a.unwrap(), b.unwrap());
    assert_eq!(a.id, b.id);
    assert_ne!(a.id, first.id);
    assert_eq!(h.queue.len(), 2, "one validation per batch");

    // The first attempt died between reserving the key and writing the batch; the retry creates
    // it under the reserved id.
    h.state.fail_writes(1, |r| r.kind == "batch");
    let failed = h.api.create_batch(&project(), request.clone(), Some("key-3")).await;
    assert!(matches!(failed, Err(BatchesError::Storage(_))), "{failed:?}");
    let retried = h
        .api
        .create_batch(&project(), request.clone(), Some("key-3"))
        .await
        .unwrap();
    let again = h
        .api
        .create_batch(&project(), request.clone(), Some("key-3"))
        .await
        .unwrap();
    assert_eq!(retried.id, again.id);

    let listed = h
        .api
        .list_batches(
            &project(),
            ListBatches {
                after: None,
                limit: BATCH_PAGE.check(100).unwrap(),
            },
        )
        .await
        .unwrap();
    let mut listed_ids: Vec<String> = listed.data.iter().map(|b| b.id.clone()).collect();
    listed_ids.sort();
    let mut expected = vec![first.id.clone(), a.id.clone(), retried.id.clone()];
    expected.sort();
    assert_eq!(listed_ids, expected, "exactly one batch per key");

    // Each of them runs to completion once.
    h.drain(Duration::from_secs(10)).await;
    for id in &expected {
        let batch = h.batch(id).await;
        assert_eq!(batch.status, BatchStatus::Completed, "{id}");
        assert_counts_and_usage(&batch, &ids, &ids);
        h.results(&batch).await.assert_each_once(&ids);
    }
    for id in &ids {
        assert_eq!(provider.calls_for(id), 3, "{id}: once per batch");
    }
}
