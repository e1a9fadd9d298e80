//! Cancelling and expiring batches, on the embedded adapters: whatever ran stays in the results,
//! every other line is listed once as cancelled or expired, and workers that are dead, stalled
//! or past their lease cannot add to a batch that was stopped.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use nimbus_integration_tests::batch_assertions::{
    assert_cleaned_up, assert_counts_and_usage, assert_lines_well_formed, assert_result_files, assert_stopped_after,
    each_called_once, ran_ids, sorted,
};
use nimbus_integration_tests::batch_harness::{
    batch_record_with_status, custom_ids, lines_for, project, settings, slow_settings, BatchResults, Harness,
    ScriptedProvider, MODEL, VISIBILITY,
};
use nimbus_shared::openai::batches::{BatchObject, BatchStatus};
use nimbus_shared::ports::BatchId;
use nimbus_shared::ports::{JobOutcome, JobQueue};
use std::time::Duration;
use tokio::time::Instant;

// Stopped mid-run ---------------------------------------------------------------------------------

/// Start chunk 0 of a 3-chunk batch (30 lines) on a slow model and return once some of its
/// lines are saved, with the three chunk deliveries and the task running the first.
async fn start_slow_batch(
    h: &Harness,
    ids: &[String],
) -> (
    BatchObject,
    Vec<nimbus_shared::ports::QueueMessage>,
    tokio::task::JoinHandle<JobOutcome>,
) {
    let created = h.create_batch(&lines_for(MODEL, ids)).await;
    h.validate().await;
    let chunk0 = h.receive().await.unwrap();
    let rest = vec![chunk0.clone(), h.receive().await.unwrap(), h.receive().await.unwrap()];
    let run = h.spawn_run(&chunk0);
    h.wait_for_saved(&created.id, 0, 2, "saved progress").await;
    (created, rest, run)
}

/// A batch stopped early (cancelled or expired): every line once, the ones that ran with their
/// response, the rest with `code`; nothing ran that is not in the results.
fn assert_stopped_early(
    provider: &ScriptedProvider,
    batch: &BatchObject,
    results: &BatchResults,
    ids: &[String],
    code: &str,
) {
    results.assert_each_once(ids);
    assert_lines_well_formed(results, code);
    let ran = ran_ids(results);
    assert!(
        !ran.is_empty() && ran.len() < 10,
        "the running chunk stopped mid-way: {} ran",
        ran.len()
    );
    // Lines run in order (one at a time): what ran is a prefix of chunk 0.
    assert_eq!(ran, sorted(&ids[..ran.len()]));
    assert_eq!(results.not_run_with(code).len(), ids.len() - ran.len());
    assert_counts_and_usage(batch, ids, &ran);
    each_called_once(provider, &ran);
    assert_eq!(
        provider.total_calls(),
        ran.len(),
        "every line that was called is in the results"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn cancelling_mid_run_keeps_what_ran_and_lists_the_rest_as_cancelled() {
    let (h, provider) = Harness::with_model(slow_settings(), Duration::from_millis(30));
    let ids = custom_ids(30, Some(4));
    let (created, rest, run) = start_slow_batch(&h, &ids).await;

    let batch_id = BatchId::new(&created.id);
    let cancelling = h.api.cancel_batch(&project(), &batch_id).await.unwrap();
    assert_eq!(cancelling.status, BatchStatus::Cancelling, "a chunk is still running");
    assert!(cancelling.cancelling_at.is_some());
    // The running chunk notices, saves what it finished and finalizes.
    assert_eq!(run.await.unwrap(), JobOutcome::Done);
    h.settle(&rest[0], JobOutcome::Done).await;
    for message in &rest[1..] {
        assert_eq!(h.handle(message).await, JobOutcome::Done);
    }
    let batch = h.run_to_end(&created.id).await;
    assert_eq!(batch.status, BatchStatus::Cancelled);
    assert!(batch.cancelled_at.is_some());
    let results = h.results(&batch).await;
    assert_stopped_early(&provider, &batch, &results, &ids, "batch_cancelled");
    assert_result_files(&h, &batch).await;
    assert_cleaned_up(&h, &batch.id).await;

    // Cancelling again returns it unchanged; a poller pass changes nothing.
    assert_eq!(h.api.cancel_batch(&project(), &batch_id).await.unwrap(), batch);
    h.schedule_pass().await.unwrap();
    assert_eq!(h.batch(&created.id).await, batch);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn expiring_mid_run_keeps_what_ran_and_lists_the_rest_as_expired() {
    let (h, provider) = Harness::with_model(slow_settings(), Duration::from_millis(30));
    let ids = custom_ids(30, Some(4));
    let (created, rest, run) = start_slow_batch(&h, &ids).await;

    h.clock.advance(Duration::from_secs(25 * 3600));
    assert_eq!(run.await.unwrap(), JobOutcome::Done);
    h.settle(&rest[0], JobOutcome::Done).await;
    for message in &rest[1..] {
        assert_eq!(h.handle(message).await, JobOutcome::Done);
    }
    let report = h.schedule_pass().await.unwrap();
    assert_eq!(report.errors, 0);
    let batch = h.run_to_end(&created.id).await;
    assert_eq!(batch.status, BatchStatus::Expired);
    assert!(batch.expired_at.is_some());
    let results = h.results(&batch).await;
    assert_stopped_early(&provider, &batch, &results, &ids, "batch_expired");
    assert_result_files(&h, &batch).await;
    assert_cleaned_up(&h, &batch.id).await;
}

#[tokio::test]
async fn the_poller_expires_an_overdue_batch_nobody_is_running() {
    let (h, provider) = Harness::with_model(settings(), Duration::from_millis(2));
    let ids = custom_ids(30, Some(4));
    let created = h.create_batch(&lines_for(MODEL, &ids)).await;
    h.validate().await;
    let chunk0 = h.receive().await.unwrap();
    assert_eq!(h.handle(&chunk0).await, JobOutcome::Done);

    h.clock.advance(Duration::from_secs(25 * 3600));
    let report = h.schedule_pass().await.unwrap();
    assert_eq!(report.finalized, 1);
    let batch = h.batch(&created.id).await;
    assert_eq!(batch.status, BatchStatus::Expired);
    // The chunks still queued find the batch finished and run nothing.
    h.drain(Duration::from_secs(5)).await;
    assert_eq!(h.batch(&created.id).await, batch);
    let results = assert_stopped_after(&h, &batch, &ids, &ids[..10], "batch_expired").await;
    assert_eq!(results.not_run_with("batch_expired").len(), 20);
    assert_eq!(provider.total_calls(), 10);
    assert_result_files(&h, &batch).await;
    assert_cleaned_up(&h, &batch.id).await;
}

// Cancelled while validating ----------------------------------------------------------------------

#[tokio::test]
async fn cancelling_while_validation_is_half_done_lists_lines_consistently() {
    let (h, provider) = Harness::with_model(settings(), Duration::from_millis(2));
    let ids = custom_ids(20, None);
    let created = h.create_batch(&lines_for(MODEL, &ids)).await;
    // The validation dies after planning chunk 0 and before chunk 1 (its write fails).
    h.state
        .fail_writes(1, |r| r.kind == "batch_chunk" && r.id.ends_with(".00001"));
    let validate = h.receive().await.unwrap();
    let result = h
        .worker
        .handle_until(&validate.body, Instant::now() + Duration::from_secs(60))
        .await;
    assert!(matches!(result, JobOutcome::Retry { .. }), "{result:?}");
    assert_eq!(h.batch(&created.id).await.status, BatchStatus::Validating);

    let batch_id = BatchId::new(&created.id);
    let cancelled = h.api.cancel_batch(&project(), &batch_id).await.unwrap();
    h.settle(
        &validate,
        JobOutcome::Retry {
            retry_after: Duration::ZERO,
        },
    )
    .await;
    h.drain(Duration::from_secs(5)).await;
    h.schedule_pass().await.unwrap();
    let batch = h.batch(&created.id).await;
    assert_eq!(batch.status, BatchStatus::Cancelled, "{cancelled:?}");
    assert_eq!(provider.total_calls(), 0);
    let counts = &batch.request_counts;
    assert_eq!(
        counts.total,
        counts.completed + counts.failed,
        "request_counts add up: {counts:?}"
    );
    let results = h.results(&batch).await;
    let listed = results.custom_id_counts().len();
    assert!(
        listed == 0 || listed == ids.len(),
        "either no line or every line is listed as cancelled; {listed} of {} are",
        ids.len()
    );
    if listed > 0 {
        results.assert_each_once(&ids);
    }
    assert_result_files(&h, &batch).await;
    assert_cleaned_up(&h, &batch.id).await;
}

// Dead and stalled workers ------------------------------------------------------------------------

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn cancelling_while_a_dead_worker_holds_a_chunk_finishes_within_seconds() {
    let (h, provider) = Harness::with_model(slow_settings(), Duration::from_millis(30));
    let ids = custom_ids(30, Some(4));
    let (created, rest, run) = start_slow_batch(&h, &ids).await;
    run.abort();
    assert!(run.await.unwrap_err().is_cancelled());
    h.queue.delete(&rest[0].receipt).await.unwrap();
    tokio::time::sleep(Duration::from_millis(50)).await;
    let saved = usize::try_from(h.lines_done(&created.id, 0).await).unwrap();
    assert!((2..10).contains(&saved), "{saved}");

    let cancelled_at = Instant::now();
    let batch_id = BatchId::new(&created.id);
    let cancelling = h.api.cancel_batch(&project(), &batch_id).await.unwrap();
    assert_eq!(cancelling.status, BatchStatus::Cancelling);
    for message in &rest[1..] {
        assert_eq!(h.handle(message).await, JobOutcome::Done);
    }
    // The dead run's lease (a minute and more) still stands: the cancel's finalize job waits a
    // few seconds for it to save, then finishes without it.
    let finalize = h.receive().await.unwrap();
    assert!(finalize.body.contains("finalize"), "{}", finalize.body);
    let JobOutcome::Retry { retry_after: wait } = h.handle(&finalize).await else {
        panic!("the finalize job should wait for the leased chunk briefly");
    };
    assert!(wait <= Duration::from_secs(3), "{wait:?}");
    h.schedule_pass().await.unwrap();
    assert_eq!(h.batch(&created.id).await.status, BatchStatus::Cancelling);
    let again = h
        .queue
        .receive(1, wait + Duration::from_secs(1), VISIBILITY)
        .await
        .unwrap();
    assert_eq!(h.handle(&again[0]).await, JobOutcome::Done);
    let batch = h.batch(&created.id).await;
    assert_eq!(batch.status, BatchStatus::Cancelled);
    assert!(
        cancelled_at.elapsed() < Duration::from_secs(5),
        "{:?}",
        cancelled_at.elapsed()
    );
    // What was saved before the kill ran; nothing else.
    let results = assert_stopped_after(&h, &batch, &ids, &ids[..saved], "batch_cancelled").await;
    assert_eq!(results.not_run_with("batch_cancelled").len(), 30 - saved);
    each_called_once(&provider, &ids[..saved]);
    assert_result_files(&h, &batch).await;
    assert_cleaned_up(&h, &batch.id).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_worker_outliving_its_lease_cannot_add_to_a_cancelled_batch() {
    let (h, provider) = Harness::with_model(slow_settings(), Duration::from_millis(30));
    let ids = custom_ids(30, Some(4));
    let (created, rest, stalled) = start_slow_batch(&h, &ids).await;
    // Its lease runs out while it still runs; the cancel's finalization does not wait for it.
    h.clock.advance(Duration::from_secs(100));
    let batch_id = BatchId::new(&created.id);
    let cancelling = h.api.cancel_batch(&project(), &batch_id).await.unwrap();
    assert_eq!(cancelling.status, BatchStatus::Cancelling);
    let finalize = h.receive().await.unwrap();
    assert!(finalize.body.contains("finalize"), "{}", finalize.body);
    assert_eq!(h.handle(&finalize).await, JobOutcome::Done);
    let cancelled = h.batch(&created.id).await;
    assert_eq!(cancelled.status, BatchStatus::Cancelled);

    assert_eq!(stalled.await.unwrap(), JobOutcome::Done);
    h.settle(&rest[0], JobOutcome::Done).await;
    for message in &rest[1..] {
        assert_eq!(h.handle(message).await, JobOutcome::Done);
    }
    h.drain(Duration::from_secs(5)).await;
    h.schedule_pass().await.unwrap();
    let batch = h.batch(&created.id).await;
    assert_eq!(batch, cancelled, "nothing changes after the batch was finalized");
    let results = h.results(&batch).await;
    results.assert_each_once(&ids);
    assert_lines_well_formed(&results, "batch_cancelled");
    let ran = ran_ids(&results);
    assert_counts_and_usage(&batch, &ids, &ran);
    assert!(provider.total_calls() >= ran.len());
    assert_result_files(&h, &batch).await;
    assert_cleaned_up(&h, &batch.id).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_stalled_worker_cannot_count_lines_into_a_sealed_batch() {
    // Lines take long enough that the stalled run's next save comes after the finalizer sealed.
    let (h, provider) = Harness::with_model(slow_settings(), Duration::from_millis(400));
    let ids = custom_ids(30, Some(4));
    let (created, rest, stalled) = start_slow_batch(&h, &ids).await;
    // The finalizer seals, writes the files, and dies before recording `cancelled`.
    h.state
        .fail_writes(u32::MAX, |r| batch_record_with_status(r, "cancelled"));
    h.clock.advance(Duration::from_secs(100));
    let batch_id = BatchId::new(&created.id);
    h.api.cancel_batch(&project(), &batch_id).await.unwrap();
    let finalize = h.receive().await.unwrap();
    assert!(finalize.body.contains("finalize"), "{}", finalize.body);
    let result = h
        .worker
        .handle_until(&finalize.body, Instant::now() + Duration::from_secs(60))
        .await;
    assert!(matches!(result, JobOutcome::Retry { .. }), "{result:?}");
    assert!(h.state.injected() >= 1);
    let sealed = h.batch(&created.id).await;
    assert_eq!(sealed.status, BatchStatus::Cancelling);
    // The stalled run finishes its line now and tries to save it.
    assert_eq!(stalled.await.unwrap(), JobOutcome::Done);
    assert_eq!(
        h.batch(&created.id).await.request_counts,
        sealed.request_counts,
        "nothing is counted into a sealed batch"
    );
    h.state.clear_faults();
    h.settle(&rest[0], JobOutcome::Done).await;
    for message in &rest[1..] {
        assert_eq!(h.handle(message).await, JobOutcome::Done);
    }
    h.settle(
        &finalize,
        JobOutcome::Retry {
            retry_after: Duration::ZERO,
        },
    )
    .await;
    h.drain(Duration::from_secs(5)).await;
    h.schedule_pass().await.unwrap();
    let batch = h.batch(&created.id).await;
    assert_eq!(batch.status, BatchStatus::Cancelled);
    let results = h.results(&batch).await;
    results.assert_each_once(&ids);
    assert_lines_well_formed(&results, "batch_cancelled");
    let ran = ran_ids(&results);
    assert_counts_and_usage(&batch, &ids, &ran);
    assert!(
        provider.total_calls() > ran.len(),
        "the stalled run's last line was not counted"
    );
    assert_result_files(&h, &batch).await;
    assert_cleaned_up(&h, &batch.id).await;
}
