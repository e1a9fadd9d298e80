//! The batch engine under redeliveries, lost messages, killed workers and run deadlines, on the
//! embedded adapters: every request line ends up exactly once in the output or error file, the
//! counters and usage are exact, and lines whose results were saved are never called again.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use nimbus_integration_tests::batch_assertions::{
    assert_cleaned_up, assert_completed_cleanly, assert_counts_and_usage, assert_lines_well_formed,
    assert_result_files, each_called_once, run_to_end_exactly_once,
};
use nimbus_integration_tests::batch_harness::{
    custom_ids, lines_for, settings, slow_settings, Harness, ScriptedProvider, MODEL, VISIBILITY,
};
use nimbus_shared::openai::batches::BatchStatus;
use nimbus_shared::ports::{JobOutcome, JobQueue};
use std::sync::Arc;
use std::time::Duration;
use tokio::time::Instant;

// Every line once ---------------------------------------------------------------------------------

#[tokio::test]
async fn happy_path_every_line_once_with_exact_counts_and_usage() {
    let (h, provider) = Harness::with_model(settings(), Duration::from_millis(2));
    let ids = custom_ids(35, Some(7));
    let created = h.create_batch(&lines_for(MODEL, &ids)).await;
    assert_eq!(created.status, BatchStatus::Validating);

    h.validate().await;
    let running = h.batch(&created.id).await;
    assert_eq!(running.status, BatchStatus::InProgress);
    assert_eq!(running.request_counts.total, 35);
    assert_eq!(h.queue.len(), 4, "35 lines in chunks of 10 → 4 chunk jobs");

    let batch = h.run_to_end(&created.id).await;
    assert_eq!(batch.status, BatchStatus::Completed);
    assert!(batch.completed_at.is_some() && batch.finalizing_at.is_some() && batch.in_progress_at.is_some());
    assert_counts_and_usage(&batch, &ids, &ids);
    assert_eq!(batch.request_counts.failed, 5);

    let results = h.results(&batch).await;
    results.assert_each_once(&ids);
    assert_eq!(results.output.len(), 30);
    assert_eq!(results.errors.len(), 5);
    assert_lines_well_formed(&results, "none");
    each_called_once(&provider, &ids);
    assert_eq!(provider.total_calls(), 35);
    assert_result_files(&h, &batch).await;
    assert_cleaned_up(&h, &batch.id).await;

    // A later poller pass changes nothing.
    let report = h.schedule_pass().await.unwrap();
    assert_eq!((report.finalized, report.chunks_requeued, report.errors), (0, 0, 0));
    assert_eq!(h.batch(&batch.id).await, batch);
    assert_result_files(&h, &batch).await;
}

// Duplicate and lost deliveries -------------------------------------------------------------------

#[tokio::test]
async fn a_chunk_delivered_twice_in_sequence_counts_once() {
    let (h, provider) = Harness::with_model(settings(), Duration::from_millis(2));
    let ids = custom_ids(20, Some(4));
    let created = h.create_batch(&lines_for(MODEL, &ids)).await;
    let validate = h.receive().await.unwrap();
    assert_eq!(h.handle(&validate).await, JobOutcome::Done);
    // The validation delivered again does not plan or enqueue anything twice.
    assert_eq!(
        h.worker
            .handle_until(&validate.body, Harness::deadline_after(Duration::from_secs(30)))
            .await,
        JobOutcome::Done
    );
    assert_eq!(h.queue.len(), 2, "one job per chunk, not more");
    assert_eq!(h.batch(&created.id).await.request_counts.total, 20);

    let first = h.receive().await.unwrap();
    assert_eq!(h.handle(&first).await, JobOutcome::Done);
    let after_first = h.batch(&created.id).await;
    assert_eq!(
        after_first.request_counts.completed + after_first.request_counts.failed,
        10
    );
    // Redelivered after it finished (the delete was lost): nothing runs, nothing counts.
    for _ in 0..2 {
        let again = h
            .worker
            .handle_until(&first.body, Harness::deadline_after(Duration::from_secs(30)))
            .await;
        assert_eq!(again, JobOutcome::Done);
    }
    assert_eq!(h.batch(&created.id).await.request_counts, after_first.request_counts);
    assert_eq!(provider.total_calls(), 10);

    let batch = h.run_to_end(&created.id).await;
    assert_eq!(batch.status, BatchStatus::Completed);
    // And once more after the batch finished and was cleaned up.
    assert_eq!(
        h.worker
            .handle_until(&first.body, Harness::deadline_after(Duration::from_secs(30)))
            .await,
        JobOutcome::Done
    );
    assert_eq!(h.batch(&created.id).await, batch);

    assert_counts_and_usage(&batch, &ids, &ids);
    let results = h.results(&batch).await;
    results.assert_each_once(&ids);
    assert_lines_well_formed(&results, "none");
    each_called_once(&provider, &ids);
    assert_eq!(provider.total_calls(), 20);
    assert_result_files(&h, &batch).await;
    assert_cleaned_up(&h, &batch.id).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_chunk_delivered_twice_at_once_runs_once() {
    let (h, provider) = Harness::with_model(settings(), Duration::from_millis(20));
    let ids = custom_ids(20, Some(4));
    let created = h.create_batch(&lines_for(MODEL, &ids)).await;

    // The validation delivered twice at once: one plan, one job per chunk.
    let validate = h.receive().await.unwrap();
    let deadline = Harness::deadline_after(Duration::from_secs(30));
    let (a, b) = h.run_twice_at_once(&validate, deadline).await;
    assert_eq!((a, b), (JobOutcome::Done, JobOutcome::Done));
    h.settle(&validate, JobOutcome::Done).await;
    assert_eq!(h.queue.len(), 2, "one job per chunk, not more");

    let chunk0 = h.receive().await.unwrap();
    let (a, b) = h.run_twice_at_once(&chunk0, deadline).await;
    // One run takes the chunk; the other finds it leased (retry later) or already done.
    assert!(
        a == JobOutcome::Done || b == JobOutcome::Done,
        "one of the runs finishes the chunk: {a:?} {b:?}"
    );
    h.settle(&chunk0, JobOutcome::Done).await;
    let chunk = h.chunk(&created.id, 0).await.unwrap();
    assert_eq!(chunk["done"], true);
    assert_eq!(chunk["lines_done"], 10);
    let after = h.batch(&created.id).await;
    assert_eq!(after.request_counts.completed + after.request_counts.failed, 10);
    each_called_once(&provider, &ids[..10]);
    assert_eq!(provider.total_calls(), 10);

    run_to_end_exactly_once(&h, &created.id, &ids, &provider).await;
}

#[tokio::test]
async fn lost_queue_messages_are_enqueued_again_by_the_poller() {
    let (h, provider) = Harness::with_model(settings(), Duration::from_millis(2));
    let ids = custom_ids(25, Some(5));
    let created = h.create_batch(&lines_for(MODEL, &ids)).await;

    // The validation message is lost.
    let validate = h.receive().await.unwrap();
    h.queue.delete(&validate.receipt).await.unwrap();
    let report = h.schedule_pass().await.unwrap();
    assert_eq!(report.validations_requeued, 0, "not before requeue_after");
    h.clock.advance(Duration::from_secs(2));
    let report = h.schedule_pass().await.unwrap();
    assert_eq!(report.validations_requeued, 1);
    let report = h.schedule_pass().await.unwrap();
    assert_eq!(report.validations_requeued, 0);
    h.validate().await;

    // Two of the three chunk messages are lost.
    assert_eq!(h.queue.len(), 3);
    for _ in 0..2 {
        let message = h.receive().await.unwrap();
        h.queue.delete(&message.receipt).await.unwrap();
    }
    h.drain(Duration::from_secs(5)).await;
    assert_eq!(h.batch(&created.id).await.status, BatchStatus::InProgress);
    h.clock.advance(Duration::from_secs(2));
    let report = h.schedule_pass().await.unwrap();
    assert_eq!(report.chunks_requeued, 2);
    run_to_end_exactly_once(&h, &created.id, &ids, &provider).await;
}

#[tokio::test]
async fn a_pass_reads_no_chunk_of_a_running_batch_before_one_could_be_stuck() {
    let mut s = settings();
    s.requeue_after = Duration::from_secs(60);
    let (h, provider) = Harness::with_model(s, Duration::from_millis(2));
    let ids = custom_ids(25, Some(5));
    let created = h.create_batch(&lines_for(MODEL, &ids)).await;
    h.validate().await;
    let lost = h.receive().await.unwrap();
    h.queue.delete(&lost.receipt).await.unwrap();
    for _ in 0..2 {
        let message = h.receive().await.unwrap();
        assert_eq!(h.handle(&message).await, JobOutcome::Done);
        h.queue.delete(&message.receipt).await.unwrap();
    }

    // Every chunk was enqueued less than requeue_after ago: a pass reads the batch, not its
    // chunks (#26 E16: each pass read every chunk record for as long as the batch ran).
    let before = h.state.reads("list batch_chunk");
    for _ in 0..3 {
        h.clock.advance(Duration::from_secs(15));
        let report = h.schedule_pass().await.unwrap();
        assert_eq!((report.active_batches, report.chunks_requeued), (1, 0));
    }
    assert_eq!(h.state.reads("list batch_chunk"), before, "no chunk listed yet");

    // Past requeue_after the lost chunk is found and enqueued again.
    h.clock.advance(Duration::from_secs(16));
    let report = h.schedule_pass().await.unwrap();
    assert_eq!(report.chunks_requeued, 1);
    assert!(h.state.reads("list batch_chunk") > before);
    run_to_end_exactly_once(&h, &created.id, &ids, &provider).await;
}

// Killed and stalled workers ----------------------------------------------------------------------

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_worker_killed_mid_chunk_is_recovered_without_rerunning_saved_lines() {
    let provider = ScriptedProvider::new(Duration::from_millis(30));
    let mut s = settings();
    s.line_concurrency = 1; // saved progress is a prefix of the chunk, at most one line in flight
    let h = Harness::new(s, &[(MODEL, Arc::clone(&provider))]);
    let ids = custom_ids(20, Some(5));
    let created = h.create_batch(&lines_for(MODEL, &ids)).await;
    h.validate().await;
    let chunk0 = h.receive().await.unwrap();
    let chunk1 = h.receive().await.unwrap();
    assert!(chunk0.body.contains("\"chunk\":0"), "{}", chunk0.body);

    let run = h.spawn_run(&chunk0);
    h.wait_for_saved(&created.id, 0, 4, "two saved segments").await;
    run.abort();
    assert!(run.await.unwrap_err().is_cancelled(), "the worker was killed mid-chunk");
    tokio::time::sleep(Duration::from_millis(50)).await;
    let saved = usize::try_from(h.lines_done(&created.id, 0).await).unwrap();
    assert!((4..10).contains(&saved), "killed mid-chunk, {saved} lines saved");
    let counts = h.batch(&created.id).await.request_counts;
    assert_eq!(
        counts.completed + counts.failed,
        saved as u64,
        "exactly the saved lines count"
    );
    // The delivery is lost with the worker (say it went to the dead-letter queue).
    h.queue.delete(&chunk0.receipt).await.unwrap();

    assert_eq!(h.handle(&chunk1).await, JobOutcome::Done);
    assert_eq!(h.batch(&created.id).await.status, BatchStatus::InProgress);

    // The dead run's lease still holds the chunk: the poller leaves it alone (though it was
    // enqueued longer than requeue_after ago).
    h.clock.advance(Duration::from_secs(5));
    let report = h.schedule_pass().await.unwrap();
    assert_eq!(report.chunks_requeued, 0, "the chunk is leased");
    assert!(h.queue.receive(1, Duration::ZERO, VISIBILITY).await.unwrap().is_empty());

    // Past the lease (60 s run + 30 s margin), the poller enqueues it once.
    h.clock.advance(Duration::from_secs(95));
    let report = h.schedule_pass().await.unwrap();
    assert_eq!(report.chunks_requeued, 1);
    let report = h.schedule_pass().await.unwrap();
    assert_eq!(report.chunks_requeued, 0, "not enqueued again right away");

    let batch = h.run_to_end(&created.id).await;
    assert_completed_cleanly(&h, &batch, &ids).await;

    // Lines saved before the kill ran once. Lines after them (finished but not yet saved, or in
    // flight at the kill) ran once or twice, never more.
    each_called_once(&provider, &ids[..saved]);
    each_called_once(&provider, &ids[10..]);
    let rerun: Vec<&String> = ids[saved..10].iter().filter(|id| provider.calls_for(id) != 1).collect();
    for id in &rerun {
        assert_eq!(provider.calls_for(id), 2, "{id}");
    }
    assert_eq!(provider.total_calls(), 20 + rerun.len());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_worker_outliving_its_lease_cannot_save_over_its_successor() {
    let (h, provider) = Harness::with_model(slow_settings(), Duration::from_millis(30));
    let ids = custom_ids(10, Some(4));
    let created = h.create_batch(&lines_for(MODEL, &ids)).await;
    h.validate().await;
    let chunk0 = h.receive().await.unwrap();
    let stalled = h.spawn_run(&chunk0);
    h.wait_for_saved(&created.id, 0, 2, "saved progress").await;
    // The first run is still going, but as far as anyone can tell its lease ran out: a second
    // run takes the chunk over.
    h.clock.advance(Duration::from_secs(100));
    let successor = h
        .worker
        .handle_until(&chunk0.body, Instant::now() + Duration::from_secs(60))
        .await;
    assert_eq!(successor, JobOutcome::Done);
    assert_eq!(stalled.await.unwrap(), JobOutcome::Done, "the stalled run gives up");
    h.settle(&chunk0, JobOutcome::Done).await;

    let batch = h.batch(&created.id).await;
    assert_completed_cleanly(&h, &batch, &ids).await;
    for id in &ids {
        assert!((1..=2).contains(&provider.calls_for(id)), "{id}");
    }
}

// Run deadlines -----------------------------------------------------------------------------------

#[tokio::test]
async fn a_run_reaching_its_deadline_hands_over_and_the_next_run_finishes() {
    let provider = ScriptedProvider::new(Duration::from_millis(150));
    let mut s = settings();
    s.line_concurrency = 2;
    s.checkpoint_interval = Duration::from_secs(10); // one save, at the end of the run
    let h = Harness::new(s, &[(MODEL, Arc::clone(&provider))]);
    let ids = custom_ids(10, Some(3));
    let created = h.create_batch(&lines_for(MODEL, &ids)).await;
    h.validate().await;
    let chunk0 = h.receive().await.unwrap();

    // Lines may start for 600 ms: 2 at a time, 150 ms each → at most 8 of the 10.
    let result = h
        .worker
        .handle_until(&chunk0.body, Harness::deadline_after(Duration::from_millis(600)))
        .await;
    assert_eq!(
        result,
        JobOutcome::Retry {
            retry_after: Duration::ZERO
        }
    );
    let saved = h.lines_done(&created.id, 0).await;
    assert!(
        (1..=8).contains(&saved),
        "the first run stopped mid-chunk ({saved} saved)"
    );
    let chunk = h.chunk(&created.id, 0).await.unwrap();
    assert!(chunk["lease"].is_null(), "the run handed the chunk back: {chunk}");
    assert_eq!(chunk["done"], false);
    assert_eq!(provider.total_calls() as u64, saved, "no line was started and dropped");
    let counts = h.batch(&created.id).await.request_counts;
    assert_eq!(counts.completed + counts.failed, saved);

    h.settle(&chunk0, result).await;
    run_to_end_exactly_once(&h, &created.id, &ids, &provider).await;
}

#[tokio::test]
async fn a_run_too_close_to_its_deadline_starts_nothing() {
    let (h, provider) = Harness::with_model(settings(), Duration::from_millis(2));
    let ids = custom_ids(10, None);
    let created = h.create_batch(&lines_for(MODEL, &ids)).await;
    h.validate().await;
    let chunk0 = h.receive().await.unwrap();
    let result = h
        .worker
        .handle_until(&chunk0.body, Instant::now() + Duration::from_secs(20))
        .await;
    assert_eq!(
        result,
        JobOutcome::Retry {
            retry_after: Duration::ZERO
        }
    );
    assert_eq!(provider.total_calls(), 0);
    assert!(h.chunk(&created.id, 0).await.unwrap()["lease"].is_null());
    h.settle(&chunk0, result).await;
    let batch = h.run_to_end(&created.id).await;
    assert_counts_and_usage(&batch, &ids, &ids);
    h.results(&batch).await.assert_each_once(&ids);
    each_called_once(&provider, &ids);
}

// Failed saves ------------------------------------------------------------------------------------

#[tokio::test]
async fn a_segment_whose_save_fails_is_run_again_and_counted_once() {
    let provider = ScriptedProvider::new(Duration::from_millis(5));
    let mut s = settings();
    s.line_concurrency = 1;
    let h = Harness::new(s, &[(MODEL, Arc::clone(&provider))]);
    let ids = custom_ids(10, Some(3));
    let created = h.create_batch(&lines_for(MODEL, &ids)).await;
    h.validate().await;
    let chunk0 = h.receive().await.unwrap();
    // The first progress write fails after the segment's result blobs were written.
    h.state.fail_writes(1, |r| {
        r.kind == "batch_chunk" && r.body["segments"].as_array().is_some_and(|s| !s.is_empty())
    });
    let result = h
        .worker
        .handle_until(&chunk0.body, Instant::now() + Duration::from_secs(60))
        .await;
    assert!(matches!(result, JobOutcome::Retry { .. }), "{result:?}");
    assert_eq!(h.state.injected(), 1);
    assert_eq!(h.lines_done(&created.id, 0).await, 0, "nothing was counted");
    let counts = h.batch(&created.id).await.request_counts;
    assert_eq!((counts.completed, counts.failed), (0, 0));
    let first_run_calls = provider.total_calls();
    assert!(first_run_calls >= 1);

    // Whatever lease the failed run left has run out by now.
    h.clock.advance(Duration::from_secs(100));
    h.settle(
        &chunk0,
        JobOutcome::Retry {
            retry_after: Duration::ZERO,
        },
    )
    .await;
    let batch = h.run_to_end(&created.id).await;
    assert_completed_cleanly(&h, &batch, &ids).await;
    // Lines of the lost segment ran again; the others once.
    for id in &ids {
        assert!((1..=2).contains(&provider.calls_for(id)), "{id}");
    }
    assert_eq!(provider.total_calls(), 10 + first_run_calls);
}

#[tokio::test]
async fn a_save_that_loses_to_another_chunk_reads_the_batch_again_not_its_chunk() {
    let mut s = settings();
    s.checkpoint_lines = 10; // the chunk's one save, at its end
    let (h, provider) = Harness::with_model(s, Duration::from_millis(2));
    let ids = custom_ids(10, None);
    let created = h.create_batch(&lines_for(MODEL, &ids)).await;
    h.validate().await;
    let chunk0 = h.receive().await.unwrap();
    // Two other chunks' saves move the batch just before this run's save, twice.
    h.state.race_batch_writes(2);
    let before = h.state.reads("get batch_chunk");
    let result = h.handle(&chunk0).await;
    assert_eq!(result, JobOutcome::Done);
    // #26 E16: each lost write read the chunk again too (1 + 2 reads).
    assert_eq!(
        h.state.reads("get batch_chunk") - before,
        1,
        "only the lease reads the chunk: the lost writes were the batch's"
    );
    run_to_end_exactly_once(&h, &created.id, &ids, &provider).await;
}
