//! The batch engine under crashes, redeliveries, races and timeouts, on the embedded adapters:
//! whatever happens, every request line ends up exactly once in the output or error file, the
//! counters and usage are exact, and lines whose results were saved are never called again.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use nimbus_integration_tests::batch_harness::{
    batch_record_with_status, custom_ids, lines_for, settings, tokens_for, BatchResults, Harness, ScriptedProvider,
    PROJECT, VISIBILITY,
};
use nimbus_shared::batches::{BatchesError, JobResult, ListBatches};
use nimbus_shared::openai::batches::{BatchObject, BatchStatus, RequestCounts};
use nimbus_shared::ports::JobQueue;
use std::collections::{BTreeMap, HashMap};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;
use tokio::time::Instant;

const MODEL: &str = "scripted";

fn is_failing(id: &str) -> bool {
    id.starts_with("fail-")
}

/// Counts and usage a finished batch must show when every line of `ran` ran once and the other
/// lines of `all` never ran.
fn assert_counts_and_usage(batch: &BatchObject, all: &[String], ran: &[String]) {
    let succeeded: Vec<&String> = ran.iter().filter(|id| !is_failing(id)).collect();
    let completed = succeeded.len() as u64;
    assert_eq!(
        batch.request_counts,
        RequestCounts {
            total: all.len() as u64,
            completed,
            failed: all.len() as u64 - completed,
        },
        "request_counts of {}",
        batch.id
    );
    let (input, output) = succeeded.iter().fold((0, 0), |(i, o), id| {
        let (p, c) = tokens_for(id);
        (i + p, o + c)
    });
    assert_eq!(batch.usage.input_tokens, input, "usage.input_tokens");
    assert_eq!(batch.usage.output_tokens, output, "usage.output_tokens");
    assert_eq!(batch.usage.total_tokens, input + output, "usage.total_tokens");
}

/// Output lines are 200s echoing their own custom_id; provider failures are 502 error lines;
/// lines that never ran carry `code` and no response.
fn assert_lines_well_formed(results: &BatchResults, not_run_code: &str) {
    for line in &results.output {
        let id = line["custom_id"].as_str().unwrap();
        assert!(!is_failing(id), "{id} should have failed: {line}");
        assert_eq!(line["response"]["status_code"], 200, "{line}");
        assert_eq!(
            line["response"]["body"]["choices"][0]["message"]["content"],
            format!("echo:{id}"),
            "the answer belongs to its own line: {line}"
        );
        assert!(line["error"].is_null(), "{line}");
        assert!(line["id"].as_str().unwrap().starts_with("batch_req_"), "{line}");
    }
    for line in &results.errors {
        let id = line["custom_id"].as_str().unwrap();
        if line["response"].is_null() {
            assert_eq!(line["error"]["code"], not_run_code, "{line}");
        } else {
            assert!(is_failing(id), "{id} should have succeeded: {line}");
            assert_eq!(line["response"]["status_code"], 502, "{line}");
            assert!(line["response"]["body"]["error"]["message"].is_string(), "{line}");
            assert!(line["error"].is_null(), "{line}");
        }
    }
}

/// The ids that appear in the results with a response (they ran), in custom_id order.
fn ran_ids(results: &BatchResults) -> Vec<String> {
    let mut ran: Vec<String> = results
        .output
        .iter()
        .chain(&results.errors)
        .filter(|l| !l["response"].is_null())
        .map(|l| l["custom_id"].as_str().unwrap().to_owned())
        .collect();
    ran.sort();
    ran
}

fn sorted(ids: &[String]) -> Vec<String> {
    let mut ids = ids.to_vec();
    ids.sort();
    ids
}

/// The engine left nothing behind for a finished batch: no chunk records, no active marker.
async fn assert_cleaned_up(h: &Harness, batch_id: &str) {
    assert_eq!(h.count_records("batch_chunk", batch_id).await, 0, "chunk records left");
    assert_eq!(
        h.count_records("batch_active", "_active").await,
        0,
        "active marker left"
    );
}

/// Exactly one output and at most one error file exist for the batch, and they are the ones the
/// batch names.
async fn assert_result_files(h: &Harness, batch: &BatchObject) {
    let files = h.result_files(&batch.id).await;
    let mut names: Vec<(String, String)> = files.iter().map(|f| (f.filename.clone(), f.id.clone())).collect();
    names.sort();
    let mut expected = Vec::new();
    if let Some(id) = &batch.error_file_id {
        expected.push((format!("{}_error.jsonl", batch.id), id.clone()));
    }
    if let Some(id) = &batch.output_file_id {
        expected.push((format!("{}_output.jsonl", batch.id), id.clone()));
    }
    assert_eq!(names, expected, "result files of {}", batch.id);
}

fn each_called_once(provider: &ScriptedProvider, ids: &[String]) {
    for id in ids {
        assert_eq!(provider.calls_for(id), 1, "provider calls for {id}");
    }
}

// 1. ------------------------------------------------------------------------------------------

#[tokio::test]
async fn happy_path_every_line_once_with_exact_counts_and_usage() {
    let provider = ScriptedProvider::new(Duration::from_millis(2));
    let h = Harness::new(settings(), &[(MODEL, Arc::clone(&provider))]);
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
    let report = h.poller.run_once().await.unwrap();
    assert_eq!((report.finalized, report.chunks_requeued, report.errors), (0, 0, 0));
    assert_eq!(h.batch(&batch.id).await, batch);
    assert_result_files(&h, &batch).await;
}

// 2. ------------------------------------------------------------------------------------------

#[tokio::test]
async fn a_chunk_delivered_twice_in_sequence_counts_once() {
    let provider = ScriptedProvider::new(Duration::from_millis(2));
    let h = Harness::new(settings(), &[(MODEL, Arc::clone(&provider))]);
    let ids = custom_ids(20, Some(4));
    let created = h.create_batch(&lines_for(MODEL, &ids)).await;
    let validate = h.receive().await.unwrap();
    assert_eq!(h.handle(&validate).await, JobResult::Done);
    // The validation delivered again does not plan or enqueue anything twice.
    assert_eq!(
        h.worker
            .handle_until(&validate.body, Harness::deadline_after(Duration::from_secs(30)))
            .await,
        JobResult::Done
    );
    assert_eq!(h.queue.len(), 2, "one job per chunk, not more");
    assert_eq!(h.batch(&created.id).await.request_counts.total, 20);

    let first = h.receive().await.unwrap();
    assert_eq!(h.handle(&first).await, JobResult::Done);
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
        assert_eq!(again, JobResult::Done);
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
        JobResult::Done
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
    let provider = ScriptedProvider::new(Duration::from_millis(20));
    let h = Harness::new(settings(), &[(MODEL, Arc::clone(&provider))]);
    let ids = custom_ids(20, Some(4));
    let created = h.create_batch(&lines_for(MODEL, &ids)).await;

    // The validation delivered twice at once: one plan, one job per chunk.
    let validate = h.receive().await.unwrap();
    let deadline = Harness::deadline_after(Duration::from_secs(30));
    let (a, b) = tokio::join!(
        h.worker.handle_until(&validate.body, deadline),
        h.worker.handle_until(&validate.body, deadline)
    );
    assert_eq!((a, b), (JobResult::Done, JobResult::Done));
    h.settle(&validate, JobResult::Done).await;
    assert_eq!(h.queue.len(), 2, "one job per chunk, not more");

    let chunk0 = h.receive().await.unwrap();
    let (a, b) = tokio::join!(
        h.worker.handle_until(&chunk0.body, deadline),
        h.worker.handle_until(&chunk0.body, deadline)
    );
    // One run takes the chunk; the other finds it leased (retry later) or already done.
    assert!(
        a == JobResult::Done || b == JobResult::Done,
        "one of the runs finishes the chunk: {a:?} {b:?}"
    );
    h.settle(&chunk0, JobResult::Done).await;
    let chunk = h.chunk(&created.id, 0).await.unwrap();
    assert_eq!(chunk["done"], true);
    assert_eq!(chunk["lines_done"], 10);
    let after = h.batch(&created.id).await;
    assert_eq!(after.request_counts.completed + after.request_counts.failed, 10);
    each_called_once(&provider, &ids[..10]);
    assert_eq!(provider.total_calls(), 10);

    let batch = h.run_to_end(&created.id).await;
    assert_eq!(batch.status, BatchStatus::Completed);
    assert_counts_and_usage(&batch, &ids, &ids);
    let results = h.results(&batch).await;
    results.assert_each_once(&ids);
    assert_lines_well_formed(&results, "none");
    each_called_once(&provider, &ids);
    assert_result_files(&h, &batch).await;
}

// 3. ------------------------------------------------------------------------------------------

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

    let worker = h.worker.clone();
    let body = chunk0.body.clone();
    let run = tokio::spawn(async move {
        worker
            .handle_until(&body, Instant::now() + Duration::from_secs(60))
            .await
    });
    h.wait_until(Duration::from_secs(5), "two saved segments", || async {
        h.lines_done(&created.id, 0).await >= 4
    })
    .await;
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

    assert_eq!(h.handle(&chunk1).await, JobResult::Done);
    assert_eq!(h.batch(&created.id).await.status, BatchStatus::InProgress);

    // The dead run's lease still holds the chunk: the poller leaves it alone (though it was
    // enqueued longer than requeue_after ago).
    h.clock.advance(Duration::from_secs(5));
    let report = h.poller.run_once().await.unwrap();
    assert_eq!(report.chunks_requeued, 0, "the chunk is leased");
    assert!(h.queue.receive(1, Duration::ZERO, VISIBILITY).await.unwrap().is_empty());

    // Past the lease (60 s run + 30 s margin), the poller enqueues it once.
    h.clock.advance(Duration::from_secs(95));
    let report = h.poller.run_once().await.unwrap();
    assert_eq!(report.chunks_requeued, 1);
    let report = h.poller.run_once().await.unwrap();
    assert_eq!(report.chunks_requeued, 0, "not enqueued again right away");

    let batch = h.run_to_end(&created.id).await;
    assert_eq!(batch.status, BatchStatus::Completed);
    assert_counts_and_usage(&batch, &ids, &ids);
    let results = h.results(&batch).await;
    results.assert_each_once(&ids);
    assert_lines_well_formed(&results, "none");
    assert_result_files(&h, &batch).await;
    assert_cleaned_up(&h, &batch.id).await;

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

// 4. ------------------------------------------------------------------------------------------

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
    assert_eq!(result, JobResult::RetryAfter(Duration::ZERO));
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
    let batch = h.run_to_end(&created.id).await;
    assert_eq!(batch.status, BatchStatus::Completed);
    assert_counts_and_usage(&batch, &ids, &ids);
    let results = h.results(&batch).await;
    results.assert_each_once(&ids);
    assert_lines_well_formed(&results, "none");
    each_called_once(&provider, &ids);
    assert_result_files(&h, &batch).await;
}

#[tokio::test]
async fn a_run_too_close_to_its_deadline_starts_nothing() {
    let provider = ScriptedProvider::new(Duration::from_millis(2));
    let h = Harness::new(settings(), &[(MODEL, Arc::clone(&provider))]);
    let ids = custom_ids(10, None);
    let created = h.create_batch(&lines_for(MODEL, &ids)).await;
    h.validate().await;
    let chunk0 = h.receive().await.unwrap();
    let result = h
        .worker
        .handle_until(&chunk0.body, Instant::now() + Duration::from_secs(20))
        .await;
    assert_eq!(result, JobResult::RetryAfter(Duration::ZERO));
    assert_eq!(provider.total_calls(), 0);
    assert!(h.chunk(&created.id, 0).await.unwrap()["lease"].is_null());
    h.settle(&chunk0, result).await;
    let batch = h.run_to_end(&created.id).await;
    assert_counts_and_usage(&batch, &ids, &ids);
    h.results(&batch).await.assert_each_once(&ids);
    each_called_once(&provider, &ids);
}

// 5. ------------------------------------------------------------------------------------------

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn two_pollers_finalizing_at_once_write_one_set_of_files() {
    let provider = ScriptedProvider::new(Duration::from_millis(2));
    let h = Harness::new(settings(), &[(MODEL, Arc::clone(&provider))]);
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

    let (a, b) = tokio::join!(h.poller.run_once(), h.poller.run_once());
    let (a, b) = (a.unwrap(), b.unwrap());
    // (A pass also counts a batch another finalizer finished while it looked: 1 or 2.)
    assert!(a.finalized + b.finalized >= 1, "a poller finalizes: {a:?} {b:?}");
    assert_eq!(a.errors + b.errors, 0);

    let batch = h.batch(&created.id).await;
    assert_eq!(batch.status, BatchStatus::Completed);
    assert_counts_and_usage(&batch, &ids, &ids);
    let results = h.results(&batch).await;
    results.assert_each_once(&ids);
    assert_lines_well_formed(&results, "none");
    assert!(batch.output_file_id.is_some() && batch.error_file_id.is_some());
    assert_result_files(&h, &batch).await;
    assert_cleaned_up(&h, &batch.id).await;
    each_called_once(&provider, &ids);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn pollers_racing_the_last_chunk_write_one_set_of_files() {
    let provider = ScriptedProvider::new(Duration::from_millis(10));
    let h = Harness::new(settings(), &[(MODEL, Arc::clone(&provider))]);
    let ids = custom_ids(20, Some(6));
    let created = h.create_batch(&lines_for(MODEL, &ids)).await;
    h.validate().await;
    let chunk0 = h.receive().await.unwrap();
    assert_eq!(h.handle(&chunk0).await, JobResult::Done);
    let chunk1 = h.receive().await.unwrap();

    let done = AtomicBool::new(false);
    let poll = || async {
        loop {
            let last = done.load(Ordering::SeqCst);
            let report = h.poller.run_once().await.unwrap();
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
    assert_eq!(result, JobResult::Done);

    let batch = h.batch(&created.id).await;
    assert_eq!(batch.status, BatchStatus::Completed);
    assert_counts_and_usage(&batch, &ids, &ids);
    let results = h.results(&batch).await;
    results.assert_each_once(&ids);
    assert_lines_well_formed(&results, "none");
    assert_result_files(&h, &batch).await;
    assert_cleaned_up(&h, &batch.id).await;
    each_called_once(&provider, &ids);
}

/// Run a batch whose finalizer writes the result files and then fails to record the final
/// status (`crash`: nor can it hand its finalize lease back, as when the process dies).
async fn finalize_with_lost_status_write(crash: bool) -> (Harness, Arc<ScriptedProvider>, Vec<String>, String) {
    let provider = ScriptedProvider::new(Duration::from_millis(2));
    let h = Harness::new(settings(), &[(MODEL, Arc::clone(&provider))]);
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
    let report = h.poller.run_once().await.unwrap();
    assert_eq!(report.finalized, 0);
    assert_eq!(h.batch(&batch_id).await.status, BatchStatus::Finalizing);

    // After it, the poller finishes it with the same files.
    h.clock.advance(Duration::from_secs(16 * 60));
    let report = h.poller.run_once().await.unwrap();
    assert_eq!(report.finalized, 1);
    assert_finished_with_files(&h, &provider, &ids, &batch_id, &before).await;
}

#[tokio::test]
async fn a_finalizer_failing_after_writing_the_files_is_finished_at_once_with_the_same_files() {
    let (h, provider, ids, batch_id) = finalize_with_lost_status_write(false).await;
    let before = result_file_ids(&h, &batch_id).await;
    assert_eq!(before.len(), 2, "output and error file written before the failure");
    // The failed finalizer handed its lease back: the next poller pass finishes it.
    let report = h.poller.run_once().await.unwrap();
    assert_eq!(report.finalized, 1);
    assert_finished_with_files(&h, &provider, &ids, &batch_id, &before).await;
}

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
    assert!(matches!(result, JobResult::RetryAfter(_)), "{result:?}");
    assert_eq!(h.state.injected(), 1);
    assert_eq!(h.lines_done(&created.id, 0).await, 0, "nothing was counted");
    let counts = h.batch(&created.id).await.request_counts;
    assert_eq!((counts.completed, counts.failed), (0, 0));
    let first_run_calls = provider.total_calls();
    assert!(first_run_calls >= 1);

    // Whatever lease the failed run left has run out by now.
    h.clock.advance(Duration::from_secs(100));
    h.settle(&chunk0, JobResult::RetryAfter(Duration::ZERO)).await;
    let batch = h.run_to_end(&created.id).await;
    assert_eq!(batch.status, BatchStatus::Completed);
    assert_counts_and_usage(&batch, &ids, &ids);
    let results = h.results(&batch).await;
    results.assert_each_once(&ids);
    assert_lines_well_formed(&results, "none");
    assert_result_files(&h, &batch).await;
    assert_cleaned_up(&h, &batch.id).await;
    // Lines of the lost segment ran again; the others once.
    for id in &ids {
        assert!((1..=2).contains(&provider.calls_for(id)), "{id}");
    }
    assert_eq!(provider.total_calls(), 10 + first_run_calls);
}

// 6. ------------------------------------------------------------------------------------------

/// Start chunk 0 of a 3-chunk batch (30 lines) on a slow model and return once some of its
/// lines are saved, with the three chunk deliveries and the task running the first.
async fn start_slow_batch(
    h: &Harness,
    ids: &[String],
) -> (
    BatchObject,
    Vec<nimbus_shared::ports::QueueMessage>,
    tokio::task::JoinHandle<JobResult>,
) {
    let created = h.create_batch(&lines_for(MODEL, ids)).await;
    h.validate().await;
    let chunk0 = h.receive().await.unwrap();
    let rest = vec![chunk0.clone(), h.receive().await.unwrap(), h.receive().await.unwrap()];
    let worker = h.worker.clone();
    let run = tokio::spawn(async move {
        worker
            .handle_until(&chunk0.body, Instant::now() + Duration::from_secs(60))
            .await
    });
    h.wait_until(Duration::from_secs(5), "saved progress", || async {
        h.lines_done(&created.id, 0).await >= 2
    })
    .await;
    (created, rest, run)
}

fn slow_settings() -> nimbus_shared::batches::BatchSettings {
    let mut s = settings();
    s.line_concurrency = 1;
    s
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
    let provider = ScriptedProvider::new(Duration::from_millis(30));
    let h = Harness::new(slow_settings(), &[(MODEL, Arc::clone(&provider))]);
    let ids = custom_ids(30, Some(4));
    let (created, rest, run) = start_slow_batch(&h, &ids).await;

    let cancelling = h.service.cancel_batch(PROJECT, &created.id).await.unwrap();
    assert_eq!(cancelling.status, BatchStatus::Cancelling, "a chunk is still running");
    assert!(cancelling.cancelling_at.is_some());
    // The running chunk notices, saves what it finished and finalizes.
    assert_eq!(run.await.unwrap(), JobResult::Done);
    h.settle(&rest[0], JobResult::Done).await;
    for message in &rest[1..] {
        assert_eq!(h.handle(message).await, JobResult::Done);
    }
    let batch = h.run_to_end(&created.id).await;
    assert_eq!(batch.status, BatchStatus::Cancelled);
    assert!(batch.cancelled_at.is_some());
    let results = h.results(&batch).await;
    assert_stopped_early(&provider, &batch, &results, &ids, "batch_cancelled");
    assert_result_files(&h, &batch).await;
    assert_cleaned_up(&h, &batch.id).await;

    // Cancelling again returns it unchanged; a poller pass changes nothing.
    assert_eq!(h.service.cancel_batch(PROJECT, &created.id).await.unwrap(), batch);
    h.poller.run_once().await.unwrap();
    assert_eq!(h.batch(&created.id).await, batch);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn expiring_mid_run_keeps_what_ran_and_lists_the_rest_as_expired() {
    let provider = ScriptedProvider::new(Duration::from_millis(30));
    let h = Harness::new(slow_settings(), &[(MODEL, Arc::clone(&provider))]);
    let ids = custom_ids(30, Some(4));
    let (created, rest, run) = start_slow_batch(&h, &ids).await;

    h.clock.advance(Duration::from_secs(25 * 3600));
    assert_eq!(run.await.unwrap(), JobResult::Done);
    h.settle(&rest[0], JobResult::Done).await;
    for message in &rest[1..] {
        assert_eq!(h.handle(message).await, JobResult::Done);
    }
    let report = h.poller.run_once().await.unwrap();
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
    let provider = ScriptedProvider::new(Duration::from_millis(2));
    let h = Harness::new(settings(), &[(MODEL, Arc::clone(&provider))]);
    let ids = custom_ids(30, Some(4));
    let created = h.create_batch(&lines_for(MODEL, &ids)).await;
    h.validate().await;
    let chunk0 = h.receive().await.unwrap();
    assert_eq!(h.handle(&chunk0).await, JobResult::Done);

    h.clock.advance(Duration::from_secs(25 * 3600));
    let report = h.poller.run_once().await.unwrap();
    assert_eq!(report.finalized, 1);
    let batch = h.batch(&created.id).await;
    assert_eq!(batch.status, BatchStatus::Expired);
    // The chunks still queued find the batch finished and run nothing.
    h.drain(Duration::from_secs(5)).await;
    assert_eq!(h.batch(&created.id).await, batch);
    let results = h.results(&batch).await;
    results.assert_each_once(&ids);
    assert_lines_well_formed(&results, "batch_expired");
    assert_eq!(ran_ids(&results), sorted(&ids[..10]));
    assert_eq!(results.not_run_with("batch_expired").len(), 20);
    assert_counts_and_usage(&batch, &ids, &ids[..10]);
    assert_eq!(provider.total_calls(), 10);
    assert_result_files(&h, &batch).await;
    assert_cleaned_up(&h, &batch.id).await;
}

// 7. ------------------------------------------------------------------------------------------

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

// 8. ------------------------------------------------------------------------------------------

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn creating_with_an_idempotency_key_creates_one_batch() {
    let provider = ScriptedProvider::new(Duration::from_millis(2));
    let h = Harness::new(settings(), &[(MODEL, Arc::clone(&provider))]);
    let ids = custom_ids(5, None);
    let file = h.upload(&lines_for(MODEL, &ids)).await;
    let request = Harness::create_request(&file.id);

    let first = h
        .service
        .create_batch(PROJECT, request.clone(), Some("key-1"))
        .await
        .unwrap();
    let again = h
        .service
        .create_batch(PROJECT, request.clone(), Some("key-1"))
        .await
        .unwrap();
    assert_eq!(again.id, first.id);
    assert_eq!(h.queue.len(), 1, "one validation enqueued");

    let mut other = request.clone();
    other.metadata = Some(BTreeMap::from([("k".to_owned(), serde_json::json!("v"))]));
    match h.service.create_batch(PROJECT, other, Some("key-1")).await {
        Err(BatchesError::Invalid { code, .. }) => assert_eq!(code, Some("idempotency_key_reused")),
        other => panic!("expected idempotency_key_reused, got {other:?}"),
    }

    // Two retries at once.
    let (a, b) = tokio::join!(
        h.service.create_batch(PROJECT, request.clone(), Some("key-2")),
        h.service.create_batch(PROJECT, request.clone(), Some("key-2"))
    );
    let (a, b) = (a.unwrap(), b.unwrap());
    assert_eq!(a.id, b.id);
    assert_ne!(a.id, first.id);
    assert_eq!(h.queue.len(), 2, "one validation per batch");

    // The first attempt died between reserving the key and writing the batch; the retry creates
    // it under the reserved id.
    h.state.fail_writes(1, |r| r.kind == "batch");
    let failed = h.service.create_batch(PROJECT, request.clone(), Some("key-3")).await;
    assert!(matches!(failed, Err(BatchesError::Storage(_))), "{failed:?}");
    let retried = h
        .service
        .create_batch(PROJECT, request.clone(), Some("key-3"))
        .await
        .unwrap();
    let again = h
        .service
        .create_batch(PROJECT, request.clone(), Some("key-3"))
        .await
        .unwrap();
    assert_eq!(retried.id, again.id);

    let listed = h
        .service
        .list_batches(
            PROJECT,
            ListBatches {
                after: None,
                limit: 100,
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

// More crash points ----------------------------------------------------------------------------

#[tokio::test]
async fn lost_queue_messages_are_enqueued_again_by_the_poller() {
    let provider = ScriptedProvider::new(Duration::from_millis(2));
    let h = Harness::new(settings(), &[(MODEL, Arc::clone(&provider))]);
    let ids = custom_ids(25, Some(5));
    let created = h.create_batch(&lines_for(MODEL, &ids)).await;

    // The validation message is lost.
    let validate = h.receive().await.unwrap();
    h.queue.delete(&validate.receipt).await.unwrap();
    let report = h.poller.run_once().await.unwrap();
    assert_eq!(report.validations_requeued, 0, "not before requeue_after");
    h.clock.advance(Duration::from_secs(2));
    let report = h.poller.run_once().await.unwrap();
    assert_eq!(report.validations_requeued, 1);
    let report = h.poller.run_once().await.unwrap();
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
    let report = h.poller.run_once().await.unwrap();
    assert_eq!(report.chunks_requeued, 2);
    let batch = h.run_to_end(&created.id).await;
    assert_eq!(batch.status, BatchStatus::Completed);
    assert_counts_and_usage(&batch, &ids, &ids);
    let results = h.results(&batch).await;
    results.assert_each_once(&ids);
    assert_lines_well_formed(&results, "none");
    each_called_once(&provider, &ids);
    assert_result_files(&h, &batch).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn cancelling_while_a_dead_worker_holds_a_chunk_finishes_after_its_lease() {
    let provider = ScriptedProvider::new(Duration::from_millis(30));
    let h = Harness::new(slow_settings(), &[(MODEL, Arc::clone(&provider))]);
    let ids = custom_ids(30, Some(4));
    let (created, rest, run) = start_slow_batch(&h, &ids).await;
    run.abort();
    assert!(run.await.unwrap_err().is_cancelled());
    h.queue.delete(&rest[0].receipt).await.unwrap();
    tokio::time::sleep(Duration::from_millis(50)).await;
    let saved = usize::try_from(h.lines_done(&created.id, 0).await).unwrap();
    assert!((2..10).contains(&saved), "{saved}");

    let cancelling = h.service.cancel_batch(PROJECT, &created.id).await.unwrap();
    assert_eq!(cancelling.status, BatchStatus::Cancelling);
    for message in &rest[1..] {
        assert_eq!(h.handle(message).await, JobResult::Done);
    }
    // The dead run's lease still stands: the poller waits for it.
    h.poller.run_once().await.unwrap();
    assert_eq!(h.batch(&created.id).await.status, BatchStatus::Cancelling);
    h.clock.advance(Duration::from_secs(100));
    let report = h.poller.run_once().await.unwrap();
    assert_eq!(report.finalized, 1);
    let batch = h.batch(&created.id).await;
    assert_eq!(batch.status, BatchStatus::Cancelled);
    let results = h.results(&batch).await;
    results.assert_each_once(&ids);
    assert_lines_well_formed(&results, "batch_cancelled");
    assert_eq!(
        ran_ids(&results),
        sorted(&ids[..saved]),
        "what was saved before the kill ran"
    );
    assert_eq!(results.not_run_with("batch_cancelled").len(), 30 - saved);
    assert_counts_and_usage(&batch, &ids, &ids[..saved]);
    each_called_once(&provider, &ids[..saved]);
    assert_result_files(&h, &batch).await;
    assert_cleaned_up(&h, &batch.id).await;
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
    let worker = h.worker.clone();
    let body = chunk0.body.clone();
    let run = tokio::spawn(async move {
        worker
            .handle_until(&body, Instant::now() + Duration::from_secs(60))
            .await
    });
    h.wait_until(Duration::from_secs(5), "saved progress", || async {
        h.lines_done(&created.id, 0).await >= 2
    })
    .await;
    run.abort();
    assert!(run.await.unwrap_err().is_cancelled());
    h.queue.delete(&chunk0.receipt).await.unwrap();

    // Past the dead run's lease its slots are free again: the other chunk runs without waiting
    // for them, and the poller brings the killed one back.
    h.clock.advance(Duration::from_secs(100));
    let started = Instant::now();
    assert_eq!(h.handle(&chunk1).await, JobResult::Done);
    assert!(started.elapsed() < Duration::from_secs(5), "the run waited for slots");
    assert_eq!(h.poller.run_once().await.unwrap().chunks_requeued, 1);
    let batch = h.run_to_end(&created.id).await;
    assert_eq!(batch.status, BatchStatus::Completed);
    assert_counts_and_usage(&batch, &ids, &ids);
    h.results(&batch).await.assert_each_once(&ids);
    assert!(provider.max_in_flight() <= 2);
    each_called_once(&provider, &ids[10..]);
}

#[tokio::test]
async fn cancelling_while_validation_is_half_done_lists_lines_consistently() {
    let provider = ScriptedProvider::new(Duration::from_millis(2));
    let h = Harness::new(settings(), &[(MODEL, Arc::clone(&provider))]);
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
    assert!(matches!(result, JobResult::RetryAfter(_)), "{result:?}");
    assert_eq!(h.batch(&created.id).await.status, BatchStatus::Validating);

    let cancelled = h.service.cancel_batch(PROJECT, &created.id).await.unwrap();
    h.settle(&validate, JobResult::RetryAfter(Duration::ZERO)).await;
    h.drain(Duration::from_secs(5)).await;
    h.poller.run_once().await.unwrap();
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

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_worker_outliving_its_lease_cannot_save_over_its_successor() {
    let provider = ScriptedProvider::new(Duration::from_millis(30));
    let h = Harness::new(slow_settings(), &[(MODEL, Arc::clone(&provider))]);
    let ids = custom_ids(10, Some(4));
    let created = h.create_batch(&lines_for(MODEL, &ids)).await;
    h.validate().await;
    let chunk0 = h.receive().await.unwrap();
    let worker = h.worker.clone();
    let body = chunk0.body.clone();
    let stalled = tokio::spawn(async move {
        worker
            .handle_until(&body, Instant::now() + Duration::from_secs(60))
            .await
    });
    h.wait_until(Duration::from_secs(5), "saved progress", || async {
        h.lines_done(&created.id, 0).await >= 2
    })
    .await;
    // The first run is still going, but as far as anyone can tell its lease ran out: a second
    // run takes the chunk over.
    h.clock.advance(Duration::from_secs(100));
    let successor = h
        .worker
        .handle_until(&chunk0.body, Instant::now() + Duration::from_secs(60))
        .await;
    assert_eq!(successor, JobResult::Done);
    assert_eq!(stalled.await.unwrap(), JobResult::Done, "the stalled run gives up");
    h.settle(&chunk0, JobResult::Done).await;

    let batch = h.batch(&created.id).await;
    assert_eq!(batch.status, BatchStatus::Completed);
    assert_counts_and_usage(&batch, &ids, &ids);
    let results = h.results(&batch).await;
    results.assert_each_once(&ids);
    assert_lines_well_formed(&results, "none");
    assert_result_files(&h, &batch).await;
    assert_cleaned_up(&h, &batch.id).await;
    for id in &ids {
        assert!((1..=2).contains(&provider.calls_for(id)), "{id}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_worker_outliving_its_lease_cannot_add_to_a_cancelled_batch() {
    let provider = ScriptedProvider::new(Duration::from_millis(30));
    let h = Harness::new(slow_settings(), &[(MODEL, Arc::clone(&provider))]);
    let ids = custom_ids(30, Some(4));
    let (created, rest, stalled) = start_slow_batch(&h, &ids).await;
    // Its lease runs out while it still runs; the cancel's finalization does not wait for it.
    h.clock.advance(Duration::from_secs(100));
    let cancelling = h.service.cancel_batch(PROJECT, &created.id).await.unwrap();
    assert_eq!(cancelling.status, BatchStatus::Cancelling);
    let finalize = h.receive().await.unwrap();
    assert!(finalize.body.contains("finalize"), "{}", finalize.body);
    assert_eq!(h.handle(&finalize).await, JobResult::Done);
    let cancelled = h.batch(&created.id).await;
    assert_eq!(cancelled.status, BatchStatus::Cancelled);

    assert_eq!(stalled.await.unwrap(), JobResult::Done);
    h.settle(&rest[0], JobResult::Done).await;
    for message in &rest[1..] {
        assert_eq!(h.handle(message).await, JobResult::Done);
    }
    h.drain(Duration::from_secs(5)).await;
    h.poller.run_once().await.unwrap();
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
    let provider = ScriptedProvider::new(Duration::from_millis(400));
    let h = Harness::new(slow_settings(), &[(MODEL, Arc::clone(&provider))]);
    let ids = custom_ids(30, Some(4));
    let (created, rest, stalled) = start_slow_batch(&h, &ids).await;
    // The finalizer seals, writes the files, and dies before recording `cancelled`.
    h.state
        .fail_writes(u32::MAX, |r| batch_record_with_status(r, "cancelled"));
    h.clock.advance(Duration::from_secs(100));
    h.service.cancel_batch(PROJECT, &created.id).await.unwrap();
    let finalize = h.receive().await.unwrap();
    assert!(finalize.body.contains("finalize"), "{}", finalize.body);
    let result = h
        .worker
        .handle_until(&finalize.body, Instant::now() + Duration::from_secs(60))
        .await;
    assert!(matches!(result, JobResult::RetryAfter(_)), "{result:?}");
    assert!(h.state.injected() >= 1);
    let sealed = h.batch(&created.id).await;
    assert_eq!(sealed.status, BatchStatus::Cancelling);
    // The stalled run finishes its line now and tries to save it.
    assert_eq!(stalled.await.unwrap(), JobResult::Done);
    assert_eq!(
        h.batch(&created.id).await.request_counts,
        sealed.request_counts,
        "nothing is counted into a sealed batch"
    );
    h.state.clear_faults();
    h.settle(&rest[0], JobResult::Done).await;
    for message in &rest[1..] {
        assert_eq!(h.handle(message).await, JobResult::Done);
    }
    h.settle(&finalize, JobResult::RetryAfter(Duration::ZERO)).await;
    h.drain(Duration::from_secs(5)).await;
    h.poller.run_once().await.unwrap();
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
