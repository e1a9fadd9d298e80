//! `/batch_inference` batches on the engine under duplicate deliveries, killed and stalled
//! workers, failed saves and racing finalizers, on the embedded adapters: every inference exactly
//! once — one stored record per succeeding item (the one its saved segment holds, and what the
//! batch counts; a lost save stores nothing), each item answered or reported failed once in the
//! polls, exact counters and usage.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use nimbus_integration_tests::batch_assertions::each_called_once;
use nimbus_integration_tests::batch_harness::{
    batch_record_with_status, custom_ids, project, settings, slow_settings, Harness, OnRepeat, ScriptedProvider, MODEL,
    VISIBILITY,
};
use nimbus_integration_tests::batch_inference_harness::{assert_each_inference_once, function_for, SubmittedBatch};
use nimbus_shared::batches::{PollQuery, PollStatus};
use nimbus_shared::openai::batches::{BatchObject, BatchStatus};
use nimbus_shared::ports::JobOutcome;
use nimbus_shared::ports::JobQueue;
use std::sync::Arc;
use std::time::Duration;
use tokio::time::Instant;
use uuid::Uuid;

async fn submit(h: &Harness, contents: &[String]) -> SubmittedBatch {
    h.submit_inference(&function_for(MODEL), contents, Some(Uuid::now_v7()))
        .await
}

/// Items counted so far (succeeded or failed).
fn counted(batch: &BatchObject) -> u64 {
    batch.request_counts.completed + batch.request_counts.failed
}

// Every inference once ------------------------------------------------------------------------------

#[tokio::test]
async fn happy_path_every_inference_once_with_exact_counts_and_usage() {
    let (h, provider) = Harness::with_model(settings(), Duration::from_millis(2));
    let contents = custom_ids(35, Some(7));
    let batch = submit(&h, &contents).await;
    assert_eq!(
        h.poll(batch.id(), PollQuery::default()).await.status,
        PollStatus::Pending
    );

    h.validate().await;
    assert_eq!(h.queue.len(), 4, "35 items in chunks of 10 → 4 chunk jobs");
    assert_eq!(
        h.poll(batch.id(), PollQuery::default()).await.status,
        PollStatus::Pending
    );
    let ended = h.run_inference_to_end(batch.id()).await;
    assert_eq!(ended.request_counts.failed, 5);
    assert_each_inference_once(&h, &batch).await;
    each_called_once(&provider, &contents);
    assert_eq!(provider.total_calls(), 35);

    // A later poller pass changes nothing.
    let report = h.schedule_pass().await.unwrap();
    assert_eq!((report.finalized, report.chunks_requeued, report.errors), (0, 0, 0));
    assert_eq!(h.inference_batch(batch.id()).await, ended);
}

// Duplicate deliveries ------------------------------------------------------------------------------

#[tokio::test]
async fn a_chunk_delivered_again_after_it_finished_stores_and_counts_nothing_more() {
    let (h, provider) = Harness::with_model(settings(), Duration::from_millis(2));
    let contents = custom_ids(20, Some(4));
    let batch = submit(&h, &contents).await;
    let validate = h.receive().await.unwrap();
    assert_eq!(h.handle(&validate).await, JobOutcome::Done);
    let deadline = Harness::deadline_after(Duration::from_secs(30));
    assert_eq!(h.worker.handle_until(&validate.body, deadline).await, JobOutcome::Done);
    assert_eq!(h.queue.len(), 2, "one job per chunk, not more");

    let first = h.receive().await.unwrap();
    assert_eq!(h.handle(&first).await, JobOutcome::Done);
    let after_first = h.inference_batch(batch.id()).await;
    assert_eq!(counted(&after_first), 10);
    for _ in 0..2 {
        assert_eq!(h.worker.handle_until(&first.body, deadline).await, JobOutcome::Done);
    }
    assert_eq!(
        h.inference_batch(batch.id()).await.request_counts,
        after_first.request_counts
    );
    assert_eq!(provider.total_calls(), 10);

    h.run_inference_to_end(batch.id()).await;
    assert_eq!(h.worker.handle_until(&first.body, deadline).await, JobOutcome::Done);
    assert_each_inference_once(&h, &batch).await;
    each_called_once(&provider, &contents);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_chunk_delivered_twice_at_once_stores_each_inference_once() {
    let (h, provider) = Harness::with_model(settings(), Duration::from_millis(20));
    let contents = custom_ids(20, Some(4));
    let batch = submit(&h, &contents).await;
    let validate = h.receive().await.unwrap();
    let deadline = Harness::deadline_after(Duration::from_secs(30));
    let (a, b) = h.run_twice_at_once(&validate, deadline).await;
    assert_eq!((a, b), (JobOutcome::Done, JobOutcome::Done));
    h.settle(&validate, JobOutcome::Done).await;
    assert_eq!(h.queue.len(), 2, "one job per chunk, not more");

    let chunk0 = h.receive().await.unwrap();
    let (a, b) = h.run_twice_at_once(&chunk0, deadline).await;
    assert!(a == JobOutcome::Done || b == JobOutcome::Done, "{a:?} {b:?}");
    h.settle(&chunk0, JobOutcome::Done).await;
    assert_eq!(counted(&h.inference_batch(batch.id()).await), 10);
    each_called_once(&provider, &contents[..10]);

    h.run_inference_to_end(batch.id()).await;
    assert_each_inference_once(&h, &batch).await;
    each_called_once(&provider, &contents);
}

// Killed and stalled workers ------------------------------------------------------------------------

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_worker_killed_mid_chunk_is_recovered_with_each_inference_once() {
    let (h, provider) = Harness::with_model(slow_settings(), Duration::from_millis(30));
    let contents = custom_ids(20, Some(5));
    let batch = submit(&h, &contents).await;
    let batch_id = batch.id().to_string();
    h.validate().await;
    let chunk0 = h.receive().await.unwrap();
    let chunk1 = h.receive().await.unwrap();

    let run = h.spawn_run(&chunk0);
    h.wait_for_saved(&batch_id, 0, 4, "two saved segments").await;
    run.abort();
    assert!(run.await.unwrap_err().is_cancelled(), "the worker was killed mid-chunk");
    tokio::time::sleep(Duration::from_millis(50)).await;
    let saved = usize::try_from(h.lines_done(&batch_id, 0).await).unwrap();
    assert!((4..10).contains(&saved), "killed mid-chunk, {saved} items saved");
    assert_eq!(counted(&h.inference_batch(batch.id()).await), saved as u64);
    h.queue.delete(&chunk0.receipt).await.unwrap();
    // A rerun answers differently: what counts is the record stored first.
    provider.on_repeat(OnRepeat::MoreTokens);

    assert_eq!(h.handle(&chunk1).await, JobOutcome::Done);
    h.clock.advance(Duration::from_secs(5));
    assert_eq!(
        h.schedule_pass().await.unwrap().chunks_requeued,
        0,
        "the chunk is leased"
    );
    h.clock.advance(Duration::from_secs(95));
    assert_eq!(h.schedule_pass().await.unwrap().chunks_requeued, 1);

    h.run_inference_to_end(batch.id()).await;
    assert_each_inference_once(&h, &batch).await;
    each_called_once(&provider, &contents[..saved]);
    each_called_once(&provider, &contents[10..]);
    for content in &contents[saved..10] {
        assert!((1..=2).contains(&provider.calls_for(content)), "{content}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_worker_outliving_its_lease_stores_nothing_twice() {
    let (h, provider) = Harness::with_model(slow_settings(), Duration::from_millis(30));
    provider.on_repeat(OnRepeat::MoreTokens);
    let contents = custom_ids(10, Some(4));
    let batch = submit(&h, &contents).await;
    h.validate().await;
    let chunk0 = h.receive().await.unwrap();
    let stalled = h.spawn_run(&chunk0);
    h.wait_for_saved(&batch.id().to_string(), 0, 2, "saved progress").await;
    // Its lease ran out as far as anyone can tell: a second run takes the chunk over, and both
    // run (and store) the same items.
    h.clock.advance(Duration::from_secs(100));
    let successor = h
        .worker
        .handle_until(&chunk0.body, Instant::now() + Duration::from_secs(60))
        .await;
    assert_eq!(successor, JobOutcome::Done);
    assert_eq!(stalled.await.unwrap(), JobOutcome::Done, "the stalled run gives up");
    h.settle(&chunk0, JobOutcome::Done).await;

    assert_each_inference_once(&h, &batch).await;
    for content in &contents {
        assert!((1..=2).contains(&provider.calls_for(content)), "{content}");
    }
}

// Failed saves: the lost segment's items run again --------------------------------------------------

/// Run chunk 0 of a 10-item batch one item at a time with its first progress save failing (its
/// records are in the lost segment only), then answer repeated calls `on_repeat` and run the
/// batch to its end. Returns the batch and how many provider calls the failed run made.
async fn rerun_after_a_failed_save(on_repeat: OnRepeat) -> (Harness, Arc<ScriptedProvider>, SubmittedBatch, usize) {
    let (h, provider) = Harness::with_model(slow_settings(), Duration::from_millis(5));
    let contents = custom_ids(10, Some(3));
    let batch = submit(&h, &contents).await;
    h.validate().await;
    let chunk0 = h.receive().await.unwrap();
    h.state.fail_writes(1, |r| {
        r.kind == "batch_chunk" && r.body["segments"].as_array().is_some_and(|s| !s.is_empty())
    });
    let result = h
        .worker
        .handle_until(&chunk0.body, Instant::now() + Duration::from_secs(60))
        .await;
    assert!(matches!(result, JobOutcome::Retry { retry_after: _ }), "{result:?}");
    assert_eq!(h.state.injected(), 1);
    assert_eq!(counted(&h.inference_batch(batch.id()).await), 0, "nothing was counted");
    let first_run_calls = provider.total_calls();
    assert!(first_run_calls >= 1, "the failed run answered items");
    let stored_before = h.episode_records(batch.episode.unwrap()).await.len();
    assert_eq!(stored_before, 0, "a lost segment's records are nowhere");

    provider.on_repeat(on_repeat);
    h.clock.advance(Duration::from_secs(100));
    h.settle(
        &chunk0,
        JobOutcome::Retry {
            retry_after: Duration::ZERO,
        },
    )
    .await;
    h.run_inference_to_end(batch.id()).await;
    assert_eq!(h.queue.receive(1, Duration::ZERO, VISIBILITY).await.unwrap().len(), 0);
    (h, provider, batch, first_run_calls)
}

#[tokio::test]
async fn an_item_run_again_after_a_failed_save_counts_its_rerun_once() {
    let (h, provider, batch, first_run_calls) = rerun_after_a_failed_save(OnRepeat::MoreTokens).await;
    assert_each_inference_once(&h, &batch).await;
    for content in &batch.contents {
        assert!((1..=2).contains(&provider.calls_for(content)), "{content}");
    }
    assert_eq!(provider.total_calls(), 10 + first_run_calls);
}

#[tokio::test]
async fn an_item_whose_rerun_fails_after_a_failed_save_is_one_failure() {
    let (h, provider, batch, first_run_calls) = rerun_after_a_failed_save(OnRepeat::Fail).await;
    // The lost run's answers count for nothing: an item whose rerun failed is a failure, once.
    let mut ok = Vec::new();
    let mut failed = Vec::new();
    for (content, id) in batch.contents.iter().zip(&batch.created.inference_ids) {
        let rerun = provider.calls_for(content) == 2;
        let record = h.records.get(&project(), *id).await.unwrap();
        if content.starts_with("fail-") || rerun {
            assert!(record.is_none(), "{content}");
            failed.push(*id);
        } else {
            assert!(record.is_some(), "{content}");
            ok.push(*id);
        }
    }
    assert!(
        failed.len() > batch.failing().len(),
        "some rerun failed ({first_run_calls} calls lost)"
    );
    let ended = h.inference_batch(batch.id()).await;
    assert_eq!(
        (ended.request_counts.completed, ended.request_counts.failed),
        (ok.len() as u64, failed.len() as u64)
    );
    let poll = h
        .poll(
            batch.id(),
            PollQuery {
                include_failures: true,
                ..PollQuery::default()
            },
        )
        .await;
    let answered: Vec<Uuid> = poll.inferences.unwrap().iter().map(|r| r.inference_id).collect();
    let reported: Vec<Uuid> = poll
        .failed_inferences
        .unwrap()
        .iter()
        .filter_map(|f| f.inference_id)
        .collect();
    assert_eq!((answered, reported), (ok, failed));
}

// Racing and dying finalizers -----------------------------------------------------------------------

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn two_pollers_finalizing_at_once_finish_the_batch_once() {
    let (h, provider) = Harness::with_model(settings(), Duration::from_millis(2));
    let contents = custom_ids(25, Some(6));
    let batch = submit(&h, &contents).await;
    h.state
        .fail_writes(u32::MAX, |r| batch_record_with_status(r, "finalizing"));
    h.validate().await;
    h.drain(Duration::from_secs(10)).await;
    assert!(h.state.injected() >= 1, "the worker tried to finalize");
    h.state.clear_faults();
    let pending = h.inference_batch(batch.id()).await;
    assert_eq!(pending.status, BatchStatus::InProgress);
    assert_eq!(counted(&pending), 25);
    assert_eq!(
        h.poll(batch.id(), PollQuery::default()).await.status,
        PollStatus::Pending
    );

    let (a, b) = tokio::join!(h.schedule_pass(), h.schedule_pass());
    let (a, b) = (a.unwrap(), b.unwrap());
    assert_eq!(
        a.finalized + b.finalized,
        1,
        "exactly one poller finalizes: {a:?} {b:?}"
    );
    assert_eq!(a.errors + b.errors, 0);
    assert_each_inference_once(&h, &batch).await;
    each_called_once(&provider, &contents);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn pollers_racing_the_last_chunk_finish_the_batch_once() {
    let (h, provider) = Harness::with_model(settings(), Duration::from_millis(10));
    let contents = custom_ids(20, Some(6));
    let batch = submit(&h, &contents).await;
    h.validate().await;
    let chunk0 = h.receive().await.unwrap();
    assert_eq!(h.handle(&chunk0).await, JobOutcome::Done);
    let chunk1 = h.receive().await.unwrap();

    let done = std::sync::atomic::AtomicBool::new(false);
    let poll = || async {
        loop {
            let last = done.load(std::sync::atomic::Ordering::SeqCst);
            assert_eq!(h.schedule_pass().await.unwrap().errors, 0);
            if last {
                return;
            }
            tokio::time::sleep(Duration::from_millis(3)).await;
        }
    };
    let work = async {
        let result = h.handle(&chunk1).await;
        done.store(true, std::sync::atomic::Ordering::SeqCst);
        result
    };
    let (result, _, _) = tokio::join!(work, poll(), poll());
    assert_eq!(result, JobOutcome::Done);
    assert_each_inference_once(&h, &batch).await;
    each_called_once(&provider, &contents);
}

#[tokio::test]
async fn a_finalizer_dying_before_recording_the_end_is_finished_once_after_its_lease() {
    let (h, provider) = Harness::with_model(settings(), Duration::from_millis(2));
    let contents = custom_ids(15, Some(4));
    let batch = submit(&h, &contents).await;
    // The finalizer writes the failures and dies: it records neither the end nor hands back its lease.
    h.state.fail_writes(u32::MAX, |r| {
        batch_record_with_status(r, "completed")
            || (batch_record_with_status(r, "finalizing") && r.body["finalize_lease_until_ms"] == 0)
    });
    h.validate().await;
    h.drain(Duration::from_secs(10)).await;
    assert!(h.state.injected() >= 1);
    h.state.clear_faults();
    assert_eq!(h.inference_batch(batch.id()).await.status, BatchStatus::Finalizing);
    assert_eq!(
        h.poll(batch.id(), PollQuery::default()).await.status,
        PollStatus::Pending
    );

    assert_eq!(
        h.schedule_pass().await.unwrap().finalized,
        0,
        "within the dead finalizer's lease"
    );
    h.clock.advance(Duration::from_secs(16 * 60));
    assert_eq!(h.schedule_pass().await.unwrap().finalized, 1);
    assert_each_inference_once(&h, &batch).await;
    each_called_once(&provider, &contents);
}
