//! The order things happen in around an async request: which waiting request gets a freed model
//! slot (priority, then age — across several workers), what the record says when the webhook
//! arrives, the exact bytes every attempt of one webhook sends, and webhooks resumed at restart.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use nimbus_integration_tests::async_harness::{
    run_job, settings, submission, AsyncHarness, Event, ModelStep, Reply, MODEL, VISIBILITY,
};
use nimbus_shared::adapters::embedded::spawn_queue_workers;
use nimbus_shared::async_requests::WebhookStatus;
use nimbus_shared::jobs::JobMessage;
use nimbus_shared::ports::{AsyncRequestId, JobHandler, JobOutcome, JobQueue, SoleWorkerGuard, StateStore};
use serde_json::json;
use std::sync::Arc;
use std::time::Duration;

async fn wait_for(what: &str, check: impl Fn() -> bool) {
    for _ in 0..3000 {
        if check() {
            return;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    panic!("timed out waiting for {what}");
}

/// Whether every request of `ids` has looked for a slot and queued its own later look.
fn all_waiting(h: &AsyncHarness, ids: &[String]) -> bool {
    let sent = h.queue.sent();
    ids.iter()
        .all(|id| sent.iter().any(|s| s.job == run_job(id) && s.delay > Duration::ZERO))
}

fn model_calls(h: &AsyncHarness) -> Vec<String> {
    h.events
        .all()
        .into_iter()
        .filter_map(|e| match e {
            Event::ModelCall(content) => Some(content),
            _ => None,
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn when_a_saturated_model_frees_its_slot_the_p0_requests_run_before_the_p2_ones() {
    let mut settings = settings();
    settings.model_limits.insert(MODEL.to_owned(), 1);
    let h = AsyncHarness::embedded(settings);
    h.model.then([ModelStep::Hold]);
    let workers = spawn_queue_workers(
        Arc::clone(&h.queue) as Arc<dyn JobQueue>,
        Arc::new(h.worker.clone()) as Arc<dyn JobHandler>,
        3,
        VISIBILITY,
    );
    h.submit(submission("busy", json!({}))).await;
    wait_for("the busy request's model call", || h.model.holding() == 1).await;

    let mut low = Vec::new();
    for i in 0..8 {
        h.advance(Duration::from_millis(1));
        low.push(h.submit(submission(&format!("p2-{i}"), json!({"priority": 2}))).await);
    }
    wait_for("the P2 requests to wait", || all_waiting(&h, &low)).await;
    // The P2 requests' own next looks come due first.
    tokio::time::sleep(Duration::from_millis(500)).await;
    let mut high = Vec::new();
    for i in 0..2 {
        h.advance(Duration::from_millis(1));
        high.push(h.submit(submission(&format!("p0-{i}"), json!({"priority": 0}))).await);
    }
    wait_for("the P0 requests to wait", || all_waiting(&h, &high)).await;
    assert_eq!(h.model.calls(), 1, "the model is saturated");

    h.model.release();
    wait_for("every request to run", || h.model.calls() == 11).await;
    let expected: Vec<String> = ["busy", "p0-0", "p0-1"]
        .into_iter()
        .map(str::to_owned)
        .chain((0..8).map(|i| format!("p2-{i}")))
        .collect();
    assert_eq!(model_calls(&h), expected);
    for id in high.iter().chain(&low) {
        wait_for("the request's webhook", || !h.posts_for(id).is_empty()).await;
    }
    for worker in workers {
        worker.abort();
    }
}

#[tokio::test]
async fn the_record_says_succeeded_with_its_output_when_the_webhook_arrives() {
    let h = AsyncHarness::embedded(settings());
    h.receiver.then([Reply::Hang]);
    let id = h.submit(submission("read-on-receipt", json!({}))).await;
    let run = h.spawn_run(&run_job(&id));
    wait_for("the webhook post", || h.receiver.posts().len() == 1).await;
    // The receiver reads the request as the webhook arrives.
    let view = h.view(&id).await;
    assert_eq!(view.status, "SUCCEEDED", "{}", h.stored(&id).await);
    assert_eq!(view.output, Some(h.posts_for(&id)[0].json()["data"]["output"].clone()));
    assert_eq!(
        view.webhook_status,
        WebhookStatus::Pending,
        "its outcome is not known yet"
    );
    run.abort();
}

/// Every attempt of a webhook sends the first attempt's bytes: only the timestamp and the
/// signatures change.
async fn assert_retries_resend_the_same_bytes(content: &str) {
    let h = AsyncHarness::embedded(settings());
    h.receiver.then([Reply::Status(500), Reply::Status(503)]);
    let id = h.submit(submission(content, json!({}))).await;
    assert_eq!(h.run_request(&id).await, JobOutcome::Done);
    for attempt in 2..=3 {
        h.advance(Duration::from_secs(7));
        h.advance_to(h.stored(&id).await["delivery"]["next_attempt_at_ms"].as_i64().unwrap());
        assert_eq!(h.deliver(&id, attempt).await, JobOutcome::Done);
    }
    let posts = h.posts_for(&id);
    assert_eq!(posts.len(), 3);
    assert_eq!(h.view(&id).await.webhook_status, WebhookStatus::Succeeded);
    for later in &posts[1..] {
        assert_eq!(later.body, posts[0].body, "the same bytes");
        assert_eq!(later.header("webhook-id"), posts[0].header("webhook-id"));
        assert_ne!(later.header("webhook-timestamp"), posts[0].header("webhook-timestamp"));
        assert_ne!(later.header("webhook-signature"), posts[0].header("webhook-signature"));
    }
    assert_eq!(posts[0].json()["data"]["output"], h.saved_output(&id).await.unwrap());
}

#[tokio::test]
async fn a_retried_webhook_resends_the_first_attempts_body() {
    assert_retries_resend_the_same_bytes("small").await;
}

#[tokio::test]
async fn a_retried_webhook_too_large_for_the_record_resends_the_first_attempts_body() {
    assert_retries_resend_the_same_bytes(&"x".repeat(40_000)).await;
}

/// Stands for the local server's data-directory lock.
struct OnlyWorker;

impl SoleWorkerGuard for OnlyWorker {}

#[tokio::test]
async fn a_restart_resumes_the_webhook_of_a_request_cancelled_before_it() {
    let h = AsyncHarness::embedded(settings());
    let id = h.submit(submission("cancelled-then-restart", json!({}))).await;
    h.api
        .cancel(&nimbus_integration_tests::async_harness::project(), &id)
        .await
        .unwrap();
    assert_eq!(h.view(&id).await.status, "CANCELED");
    // The process dies: the in-process queue loses the webhook's message.
    while let Some(message) = h.receive().await {
        h.queue.delete(&message.receipt).await.unwrap();
    }
    h.queue.take_sent();

    h.requests.take_over(&OnlyWorker).await.unwrap();
    let sent = h.queue.take_sent();
    assert!(
        sent.iter().any(|s| s.job
            == JobMessage::AsyncDeliver {
                request_id: AsyncRequestId::new(id.clone()),
                attempt: 1
            }
            && s.delay == Duration::ZERO),
        "the webhook is queued again at once: {sent:?}"
    );
    while let Some(message) = h.receive().await {
        assert_eq!(h.handle(&message).await, JobOutcome::Done);
    }
    assert_eq!(h.posts_for(&id).len(), 1);
    assert_eq!(
        h.posts_for(&id)[0].json()["errors"][0]["code"],
        "ASYNC_REQUEST_CANCELED"
    );
    assert_eq!(h.view(&id).await.webhook_status, WebhookStatus::Succeeded);
}

#[tokio::test]
async fn creating_a_secret_brings_the_deliveries_that_waited_for_one_forward() {
    use nimbus_integration_tests::async_harness::{project, PROJECT, SECRET};
    let h = AsyncHarness::embedded(settings());
    h.secrets.set(PROJECT, &[]);
    let id = h.submit(submission("no-secret-yet", json!({}))).await;
    assert_eq!(h.run_request(&id).await, JobOutcome::Done);
    h.advance_to(h.stored(&id).await["delivery"]["next_attempt_at_ms"].as_i64().unwrap());
    assert_eq!(h.deliver(&id, 2).await, JobOutcome::Done);
    assert!(h.posts_for(&id).is_empty(), "unsigned webhooks are refused");
    let next = h.stored(&id).await["delivery"]["next_attempt_at_ms"].as_i64().unwrap();
    assert!(next - h.now_ms() >= 300_000, "the next retry is minutes away");
    h.queue.take_sent();

    h.secrets.set(PROJECT, &[SECRET]);
    assert_eq!(h.api.secret_created(&project()).await.unwrap(), 1);
    assert_eq!(h.take_deliveries(&id), [(3, Duration::ZERO)], "due at once");
    assert_eq!(h.deliver(&id, 3).await, JobOutcome::Done);
    assert_eq!(h.posts_for(&id).len(), 1);
    assert_eq!(h.view(&id).await.webhook_status, WebhookStatus::Succeeded);
    assert_eq!(
        h.api.secret_created(&project()).await.unwrap(),
        0,
        "nothing waits any more"
    );
}

#[tokio::test]
async fn a_purged_request_leaves_no_entry_waiting_for_a_secret() {
    use nimbus_integration_tests::async_harness::PROJECT;
    let h = AsyncHarness::embedded(settings());
    h.secrets.set(PROJECT, &[]);
    let id = h.submit(submission("never-signed", json!({}))).await;
    assert_eq!(h.run_request(&id).await, JobOutcome::Done);
    let awaiting = format!("awaiting_secret.{PROJECT}:{id}");
    let listed = || async { h.state.get("due_work", &awaiting).await.unwrap().is_some() };
    assert!(listed().await, "the delivery waits for a secret");
    // Every retry finds no secret; after the last one and the retention, the request is purged.
    for _ in 0..60 {
        let Some(at) = h.due_at(&id).await else { break };
        h.advance_to(at);
        h.schedule_pass().await;
        while let Some(message) = h.receive().await {
            h.handle(&message).await;
        }
    }
    assert!(h.state.get("async_request", &id).await.unwrap().is_none(), "purged");
    assert!(!listed().await, "the purge forgets the waiting entry too");
}
