//! Live progress (#26 D13): a chunk whose results are saved only every `checkpoint_lines` still
//! shows its counts within 2 s of lines finishing to a status read that asks for them, without
//! counting a line twice once it is saved; a batch nobody watches live writes nothing for it.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use nimbus_integration_tests::batch_harness::{custom_ids, lines_for, project, slow_settings, Harness, MODEL};
use nimbus_shared::openai::batches::BatchStatus;
use nimbus_shared::ports::BatchId;
use std::time::Duration;
use tokio::time::Instant;

/// One line at a time, 250 ms each: 10 lines take 2.5 s; no segment is saved before the end.
fn harness() -> Harness {
    let mut settings = slow_settings();
    settings.checkpoint_lines = 1_000;
    settings.checkpoint_interval = Duration::from_secs(30);
    Harness::with_model(settings, Duration::from_millis(250)).0
}

#[tokio::test]
async fn a_live_read_sees_unsaved_lines_within_two_seconds_and_never_twice() {
    let h = harness();
    let created = h.create_batch(&lines_for(MODEL, &custom_ids(10, None))).await;
    let batch_id = BatchId::new(&created.id);
    h.validate().await;
    // The watcher's first look asks for live progress before the chunk runs.
    let seen = h.api.get_batch(&project(), &batch_id, true).await.unwrap();
    assert_eq!(seen.request_counts.completed, 0);
    let chunk = h.receive().await.expect("a chunk message");
    let started = Instant::now();
    let run = h.spawn_run(&chunk);

    let mut live_at = None;
    while Instant::now() < started + Duration::from_secs(2) {
        let live = h.api.get_batch(&project(), &batch_id, true).await.unwrap();
        if live.request_counts.completed > 0 && h.lines_done(&created.id, 0).await == 0 {
            live_at = Some(started.elapsed());
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let live_at = live_at.expect("unsaved lines seen live within 2 s of the first finishing (250 ms)");
    // A plain read has only what is saved.
    let plain = h.api.get_batch(&project(), &batch_id, false).await.unwrap();
    assert_eq!(plain.request_counts.completed, 0, "seen live at {live_at:?}");
    // Live counts move as lines finish, by the publishing interval.
    tokio::time::sleep(Duration::from_millis(2_100)).await;
    let later = h.api.get_batch(&project(), &batch_id, true).await.unwrap();
    assert!(later.request_counts.completed >= 8, "{:?}", later.request_counts);

    let outcome = run.await.unwrap();
    h.settle(&chunk, outcome).await;
    h.drain(Duration::from_secs(5)).await;
    let done = h.api.get_batch(&project(), &batch_id, true).await.unwrap();
    assert_eq!(done.status, BatchStatus::Completed);
    assert_eq!(
        (
            done.request_counts.total,
            done.request_counts.completed,
            done.request_counts.failed
        ),
        (10, 10, 0),
        "each line counted once"
    );
    assert_eq!(h.count_records("batch_live", &created.id).await, 0, "cleaned up");
}

#[tokio::test]
async fn a_batch_nobody_watches_live_writes_no_live_progress() {
    let h = harness();
    let created = h.create_batch(&lines_for(MODEL, &custom_ids(10, None))).await;
    let batch_id = BatchId::new(&created.id);
    h.validate().await;
    let chunk = h.receive().await.expect("a chunk message");
    let run = h.spawn_run(&chunk);
    tokio::time::sleep(Duration::from_millis(1_500)).await;
    assert_eq!(h.count_records("batch_live", &created.id).await, 0);
    let plain = h.api.get_batch(&project(), &batch_id, false).await.unwrap();
    assert_eq!(plain.request_counts.completed, 0, "saved only at the end");
    let outcome = run.await.unwrap();
    h.settle(&chunk, outcome).await;
    h.drain(Duration::from_secs(5)).await;
    let done = h.batch(&created.id).await;
    assert_eq!(
        (done.status, done.request_counts.completed),
        (BatchStatus::Completed, 10)
    );
}
