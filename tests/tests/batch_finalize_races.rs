//! Finalizing a batch under races and crashes, on the embedded adapters: pollers racing each
//! other or the last chunk, and finalizers dying after writing the result files, leave exactly one
//! set of result files with every request line once and exact counters and usage.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use nimbus_integration_tests::batch_assertions::{
    assert_cleaned_up, assert_completed_cleanly, assert_counts_and_usage, assert_lines_well_formed,
    assert_result_files, each_called_once,
};
use nimbus_integration_tests::batch_harness::{
    batch_record_with_status, custom_ids, lines_for, settings, Harness, ScriptedProvider, MODEL,
};
use nimbus_shared::openai::batches::BatchStatus;
use nimbus_shared::ports::JobOutcome;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

// Racing pollers ----------------------------------------------------------------------------------

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn two_pollers_finalizing_at_once_write_one_set_of_files() {
    let (h, provider) = Harness::with_model(settings(), Duration::from_millis(2));
    let ids = custom_ids(25, Some(6));
    let created = h.create_batch(&lines_for(MODEL, &ids)).await;
    // The worker that saves the last chunk cannot finalize (as if it died right after the save).
    h.state
        .fail_writes(u32::MAX, |r| batch_record_with_status(r, "finalizing"));
    h.validate().await;
    h.drain(Duration::from_secs(10)).await;
    assert!(h.state.injected() >= 1, "the worker tried to finalize");
    h.state.clear_faults();
    let pending = h.batch(&created.id).await;
    assert_eq!(pending.status, BatchStatus::InProgress);
    assert_eq!(pending.request_counts.completed + pending.request_counts.failed, 25);
    assert!(h.result_files(&created.id).await.is_empty());

    let (a, b) = tokio::join!(h.schedule_pass(), h.schedule_pass());
    let (a, b) = (a.unwrap(), b.unwrap());
    // A pass counts only the batches it finished itself.
    assert_eq!(
        a.finalized + b.finalized,
        1,
        "exactly one poller finalizes: {a:?} {b:?}"
    );
    assert_eq!(a.errors + b.errors, 0);

    let batch = h.batch(&created.id).await;
    assert!(batch.output_file_id.is_some() && batch.error_file_id.is_some());
    assert_completed_cleanly(&h, &batch, &ids).await;
    each_called_once(&provider, &ids);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn pollers_racing_the_last_chunk_write_one_set_of_files() {
    let (h, provider) = Harness::with_model(settings(), Duration::from_millis(10));
    let ids = custom_ids(20, Some(6));
    let created = h.create_batch(&lines_for(MODEL, &ids)).await;
    h.validate().await;
    let chunk0 = h.receive().await.unwrap();
    assert_eq!(h.handle(&chunk0).await, JobOutcome::Done);
    let chunk1 = h.receive().await.unwrap();

    let done = AtomicBool::new(false);
    let poll = || async {
        loop {
            let last = done.load(Ordering::SeqCst);
            let report = h.schedule_pass().await.unwrap();
            assert_eq!(report.errors, 0);
            if last {
                return;
            }
            tokio::time::sleep(Duration::from_millis(3)).await;
        }
    };
    let work = async {
        let result = h.handle(&chunk1).await;
        done.store(true, Ordering::SeqCst);
        result
    };
    let (result, _, _) = tokio::join!(work, poll(), poll());
    assert_eq!(result, JobOutcome::Done);

    let batch = h.batch(&created.id).await;
    assert_completed_cleanly(&h, &batch, &ids).await;
    each_called_once(&provider, &ids);
}

// Finalizers failing after writing the files ------------------------------------------------------

/// Run a batch whose finalizer writes the result files and then fails to record the final
/// status (`crash`: nor can it hand its finalize lease back, as when the process dies).
async fn finalize_with_lost_status_write(crash: bool) -> (Harness, Arc<ScriptedProvider>, Vec<String>, String) {
    let (h, provider) = Harness::with_model(settings(), Duration::from_millis(2));
    let ids = custom_ids(15, Some(4));
    let created = h.create_batch(&lines_for(MODEL, &ids)).await;
    h.state.fail_writes(u32::MAX, move |r| {
        batch_record_with_status(r, "completed")
            || (crash && batch_record_with_status(r, "finalizing") && r.body["finalize_lease_until_ms"] == 0)
    });
    h.validate().await;
    h.drain(Duration::from_secs(10)).await;
    assert!(h.state.injected() >= 1);
    h.state.clear_faults();
    assert_eq!(h.batch(&created.id).await.status, BatchStatus::Finalizing);
    (h, provider, ids, created.id)
}

async fn assert_finished_with_files(
    h: &Harness,
    provider: &ScriptedProvider,
    ids: &[String],
    batch_id: &str,
    before: &[String],
) {
    let batch = h.batch(batch_id).await;
    assert_eq!(batch.status, BatchStatus::Completed);
    let mut after = vec![
        batch.output_file_id.clone().unwrap(),
        batch.error_file_id.clone().unwrap(),
    ];
    after.sort();
    assert_eq!(
        before.to_vec(),
        after,
        "the files written before the failure are the batch's files"
    );
    assert_result_files(h, &batch).await;
    assert_counts_and_usage(&batch, ids, ids);
    let results = h.results(&batch).await;
    results.assert_each_once(ids);
    assert_lines_well_formed(&results, "none");
    assert_cleaned_up(h, &batch.id).await;
    each_called_once(provider, ids);
}

async fn result_file_ids(h: &Harness, batch_id: &str) -> Vec<String> {
    let mut ids: Vec<String> = h.result_files(batch_id).await.into_iter().map(|f| f.id).collect();
    ids.sort();
    ids
}

#[tokio::test]
async fn a_finalizer_dying_after_writing_the_files_is_finished_with_the_same_files() {
    let (h, provider, ids, batch_id) = finalize_with_lost_status_write(true).await;
    let before = result_file_ids(&h, &batch_id).await;
    assert_eq!(before.len(), 2, "output and error file written before the crash");

    // Within the dead finalizer's lease nobody else finishes it.
    let report = h.schedule_pass().await.unwrap();
    assert_eq!(report.finalized, 0);
    assert_eq!(h.batch(&batch_id).await.status, BatchStatus::Finalizing);

    // After it, the poller finishes it with the same files.
    h.clock.advance(Duration::from_secs(16 * 60));
    let report = h.schedule_pass().await.unwrap();
    assert_eq!(report.finalized, 1);
    assert_finished_with_files(&h, &provider, &ids, &batch_id, &before).await;
}

#[tokio::test]
async fn a_finalizer_failing_after_writing_the_files_is_finished_at_once_with_the_same_files() {
    let (h, provider, ids, batch_id) = finalize_with_lost_status_write(false).await;
    let before = result_file_ids(&h, &batch_id).await;
    assert_eq!(before.len(), 2, "output and error file written before the failure");
    // The failed finalizer handed its lease back: the next poller pass finishes it.
    let report = h.schedule_pass().await.unwrap();
    assert_eq!(report.finalized, 1);
    assert_finished_with_files(&h, &provider, &ids, &batch_id, &before).await;
}
