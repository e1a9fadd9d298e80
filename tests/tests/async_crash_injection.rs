//! Crash injection at each step of an async request's life, on the embedded adapters: a write
//! refused at a precise point (as if the worker died right there) or a worker killed mid-way
//! (mid model call, mid webhook post). Then the message comes back (or is lost) and the scheduler
//! passes, and every time: exactly one saved output, a final status, at least one delivery, and the
//! model never called after the output was saved.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use nimbus_integration_tests::async_harness::{
    assert_standard_signature, deliver_job, request_with_status, run_job, settings, submission, AsyncHarness, Event,
    InFlight, ModelStep, Reply, DUE_KIND, REQUEST_KIND, SECRET, VISIBILITY,
};
use nimbus_shared::async_requests::WebhookStatus;
use nimbus_shared::jobs::JobMessage;
use nimbus_shared::ports::{JobOutcome, JobQueue, SoleWorkerGuard};
use serde_json::json;
use std::time::Duration;

const STORAGE_RETRY: JobOutcome = JobOutcome::Retry {
    retry_after: Duration::from_secs(5),
};

/// The message `job`, redelivered once its visibility timeout runs out (its worker died).
fn redelivered(h: &AsyncHarness, job: JobMessage) -> Vec<InFlight> {
    vec![InFlight {
        job,
        due_ms: h.now_ms() + i64::try_from(VISIBILITY.as_millis()).unwrap(),
    }]
}

/// What must hold however the request's worker died: one saved output, a final status, a
/// delivered webhook (same id every time, signed), and no model call after the output was saved.
async fn assert_nothing_lost_nothing_doubled(h: &AsyncHarness, id: &str) {
    let view = h.view(id).await;
    assert_eq!(
        (view.status, view.webhook_status),
        ("SUCCEEDED", WebhookStatus::Succeeded),
        "{}",
        h.stored(id).await
    );
    assert_eq!(h.events.outputs_saved(), 1, "one output saved: {:?}", h.events.all());
    let output = h.saved_output(id).await.expect("the output");
    assert_eq!(view.output, Some(output.clone()));
    h.events.assert_no_model_call_after_output();
    let posts = h.posts_for(id);
    assert!(!posts.is_empty(), "at least one delivery");
    for post in &posts {
        assert_standard_signature(post, SECRET);
        assert_eq!(post.json()["data"]["output"], output);
    }
    assert_eq!(
        h.due_at(id).await,
        Some(h.purge_at_ms(id).await),
        "only the purge is left"
    );
    assert!(
        view.attempts.iter().all(|a| a.finished_at.is_some()),
        "no attempt left open"
    );
}

async fn wait_for(what: &str, check: impl Fn() -> bool) {
    for _ in 0..1000 {
        if check() {
            return;
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    panic!("timed out waiting for {what}");
}

// Before the model call --------------------------------------------------------------------------

/// Let the run message come back (as SQS redelivers it after a failed run) and everything it
/// leads to happen, until the request is final.
async fn settle_after_redelivery(h: &AsyncHarness, id: &str) {
    let redelivered = InFlight {
        job: run_job(id),
        due_ms: h.now_ms() + 5000,
    };
    h.settle(id, vec![redelivered], 20).await;
}

#[tokio::test]
async fn the_claim_refused_before_the_model_call() {
    let h = AsyncHarness::embedded(settings());
    let id = h.submit(submission("claim", json!({}))).await;
    h.queue.take_sent();
    h.state.fail_writes(1, |r| request_with_status(r, "IN_PROGRESS"));
    assert_eq!(h.run_request(&id).await, STORAGE_RETRY);
    assert_eq!(h.state.injected(), 1);
    assert_eq!(h.model.calls(), 0, "no claim, no model call");
    assert_eq!(h.view(&id).await.status, "QUEUED");

    settle_after_redelivery(&h, &id).await;
    assert_nothing_lost_nothing_doubled(&h, &id).await;
    assert_eq!(h.model.calls(), 1);
    assert_eq!(h.view(&id).await.attempts.len(), 1);
    assert_eq!(h.posts_for(&id).len(), 1);
}

// During the model call --------------------------------------------------------------------------

#[tokio::test]
async fn a_worker_killed_during_the_model_call_whose_message_is_lost() {
    let h = AsyncHarness::embedded(settings());
    h.model.then([ModelStep::Hold]);
    let id = h.submit(submission("killed-mid-call", json!({}))).await;
    h.queue.take_sent();
    let run = h.spawn_run(&run_job(&id));
    wait_for("the model call", || h.model.holding() == 1).await;
    run.abort();
    assert!(run.await.unwrap_err().is_cancelled());
    let view = h.view(&id).await;
    assert_eq!(view.status, "IN_PROGRESS");
    assert!(view.attempts[0].finished_at.is_none(), "an open attempt");

    // The message is gone: only the scheduler can bring it back (once the worker's lease ended).
    h.settle(&id, Vec::new(), 20).await;
    assert_nothing_lost_nothing_doubled(&h, &id).await;
    let view = h.view(&id).await;
    assert_eq!(view.attempts.len(), 2, "the killed attempt, then the one that answered");
    assert_eq!(view.attempts[0].error.as_ref().unwrap().code, "MODEL_PREDICT_ERROR");
    assert_eq!(h.model.calls(), 2, "nothing was saved, so the model ran again");
    assert_eq!(h.posts_for(&id).len(), 1);
}

// After the model call, before the output is recorded --------------------------------------------

#[tokio::test]
async fn the_final_write_refused_after_the_model_answered() {
    let h = AsyncHarness::embedded(settings());
    let id = h.submit(submission("answered-then-died", json!({}))).await;
    h.queue.take_sent();
    h.state.fail_writes(1, |r| request_with_status(r, "SUCCEEDED"));
    assert_eq!(h.run_request(&id).await, STORAGE_RETRY);
    assert_eq!(h.state.injected(), 1);
    assert_eq!(h.view(&id).await.status, "IN_PROGRESS");
    assert!(h.saved_output(&id).await.is_some(), "the output was saved first");

    // Redelivered while the dead worker's lease holds: it waits, and calls nothing.
    assert!(matches!(h.run_request(&id).await, JobOutcome::Retry { .. }));
    assert_eq!(h.model.calls(), 1);

    settle_after_redelivery(&h, &id).await;
    assert_nothing_lost_nothing_doubled(&h, &id).await;
    assert_eq!(h.model.calls(), 1, "the rerun found the saved output");
    assert_eq!(h.view(&id).await.attempts.len(), 1);
}

#[tokio::test]
async fn the_final_write_refused_and_the_message_lost() {
    let h = AsyncHarness::embedded(settings());
    let id = h.submit(submission("answered-message-lost", json!({}))).await;
    h.queue.take_sent();
    h.state.fail_writes(1, |r| request_with_status(r, "SUCCEEDED"));
    assert_eq!(h.run_request(&id).await, STORAGE_RETRY);
    h.settle(&id, Vec::new(), 20).await;
    assert_nothing_lost_nothing_doubled(&h, &id).await;
    assert_eq!(h.model.calls(), 1);
}

// During the delivery ----------------------------------------------------------------------------

#[tokio::test]
async fn a_worker_killed_while_the_receiver_hangs() {
    let h = AsyncHarness::embedded(settings());
    h.receiver.then([Reply::Hang]);
    let id = h.submit(submission("killed-mid-post", json!({}))).await;
    h.queue.take_sent();
    let run = h.spawn_run(&run_job(&id));
    wait_for("the webhook post", || h.receiver.posts().len() == 1).await;
    run.abort();
    assert!(run.await.unwrap_err().is_cancelled());
    // The final status was saved before the post; the delivery's outcome never was.
    let view = h.view(&id).await;
    assert_eq!(
        (view.status, view.webhook_status),
        ("SUCCEEDED", WebhookStatus::Pending)
    );

    h.settle(&id, redelivered(&h, run_job(&id)), 20).await;
    assert_nothing_lost_nothing_doubled(&h, &id).await;
    assert_eq!(h.model.calls(), 1);
    assert_eq!(h.posts_for(&id).len(), 2, "the hung post, then one that was answered");
}

/// The write that records a first webhook attempt (the final status was saved before it).
fn first_attempt_recorded(record: &nimbus_shared::ports::Record) -> bool {
    request_with_status(record, "SUCCEEDED")
        && record.body["delivery"]["attempts"]
            .as_array()
            .is_some_and(|attempts| attempts.len() == 1)
}

#[tokio::test]
async fn a_worker_killed_while_the_receiver_hangs_whose_message_is_lost() {
    let h = AsyncHarness::embedded(settings());
    h.receiver.then([Reply::Hang]);
    let id = h.submit(submission("killed-mid-post-lost", json!({}))).await;
    h.queue.take_sent();
    let run = h.spawn_run(&run_job(&id));
    wait_for("the webhook post", || h.receiver.posts().len() == 1).await;
    run.abort();
    assert!(run.await.unwrap_err().is_cancelled());

    // Only the due index is left: it was moved before the final status was saved.
    h.settle(&id, Vec::new(), 20).await;
    assert_nothing_lost_nothing_doubled(&h, &id).await;
    assert_eq!(h.model.calls(), 1);
    assert_eq!(h.posts_for(&id).len(), 2, "the hung post, then one that was answered");
}

#[tokio::test]
async fn the_delivery_times_out_and_the_final_write_is_refused() {
    let h = AsyncHarness::embedded(settings());
    h.receiver.then([Reply::Timeout]);
    let id = h.submit(submission("timeout-then-died", json!({}))).await;
    h.queue.take_sent();
    h.state.fail_writes(1, first_attempt_recorded);
    assert_eq!(h.run_request(&id).await, STORAGE_RETRY);
    assert_eq!(h.posts_for(&id).len(), 1);

    settle_after_redelivery(&h, &id).await;
    assert_nothing_lost_nothing_doubled(&h, &id).await;
    assert_eq!(h.model.calls(), 1);
    assert_eq!(h.posts_for(&id).len(), 2);
}

// After the delivery, before the record is saved -------------------------------------------------

#[tokio::test]
async fn the_record_save_refused_after_a_successful_delivery() {
    let h = AsyncHarness::embedded(settings());
    let id = h.submit(submission("delivered-then-died", json!({}))).await;
    h.queue.take_sent();
    h.state.fail_writes(1, first_attempt_recorded);
    assert_eq!(h.run_request(&id).await, STORAGE_RETRY);
    assert_eq!(
        h.posts_for(&id).len(),
        1,
        "the receiver has it; the record does not say so"
    );

    settle_after_redelivery(&h, &id).await;
    assert_nothing_lost_nothing_doubled(&h, &id).await;
    assert_eq!(h.model.calls(), 1);
    let posts = h.posts_for(&id);
    assert_eq!(
        posts.len(),
        2,
        "delivered again, with the same webhook-id to de-duplicate on"
    );
    assert_eq!(posts[0].header("webhook-id"), posts[1].header("webhook-id"));
}

#[tokio::test]
async fn a_retried_delivery_whose_record_save_is_refused_is_made_again() {
    let h = AsyncHarness::embedded(settings());
    h.receiver.then([Reply::Status(500)]);
    let id = h.submit(submission("retry-save-refused", json!({}))).await;
    assert_eq!(h.run_request(&id).await, JobOutcome::Done);
    assert_eq!(h.view(&id).await.webhook_status, WebhookStatus::Pending);
    h.queue.take_sent();
    h.advance_to(h.stored(&id).await["delivery"]["next_attempt_at_ms"].as_i64().unwrap());
    h.state.fail_writes(1, |r| {
        r.kind == REQUEST_KIND && r.body["delivery"]["state"] == "SUCCEEDED"
    });
    assert_eq!(h.deliver(&id, 2).await, STORAGE_RETRY);
    assert_eq!(h.state.injected(), 1);
    assert_eq!(h.posts_for(&id).len(), 2);

    h.settle(
        &id,
        vec![InFlight {
            job: deliver_job(&id, 2),
            due_ms: h.now_ms() + 5000,
        }],
        20,
    )
    .await;
    assert_nothing_lost_nothing_doubled(&h, &id).await;
    assert_eq!(
        h.posts_for(&id).len(),
        3,
        "attempt 2 made again: its record never said it was made"
    );
    assert_eq!(h.stored(&id).await["delivery"]["attempts"].as_array().unwrap().len(), 2);
}

#[tokio::test]
async fn the_next_look_refused_after_a_failed_first_delivery() {
    let h = AsyncHarness::embedded(settings());
    h.receiver.then([Reply::Status(500)]);
    let id = h.submit(submission("next-look-refused", json!({}))).await;
    h.queue.take_sent();
    // The record is saved concluded, then putting its next attempt on the due index fails: no
    // delivery message is sent.
    h.state.fail_writes(1, |r| r.kind == DUE_KIND);
    assert_eq!(h.run_request(&id).await, STORAGE_RETRY);
    assert_eq!(h.state.injected(), 1);
    assert!(h.take_deliveries(&id).is_empty());
    assert_eq!(h.view(&id).await.webhook_status, WebhookStatus::Pending);

    settle_after_redelivery(&h, &id).await;
    assert_nothing_lost_nothing_doubled(&h, &id).await;
    assert_eq!(h.model.calls(), 1);
    assert_eq!(h.posts_for(&id).len(), 2);
}

#[tokio::test]
async fn a_worker_killed_during_a_retried_delivery_whose_message_is_lost() {
    let h = AsyncHarness::embedded(settings());
    h.receiver.then([Reply::Status(503), Reply::Hang]);
    let id = h.submit(submission("killed-mid-retry", json!({}))).await;
    assert_eq!(h.run_request(&id).await, JobOutcome::Done);
    h.queue.take_sent();
    h.advance_to(h.stored(&id).await["delivery"]["next_attempt_at_ms"].as_i64().unwrap());
    let run = h.spawn_run(&deliver_job(&id, 2));
    wait_for("the second post", || h.receiver.posts().len() == 2).await;
    run.abort();
    assert!(run.await.unwrap_err().is_cancelled());

    h.settle(&id, Vec::new(), 20).await;
    assert_nothing_lost_nothing_doubled(&h, &id).await;
    assert_eq!(h.posts_for(&id).len(), 3);
}

// The only worker restarts ------------------------------------------------------------------------

/// Stands for the local server's data-directory lock.
struct OnlyWorker;

impl SoleWorkerGuard for OnlyWorker {}

#[tokio::test]
async fn a_restarted_local_server_queues_what_it_left_queued_or_running_again() {
    let h = AsyncHarness::embedded(settings());
    h.model.then([ModelStep::Hold]);
    let running = h.submit(submission("running-at-restart", json!({}))).await;
    let run = h.spawn_run(&run_job(&running));
    wait_for("the model call", || h.model.holding() == 1).await;
    run.abort();
    assert!(run.await.unwrap_err().is_cancelled());
    let queued = h.submit(submission("queued-at-restart", json!({"priority": 0}))).await;
    let done = h.submit(submission("done-before-restart", json!({}))).await;
    assert_eq!(h.run_request(&done).await, JobOutcome::Done);

    // The process dies: the in-process queue loses every message.
    while let Some(message) = h.receive().await {
        h.queue.delete(&message.receipt).await.unwrap();
    }
    h.queue.take_sent();

    assert_eq!(h.requests.take_over(&OnlyWorker).await.unwrap(), 2);
    let mut sent: Vec<(String, u8)> = h
        .queue
        .take_sent()
        .into_iter()
        .map(|s| match s.job {
            JobMessage::AsyncRun { request_id } => (request_id.to_string(), s.priority.unwrap().level()),
            other => panic!("{other:?}"),
        })
        .collect();
    sent.sort();
    let mut expected = vec![(running.clone(), 1), (queued.clone(), 0)];
    expected.sort();
    assert_eq!(sent, expected);

    // Both run at once: the dead run's lease no longer holds its request back.
    while let Some(message) = h.receive().await {
        assert_eq!(h.handle(&message).await, JobOutcome::Done);
    }
    for id in [&running, &queued, &done] {
        let view = h.view(id).await;
        assert_eq!(
            (view.status, view.webhook_status),
            ("SUCCEEDED", WebhookStatus::Succeeded),
            "{id}"
        );
        assert_eq!(h.posts_for(id).len(), 1);
    }
    assert_eq!(
        h.view(&running).await.attempts.len(),
        2,
        "the dead run's attempt, then the one that answered"
    );
    let calls = |content: &str| {
        h.events
            .all()
            .iter()
            .filter(|e| matches!(e, Event::ModelCall(c) if c == content))
            .count()
    };
    assert_eq!(
        [
            calls("running-at-restart"),
            calls("queued-at-restart"),
            calls("done-before-restart")
        ],
        [2, 1, 1],
        "no output was saved for the dead run, so its model ran again"
    );
    assert_eq!(h.events.outputs_saved(), 3);
}
