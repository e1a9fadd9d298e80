//! The local server's start-up takeover: the process holding the data directory's lock is its
//! only worker, so it breaks the leases a killed process left and enqueues every unfinished job
//! again at once; the batch resumes without waiting for leases to expire, nothing saved runs twice.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use nimbus_integration_tests::batch_assertions::{
    assert_cleaned_up, assert_completed_cleanly, assert_stopped_after, each_called_once,
};
use nimbus_integration_tests::batch_harness::{
    custom_ids, lines_for, project, slow_settings, Harness, ScriptedProvider, MODEL, VISIBILITY,
};
use nimbus_shared::adapters::embedded::DataDirLock;
use nimbus_shared::openai::batches::BatchStatus;
use nimbus_shared::ports::BatchId;
use nimbus_shared::ports::{JobOutcome, JobQueue};
use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;
use tokio::time::Instant;

/// The in-process queue dies with the process: every message is gone.
async fn lose_the_queue(h: &Harness) {
    while let Some(message) = h.queue.receive(1, Duration::ZERO, VISIBILITY).await.unwrap().pop() {
        h.queue.delete(&message.receipt).await.unwrap();
    }
    // Messages handed out before (and hidden) are lost too.
    assert!(h.queue.is_empty(), "{} messages left", h.queue.len());
}

/// Kill a run of chunk 0 of a fresh 30-line batch (3 chunks) once it saved some lines; the queue
/// is lost with it. Returns the batch id and how many lines were saved.
async fn kill_mid_chunk(h: &Harness, ids: &[String]) -> (String, usize) {
    let created = h.create_batch(&lines_for(MODEL, ids)).await;
    h.validate().await;
    let chunk0 = h.receive().await.unwrap();
    let run = h.spawn_run(&chunk0);
    h.wait_for_saved(&created.id, 0, 2, "saved progress").await;
    run.abort();
    assert!(run.await.unwrap_err().is_cancelled(), "the worker was killed");
    h.queue.delete(&chunk0.receipt).await.unwrap();
    tokio::time::sleep(Duration::from_millis(50)).await;
    let saved = usize::try_from(h.lines_done(&created.id, 0).await).unwrap();
    assert!((2..10).contains(&saved), "{saved}");
    (created.id, saved)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_takeover_resumes_a_killed_processs_batch_at_once() {
    let provider = ScriptedProvider::new(Duration::from_millis(30));
    let mut s = slow_settings();
    s.model_limits = HashMap::from([(MODEL.to_owned(), 1)]);
    let h = Harness::new(s, &[(MODEL, Arc::clone(&provider))]);
    let ids = custom_ids(30, Some(4));
    let (batch_id, saved) = kill_mid_chunk(&h, &ids).await;
    lose_the_queue(&h).await;

    let lock = DataDirLock::acquire(h.dir.path()).unwrap();
    let report = h.recovery.take_over(&lock).await.unwrap();
    assert_eq!(report.batches, 1);
    assert_eq!(report.chunk_leases_broken, 1, "{report:?}");
    assert_eq!(report.slot_leases_broken, 1, "{report:?}");
    assert_eq!(report.jobs_enqueued, 3, "every unfinished chunk: {report:?}");

    // Every chunk runs at once: none waits for the dead run's lease or its model slot.
    let started = Instant::now();
    while let Some(message) = h.receive().await {
        assert_eq!(h.handle(&message).await, JobOutcome::Done, "{}", message.body);
    }
    assert!(
        started.elapsed() < Duration::from_secs(5),
        "the runs waited for the dead run"
    );
    let batch = h.batch(&batch_id).await;
    assert_completed_cleanly(&h, &batch, &ids).await;
    // What was saved before the kill did not run again.
    each_called_once(&provider, &ids[..saved]);
    each_called_once(&provider, &ids[10..]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_takeover_finishes_a_cancel_the_killed_process_left_unfinished() {
    let (h, _provider) = Harness::with_model(slow_settings(), Duration::from_millis(30));
    let ids = custom_ids(30, Some(4));
    let (batch_id, saved) = kill_mid_chunk(&h, &ids).await;
    let cancelling = h.api.cancel_batch(&project(), &BatchId::new(&batch_id)).await.unwrap();
    assert_eq!(cancelling.status, BatchStatus::Cancelling);
    lose_the_queue(&h).await;

    let lock = DataDirLock::acquire(h.dir.path()).unwrap();
    let report = h.recovery.take_over(&lock).await.unwrap();
    assert_eq!((report.batches, report.chunk_leases_broken), (1, 1), "{report:?}");
    let finalize = h.receive().await.expect("a finalize job");
    assert!(finalize.body.contains("finalize"), "{}", finalize.body);
    assert_eq!(h.handle(&finalize).await, JobOutcome::Done);
    let batch = h.batch(&batch_id).await;
    assert_eq!(batch.status, BatchStatus::Cancelled);
    assert_stopped_after(&h, &batch, &ids, &ids[..saved], "batch_cancelled").await;
    assert_cleaned_up(&h, &batch_id).await;
}

#[tokio::test]
async fn a_takeover_validates_again_a_batch_whose_validation_was_lost() {
    let (h, _provider) = Harness::with_model(slow_settings(), Duration::from_millis(1));
    let ids = custom_ids(12, None);
    let created = h.create_batch(&lines_for(MODEL, &ids)).await;
    lose_the_queue(&h).await;

    let lock = DataDirLock::acquire(h.dir.path()).unwrap();
    let report = h.recovery.take_over(&lock).await.unwrap();
    assert_eq!((report.batches, report.jobs_enqueued), (1, 1), "{report:?}");
    let batch = h.run_to_end(&created.id).await;
    assert_eq!(batch.status, BatchStatus::Completed);
    h.results(&batch).await.assert_each_once(&ids);
    // A finished batch is left alone by a later takeover.
    let again = h.recovery.take_over(&lock).await.unwrap();
    assert_eq!(again.batches, 0);
    assert!(h.queue.is_empty());
}
