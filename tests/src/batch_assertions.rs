//! Checks on a batch the engine finished, shared by the tests/batch_*.rs files: every request line
//! once with its own answer, exact counters and usage, the right result files, nothing left behind.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use crate::batch_harness::{tokens_for, BatchResults, Harness, ScriptedProvider};
use nimbus_shared::openai::batches::{BatchObject, BatchStatus, RequestCounts};

fn is_failing(id: &str) -> bool {
    id.starts_with("fail-")
}

/// Counts and usage a finished batch must show when every line of `ran` ran once and the other
/// lines of `all` never ran.
pub fn assert_counts_and_usage(batch: &BatchObject, all: &[String], ran: &[String]) {
    let succeeded: Vec<&String> = ran.iter().filter(|id| !is_failing(id)).collect();
    let completed = succeeded.len() as u64;
    assert_eq!(
        batch.request_counts,
        RequestCounts {
            total: all.len() as u64,
            completed,
            failed: all.len() as u64 - completed,
            not_run: batch.request_counts.not_run,
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

/// Output lines are 200s echoing their own custom_id; provider failures are error lines with the
/// provider's status (the scripted provider's 500) and the gateway's verdict next to it;
/// lines that never ran carry `code` and no response.
pub fn assert_lines_well_formed(results: &BatchResults, not_run_code: &str) {
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
            assert_eq!(line["response"]["status_code"], 500, "{line}");
            assert!(line["response"]["body"]["error"]["message"].is_string(), "{line}");
            assert_eq!(line["response"]["gateway_error"]["code"], "provider_error", "{line}");
            assert!(line["error"].is_null(), "{line}");
        }
    }
}

/// The ids that appear in the results with a response (they ran), in custom_id order.
pub fn ran_ids(results: &BatchResults) -> Vec<String> {
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

pub fn sorted(ids: &[String]) -> Vec<String> {
    let mut ids = ids.to_vec();
    ids.sort();
    ids
}

/// The engine left nothing behind for a finished batch: no chunk records, no active marker.
pub async fn assert_cleaned_up(h: &Harness, batch_id: &str) {
    assert_eq!(h.count_records("batch_chunk", batch_id).await, 0, "chunk records left");
    assert_eq!(
        h.count_records("batch_active", "_active").await,
        0,
        "active marker left"
    );
}

/// Exactly one output and at most one error file exist for the batch, and they are the ones the
/// batch names.
pub async fn assert_result_files(h: &Harness, batch: &BatchObject) {
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

pub fn each_called_once(provider: &ScriptedProvider, ids: &[String]) {
    for id in ids {
        assert_eq!(provider.calls_for(id), 1, "provider calls for {id}");
    }
}

/// Drain the batch to its end and check it completed with every line run, counted and written
/// exactly once (one provider call per line).
pub async fn run_to_end_exactly_once(h: &Harness, batch_id: &str, ids: &[String], provider: &ScriptedProvider) {
    let batch = h.run_to_end(batch_id).await;
    assert_eq!(batch.status, BatchStatus::Completed);
    assert_counts_and_usage(&batch, ids, ids);
    let results = h.results(&batch).await;
    results.assert_each_once(ids);
    assert_lines_well_formed(&results, "none");
    each_called_once(provider, ids);
    assert_result_files(h, &batch).await;
}

/// A batch that completed with every line of `ids` answered once, counted, written to the files it
/// names, and nothing left behind.
pub async fn assert_completed_cleanly(h: &Harness, batch: &BatchObject, ids: &[String]) {
    assert_eq!(batch.status, BatchStatus::Completed);
    assert_counts_and_usage(batch, ids, ids);
    let results = h.results(batch).await;
    results.assert_each_once(ids);
    assert_lines_well_formed(&results, "none");
    assert_result_files(h, batch).await;
    assert_cleaned_up(h, &batch.id).await;
}

/// A batch stopped before its end (cancelled, expired): every line of `ids` is in the results once,
/// exactly the lines of `ran` ran and are counted, the others carry `not_run_code`. Returns the
/// results for further checks.
pub async fn assert_stopped_after(
    h: &Harness,
    batch: &BatchObject,
    ids: &[String],
    ran: &[String],
    not_run_code: &str,
) -> BatchResults {
    let results = h.results(batch).await;
    results.assert_each_once(ids);
    assert_lines_well_formed(&results, not_run_code);
    assert_eq!(ran_ids(&results), sorted(ran), "the lines that ran");
    assert_counts_and_usage(batch, ids, ran);
    results
}
