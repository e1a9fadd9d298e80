//! Provider-native batches on the embedded adapters, with a fake provider batch API that counts
//! every call: the happy path, cancel, and a crash (a refused write, a lost answer, a lost job)
//! at each step between the provider and the state store. Whatever fails, no provider file is
//! uploaded twice, no provider batch is created twice, no line is lost or counted twice.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use nimbus_integration_tests::batch_harness::{
    batch_record_with_status, custom_ids, lines_for, project, settings, Harness, ScriptedProvider, MODEL, VISIBILITY,
};
use nimbus_integration_tests::native_fake::{submitted_contents, FakeBatchApi, FakeCalls};
use nimbus_shared::openai::batches::{BatchObject, BatchStatus};
use nimbus_shared::ports::BatchId;
use nimbus_shared::ports::{JobQueue, Record, StateStore};
use nimbus_shared::providers::native_batch::NativeBatchApi;
use nimbus_shared::providers::router::RoutedModel;
use std::sync::Arc;
use std::time::Duration;

/// The model whose provider runs batches natively.
const NATIVE: &str = "cheap";
/// Lines per provider batch in these tests.
const PART_LINES: u64 = 4;
/// Past a crashed worker's lease on a part.
const PAST_LEASE: Duration = Duration::from_secs(16 * 60);

struct Native {
    h: Harness,
    fake: Arc<FakeBatchApi>,
    /// The synchronous side of the native model: never called for batch lines.
    sync_side: Arc<ScriptedProvider>,
    /// The worker-run model.
    local: Arc<ScriptedProvider>,
}

fn native() -> Native {
    let fake = FakeBatchApi::new();
    let sync_side = ScriptedProvider::new(Duration::ZERO);
    let local = ScriptedProvider::new(Duration::ZERO);
    let mut handle = sync_side.handle("cheap-upstream");
    handle.native_batch = Some(Arc::clone(&fake) as Arc<dyn NativeBatchApi>);
    let routed = vec![
        RoutedModel {
            name: NATIVE.to_owned(),
            providers: vec![handle],
        },
        RoutedModel {
            name: MODEL.to_owned(),
            providers: vec![local.handle("local")],
        },
    ];
    let mut s = settings();
    s.native.max_lines = PART_LINES;
    Native {
        h: Harness::with_routed(s, routed),
        fake,
        sync_side,
        local,
    }
}

/// 10 native lines (two of them failed by the provider) and 3 worker lines: 3 provider batches.
fn mixed_ids() -> (Vec<String>, Vec<String>) {
    let local = (0..3).map(|i| format!("local-{i}")).collect();
    (custom_ids(10, Some(5)), local)
}

fn mixed_lines(native: &[String], local: &[String]) -> Vec<String> {
    let mut lines = lines_for(NATIVE, native);
    lines.extend(lines_for(MODEL, local));
    lines
}

/// A write of a provider-native part whose state is `state`.
fn part_in_state(record: &Record, state: &str) -> bool {
    record.kind == "batch_native_part" && record.body["state"] == state
}

impl Native {
    /// Handle every delivery visible now (a delivery delayed by a retry stays for later).
    async fn run_visible(&self) -> usize {
        let mut handled = 0;
        while let Some(message) = self
            .h
            .queue
            .receive(1, Duration::ZERO, VISIBILITY)
            .await
            .unwrap()
            .into_iter()
            .next()
        {
            self.h.handle(&message).await;
            handled += 1;
            assert!(handled < 500, "the queue never settles");
        }
        handled
    }

    /// One scheduler pass (later by `after` on the clock), then the work it sent.
    async fn pass(&self, after: Duration) {
        self.h.clock.advance(after);
        let _report = self.h.scheduler.run_once().await;
        self.run_visible().await;
    }

    /// Create, validate and run the chunks: the native lines go to the provider.
    async fn submit(&self, lines: &[String]) -> BatchObject {
        let created = self.h.create_batch(lines).await;
        self.h.validate().await;
        self.run_visible().await;
        created
    }

    /// The provider runs everything; the scheduler polls, the job collects and finalizes.
    async fn provider_finishes(&self, batch_id: &str) -> BatchObject {
        self.fake.complete_all();
        self.pass(Duration::from_secs(1)).await;
        self.pass(Duration::from_secs(1)).await;
        self.h.batch(batch_id).await
    }

    async fn part_states(&self, batch_id: &str) -> Vec<String> {
        let mut states = Vec::new();
        for index in 0..16 {
            let id = format!("{batch_id}.{index:04}");
            match self.h.state.get("batch_native_part", &id).await.unwrap() {
                Some(record) => states.push(record.body["state"].as_str().unwrap().to_owned()),
                None => break,
            }
        }
        states
    }

    /// Everything a finished mixed batch must show: each line once, the provider's answers and
    /// failures in the right file, counts and usage exact, every native line submitted exactly
    /// once, no provider batch or file made twice, nothing run on workers that went native.
    async fn assert_finished_exactly_once(&self, batch: &BatchObject, native: &[String], local: &[String]) {
        assert_eq!(batch.status, BatchStatus::Completed, "{batch:?}");
        let results = self.h.results(batch).await;
        let mut all: Vec<String> = native.to_vec();
        all.extend_from_slice(local);
        results.assert_each_once(&all);
        let failing: Vec<&String> = native.iter().filter(|id| id.starts_with("fail-")).collect();
        let counts = batch.request_counts;
        assert_eq!(
            (counts.total, counts.completed, counts.failed),
            (
                all.len() as u64,
                (all.len() - failing.len()) as u64,
                failing.len() as u64
            )
        );
        for line in &results.output {
            let id = line["custom_id"].as_str().unwrap();
            let body = &line["response"]["body"];
            assert_eq!(body["choices"][0]["message"]["content"], format!("echo:{id}"), "{line}");
            let model = if local.iter().any(|l| l == id) { MODEL } else { NATIVE };
            assert_eq!(body["model"], model, "{line}");
        }
        for line in &results.errors {
            assert_eq!(line["response"]["status_code"], 500, "{line}");
            assert!(
                failing.iter().any(|f| *f == line["custom_id"].as_str().unwrap()),
                "{line}"
            );
        }
        let prompt: u64 =
            all.iter().map(|id| id.len() as u64).sum::<u64>() - failing.iter().map(|id| id.len() as u64).sum::<u64>();
        let usage = &batch.usage;
        assert_eq!(usage.input_tokens, prompt, "usage counted once per answered line");
        assert_eq!(usage.output_tokens, 3 * (all.len() - failing.len()) as u64);

        let submitted = submitted_contents(&self.fake);
        assert_eq!(submitted.len(), native.len(), "{submitted:?}");
        assert!(
            submitted.values().all(|&n| n == 1),
            "a line was submitted twice: {submitted:?}"
        );
        let parts = native.len().div_ceil(PART_LINES as usize);
        assert_eq!(self.fake.batches().len(), parts, "provider batches created");
        assert_eq!(FakeCalls::get(&self.fake.calls.creates), parts, "creates");
        assert_eq!(self.fake.uploaded_names().len(), parts, "files uploaded");
        assert_eq!(FakeCalls::get(&self.fake.calls.uploads), parts, "uploads");
        assert_eq!(
            self.fake.live_files(),
            0,
            "the provider's copies are deleted once counted"
        );
        assert_eq!(self.sync_side.total_calls(), 0, "a native line ran on a worker");
        assert_eq!(self.local.total_calls(), local.len());
    }
}

#[tokio::test]
async fn a_mixed_batch_runs_its_native_lines_as_provider_batches() {
    let n = native();
    let (native_ids, local_ids) = mixed_ids();
    let created = n.submit(&mixed_lines(&native_ids, &local_ids)).await;
    assert_eq!(n.part_states(&created.id).await, ["submitted"; 3]);
    let running = n.h.batch(&created.id).await;
    assert_eq!(running.status, BatchStatus::InProgress);
    // Every provider batch carries the metadata reconciliation looks for.
    for (index, batch) in n.fake.batches().iter().enumerate() {
        assert_eq!(batch.metadata["nimbus_batch"], created.id);
        assert_eq!(batch.metadata["nimbus_part"], index.to_string());
        assert_eq!(batch.metadata["nimbus_ref"], format!("{}.{index:04}", created.id));
    }
    let names = n.fake.uploaded_names();
    assert_eq!(
        names,
        (0..3)
            .map(|i| format!("nimbus-{}-{i:04}.jsonl", created.id))
            .collect::<Vec<_>>()
    );

    // Progress the provider reports moves request_counts, once.
    n.fake.report_progress(2);
    n.pass(Duration::from_secs(1)).await;
    n.pass(Duration::from_secs(1)).await;
    let counts = n.h.batch(&created.id).await.request_counts;
    assert_eq!(
        counts.completed,
        3 + 2 * 3,
        "3 worker lines + 2 reported per provider batch"
    );

    let batch = n.provider_finishes(&created.id).await;
    n.assert_finished_exactly_once(&batch, &native_ids, &local_ids).await;
    assert_eq!(
        n.h.count_records("batch_native_part", &created.id).await,
        0,
        "parts cleaned up"
    );
}

#[tokio::test]
async fn an_upload_whose_answer_was_lost_is_found_by_its_name_not_repeated() {
    let n = native();
    let (native_ids, local_ids) = mixed_ids();
    n.fake.lose_next_upload_answer();
    let created = n.submit(&mixed_lines(&native_ids, &local_ids)).await;
    assert_eq!(n.part_states(&created.id).await[0], "uploading");
    assert_eq!(FakeCalls::get(&n.fake.calls.find_files), 0);

    n.pass(Duration::from_secs(1)).await;
    let batch = n.provider_finishes(&created.id).await;
    n.assert_finished_exactly_once(&batch, &native_ids, &local_ids).await;
    assert_eq!(
        FakeCalls::get(&n.fake.calls.find_files),
        1,
        "the interrupted upload was looked for"
    );
}

#[tokio::test]
async fn a_create_whose_answer_was_lost_is_adopted_by_its_metadata() {
    let n = native();
    let (native_ids, local_ids) = mixed_ids();
    n.fake.lose_next_create_answer();
    let created = n.submit(&mixed_lines(&native_ids, &local_ids)).await;
    assert_eq!(n.part_states(&created.id).await[0], "creating");
    assert_eq!(
        n.fake.batches().len(),
        3,
        "the provider made the batch whose answer was lost"
    );

    n.pass(Duration::from_secs(1)).await;
    let batch = n.provider_finishes(&created.id).await;
    n.assert_finished_exactly_once(&batch, &native_ids, &local_ids).await;
    assert_eq!(
        FakeCalls::get(&n.fake.calls.find_batches),
        1,
        "the interrupted create was looked for"
    );
}

#[tokio::test]
async fn a_worker_dead_after_the_upload_leaves_nothing_to_upload_again() {
    let n = native();
    let (native_ids, local_ids) = mixed_ids();
    // The write recording the upload, and the lease's release after it: the process is gone.
    n.h.state.fail_writes(2, |r| part_in_state(r, "uploaded"));
    let created = n.submit(&mixed_lines(&native_ids, &local_ids)).await;
    assert_eq!(n.h.state.injected(), 2);
    assert_eq!(n.part_states(&created.id).await[0], "uploading");

    // Nothing happens to a part while the dead worker's lease lasts …
    n.pass(Duration::from_secs(1)).await;
    assert_eq!(n.part_states(&created.id).await[0], "uploading");
    // … then the part is taken over, and its file found by name.
    n.pass(PAST_LEASE).await;
    let batch = n.provider_finishes(&created.id).await;
    n.assert_finished_exactly_once(&batch, &native_ids, &local_ids).await;
    assert!(FakeCalls::get(&n.fake.calls.find_files) >= 1);
}

#[tokio::test]
async fn a_worker_dead_after_the_create_leaves_nothing_to_create_again() {
    let n = native();
    let (native_ids, local_ids) = mixed_ids();
    n.h.state.fail_writes(2, |r| part_in_state(r, "submitted"));
    let created = n.submit(&mixed_lines(&native_ids, &local_ids)).await;
    assert_eq!(n.h.state.injected(), 2);
    assert_eq!(n.part_states(&created.id).await[0], "creating");

    n.pass(PAST_LEASE).await;
    let batch = n.provider_finishes(&created.id).await;
    n.assert_finished_exactly_once(&batch, &native_ids, &local_ids).await;
    assert!(FakeCalls::get(&n.fake.calls.find_batches) >= 1);
}

#[tokio::test]
async fn a_lost_native_job_is_sent_again_by_the_scheduler() {
    let n = native();
    let (native_ids, local_ids) = mixed_ids();
    let created = n.h.create_batch(&mixed_lines(&native_ids, &local_ids)).await;
    n.h.validate().await;
    // Run the chunks; the `native` job the finalizer sends is lost (its worker died on receipt).
    let mut lost = 0;
    while let Some(message) = n.h.receive().await {
        if message.body.contains("\"native\"") {
            n.h.queue.delete(&message.receipt).await.unwrap();
            lost += 1;
        } else {
            n.h.handle(&message).await;
        }
    }
    assert_eq!(lost, 1);
    assert!(n.part_states(&created.id).await.is_empty(), "no part was planned");
    assert_eq!(FakeCalls::get(&n.fake.calls.uploads), 0);

    n.pass(Duration::from_secs(1)).await;
    assert_eq!(n.part_states(&created.id).await, ["submitted"; 3]);
    let batch = n.provider_finishes(&created.id).await;
    n.assert_finished_exactly_once(&batch, &native_ids, &local_ids).await;
}

#[tokio::test]
async fn a_poll_whose_write_failed_moves_the_counts_once() {
    let n = native();
    let (native_ids, local_ids) = mixed_ids();
    let created = n.submit(&mixed_lines(&native_ids, &local_ids)).await;
    n.fake.report_progress(2);
    n.h.state.fail_writes(1, |r| {
        r.kind == "batch_native_part" && r.body["reported"]["completed"] == 2
    });
    n.pass(Duration::from_secs(1)).await;
    assert_eq!(n.h.state.injected(), 1);
    assert!(FakeCalls::get(&n.fake.calls.polls) >= 1, "a provider batch was polled");
    assert_eq!(
        n.h.batch(&created.id).await.request_counts.completed,
        3,
        "the refused write counted nothing"
    );

    for _ in 0..3 {
        n.pass(Duration::from_secs(1)).await;
        let counts = n.h.batch(&created.id).await.request_counts;
        assert_eq!(counts.completed, 3 + 2 * 3, "progress counted once, whatever the polls");
    }
    let batch = n.provider_finishes(&created.id).await;
    n.assert_finished_exactly_once(&batch, &native_ids, &local_ids).await;
}

#[tokio::test]
async fn a_worker_dead_while_counting_a_collected_part_counts_it_once() {
    let n = native();
    let (native_ids, local_ids) = mixed_ids();
    let created = n.submit(&mixed_lines(&native_ids, &local_ids)).await;
    n.fake.complete_all();
    // The poll ends the parts; the collecting job's write counting the first part is refused.
    n.h.state.fail_writes(1, |r| part_in_state(r, "done"));
    n.pass(Duration::from_secs(1)).await;
    assert_eq!(n.h.state.injected(), 1);
    let states = n.part_states(&created.id).await;
    assert_eq!(states.iter().filter(|s| *s == "ended").count(), 1, "{states:?}");
    assert_eq!(n.h.batch(&created.id).await.status, BatchStatus::InProgress);
    let downloads = FakeCalls::get(&n.fake.calls.downloads);

    n.pass(PAST_LEASE).await;
    n.pass(Duration::from_secs(1)).await;
    assert!(
        FakeCalls::get(&n.fake.calls.downloads) > downloads,
        "the part was collected again"
    );
    let batch = n.h.batch(&created.id).await;
    n.assert_finished_exactly_once(&batch, &native_ids, &local_ids).await;
}

#[tokio::test]
async fn a_finalizer_dead_after_the_parts_were_counted_finishes_on_the_next_pass() {
    let n = native();
    let (native_ids, local_ids) = mixed_ids();
    let created = n.submit(&mixed_lines(&native_ids, &local_ids)).await;
    n.fake.complete_all();
    n.h.state.fail_writes(1, |r| batch_record_with_status(r, "completed"));
    n.pass(Duration::from_secs(1)).await;
    assert_eq!(n.h.state.injected(), 1);
    assert_ne!(n.h.batch(&created.id).await.status, BatchStatus::Completed);
    assert!(n.part_states(&created.id).await.iter().all(|s| s == "done"));

    n.pass(Duration::from_secs(5)).await;
    n.pass(Duration::from_secs(5)).await;
    let batch = n.h.batch(&created.id).await;
    n.assert_finished_exactly_once(&batch, &native_ids, &local_ids).await;
}

#[tokio::test]
async fn cancel_cancels_the_provider_batches_and_keeps_what_ran() {
    let n = native();
    let (native_ids, local_ids) = mixed_ids();
    let created = n.submit(&mixed_lines(&native_ids, &local_ids)).await;
    let batch_id = BatchId::new(&created.id);
    let cancelling = n.h.api.cancel_batch(&project(), &batch_id).await.unwrap();
    assert_eq!(cancelling.status, BatchStatus::Cancelling);
    n.pass(Duration::from_secs(1)).await;
    n.pass(Duration::from_secs(1)).await;

    let batch = n.h.batch(&created.id).await;
    assert_eq!(batch.status, BatchStatus::Cancelled, "{batch:?}");
    assert_eq!(
        FakeCalls::get(&n.fake.calls.cancels),
        3,
        "each provider batch cancelled once"
    );
    assert!(n.fake.batches().iter().all(|b| b.status.is_terminal()));
    let results = n.h.results(&batch).await;
    let mut all = native_ids.clone();
    all.extend(local_ids.iter().cloned());
    results.assert_each_once(&all);
    assert_eq!(
        results.output.len(),
        local_ids.len(),
        "the worker lines that ran are kept"
    );
    assert_eq!(results.not_run_with("batch_cancelled").len(), native_ids.len());
}

#[tokio::test]
async fn expiry_stops_the_provider_batches_and_the_batch_ends_expired() {
    let n = native();
    let (native_ids, local_ids) = mixed_ids();
    let created = n.submit(&mixed_lines(&native_ids, &local_ids)).await;
    n.fake.report_progress(1);
    n.pass(Duration::from_secs(25 * 3600)).await;
    n.pass(Duration::from_secs(1)).await;

    let batch = n.h.batch(&created.id).await;
    assert_eq!(batch.status, BatchStatus::Expired, "{batch:?}");
    assert_eq!(
        FakeCalls::get(&n.fake.calls.cancels),
        3,
        "each provider batch cancelled once"
    );
    let results = n.h.results(&batch).await;
    let mut all = native_ids.clone();
    all.extend(local_ids.iter().cloned());
    results.assert_each_once(&all);
    assert_eq!(results.not_run_with("batch_expired").len(), native_ids.len());
    assert_eq!(
        batch.request_counts.completed,
        local_ids.len() as u64,
        "reported progress is not a result"
    );
}

#[tokio::test]
async fn a_restarted_local_server_takes_over_a_dead_processs_parts_at_once() {
    let n = native();
    let (native_ids, local_ids) = mixed_ids();
    n.h.state.fail_writes(2, |r| part_in_state(r, "uploaded"));
    let created = n.submit(&mixed_lines(&native_ids, &local_ids)).await;
    assert_eq!(n.part_states(&created.id).await[0], "uploading");
    // The in-process queue died with the process.
    while let Some(message) = n.h.receive().await {
        n.h.queue.delete(&message.receipt).await.unwrap();
    }

    let lock = nimbus_shared::adapters::embedded::DataDirLock::acquire(n.h.dir.path()).unwrap();
    let report = n.h.recovery.take_over(&lock).await.unwrap();
    assert_eq!(report.part_leases_broken, 1, "{report:?}");
    assert_eq!(report.jobs_enqueued, 1, "the native job: {report:?}");
    n.run_visible().await;
    assert_eq!(
        n.part_states(&created.id).await,
        ["submitted"; 3],
        "no lease expiry waited for"
    );
    let batch = n.provider_finishes(&created.id).await;
    n.assert_finished_exactly_once(&batch, &native_ids, &local_ids).await;
}

#[tokio::test]
async fn a_native_line_whose_credentials_cannot_be_sealed_fails_at_once_with_its_code() {
    let n = native();
    let ids: Vec<String> = (0..3).map(|i| format!("big-{i}")).collect();
    let mut lines = Vec::new();
    for id in &ids {
        let mut line: serde_json::Value =
            serde_json::from_str(&lines_for(NATIVE, std::slice::from_ref(id))[0]).unwrap();
        // Over the sealer's 4 KiB once written as JSON.
        line["body"]["credentials"] = serde_json::json!({"openai_api_key": "k".repeat(5_000)});
        lines.push(line.to_string());
    }
    let created = n.submit(&lines).await;
    // No staging retried until the batch's expiry: the lines failed in the chunk's first run.
    let batch = n.h.run_to_end(&created.id).await;
    assert_eq!(batch.status, BatchStatus::Completed);
    assert_eq!(batch.request_counts.failed, 3);
    assert_eq!(batch.request_counts.completed, 0);
    let results = n.h.results(&batch).await;
    assert_eq!(results.errors.len(), 3);
    for error in &results.errors {
        assert_eq!(error["error"]["code"], "credentials_too_large", "{error}");
        assert!(ids.iter().any(|id| error["custom_id"] == id.as_str()));
    }
    assert_eq!(FakeCalls::get(&n.fake.calls.uploads), 0, "nothing went to the provider");
}

#[tokio::test]
async fn revoking_the_batchs_key_stops_its_provider_batches_like_a_cancel() {
    use nimbus_shared::auth::ApiKeyService;
    use nimbus_shared::ports::{SystemClock, UuidV7Ids};

    let n = native();
    // The admin's process: its own connection to the shared state file.
    let admin_state: Arc<dyn StateStore> = Arc::new(
        nimbus_shared::adapters::embedded::SqliteStateStore::open(&n.h.dir.path().join("state.sqlite3")).unwrap(),
    );
    let keys = ApiKeyService::new(admin_state, Arc::new(SystemClock), Arc::new(UuidV7Ids));
    let key = keys.create(&project(), None).await.unwrap().info.key_id;
    let (native_ids, local_ids) = mixed_ids();
    let file = n.h.upload(&mixed_lines(&native_ids, &local_ids)).await;
    let created =
        n.h.api
            .create_batch_by(&project(), Some(&key), Harness::create_request(&file.id), None)
            .await
            .unwrap();
    n.h.validate().await;
    n.run_visible().await;
    assert_eq!(n.fake.batches().len(), 3, "the provider batches were submitted");
    keys.revoke(&key).await.unwrap();
    n.pass(Duration::from_secs(1)).await;
    n.pass(Duration::from_secs(1)).await;

    let batch = n.h.batch(&created.id).await;
    assert!(batch.status.is_terminal(), "{batch:?}");
    assert_eq!(
        FakeCalls::get(&n.fake.calls.cancels),
        3,
        "each provider batch cancelled once"
    );
    let results = n.h.results(&batch).await;
    let mut all = native_ids.clone();
    all.extend(local_ids.iter().cloned());
    results.assert_each_once(&all);
    assert_eq!(
        results.output.len(),
        local_ids.len(),
        "the worker lines that ran are kept"
    );
    assert_eq!(results.not_run_with("api_key_revoked").len(), native_ids.len());
}
