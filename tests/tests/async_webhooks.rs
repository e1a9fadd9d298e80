//! Webhook delivery of async results on the embedded adapters: retries on the schedule with the
//! same `webhook-id`, attempt-numbered delivery jobs (stale and duplicate ones do nothing), the
//! whole schedule failing (`WEBHOOK_FAILED`, the output kept), statuses that stop at once,
//! `Retry-After`, secrets (rotation, none).

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use nimbus_integration_tests::async_harness::{
    assert_baseten_signature, assert_standard_signature, deliver_job, project, settings, submission, AsyncHarness,
    Reply, PROJECT, SECRET,
};
use nimbus_shared::async_requests::WebhookStatus;
use nimbus_shared::ports::JobOutcome;
use nimbus_shared::webhooks::delivery::RETRY_DELAYS;
use nimbus_shared::webhooks::SigningSecret;
use serde_json::{json, Value};
use std::time::Duration;

/// The stored delivery's attempts as (status, error?) pairs.
async fn attempts(h: &AsyncHarness, id: &str) -> Vec<(Option<u64>, bool)> {
    h.stored(id).await["delivery"]["attempts"]
        .as_array()
        .unwrap()
        .iter()
        .map(|a| (a["status"].as_u64(), a["error"].is_string()))
        .collect()
}

async fn next_attempt_at(h: &AsyncHarness, id: &str) -> i64 {
    h.stored(id).await["delivery"]["next_attempt_at_ms"].as_i64().unwrap()
}

#[tokio::test]
async fn a_receiver_that_fails_then_recovers_gets_every_attempt_with_the_same_webhook_id() {
    let h = AsyncHarness::embedded(settings());
    h.receiver.then([Reply::Status(500), Reply::Timeout]);
    let id = h.submit(submission("retry-me", json!({}))).await;
    h.queue.take_sent();
    assert_eq!(h.run_request(&id).await, JobOutcome::Done);
    let view = h.view(&id).await;
    assert_eq!(
        (view.status, view.webhook_status),
        ("SUCCEEDED", WebhookStatus::Pending)
    );
    assert_eq!(attempts(&h, &id).await, [(Some(500), true)]);

    // The next attempt is due within the first delay (plus jitter), by a delayed message; the
    // scheduler looks as long again later (at most a lease), in case the message is lost.
    let first_at = h.stored(&id).await["delivery"]["attempts"][0]["at_ms"]
        .as_i64()
        .unwrap();
    let due = next_attempt_at(&h, &id).await;
    assert!((10_000..=11_000).contains(&(due - first_at)), "{}", due - first_at);
    let look = h.due_at(&id).await.unwrap() - due;
    assert!((10_000..=11_000).contains(&look), "{look}");
    let queued = h.take_deliveries(&id);
    assert_eq!(queued.len(), 1);
    assert_eq!(queued[0].0, 2, "the message names the attempt it makes");
    assert!(queued[0].1 >= Duration::from_secs(9) && queued[0].1 <= Duration::from_secs(11));

    // Early, stale and duplicate messages do nothing.
    assert!(
        matches!(h.deliver(&id, 2).await, JobOutcome::Retry { .. }),
        "not due yet"
    );
    assert_eq!(h.deliver(&id, 1).await, JobOutcome::Done, "attempt 1 was made");
    assert_eq!(h.deliver(&id, 3).await, JobOutcome::Done, "attempt 3 is not next");
    assert_eq!(h.posts_for(&id).len(), 1);

    h.advance_to(due);
    assert_eq!(h.deliver(&id, 2).await, JobOutcome::Done);
    assert_eq!(attempts(&h, &id).await, [(Some(500), true), (None, true)]);
    let queued = h.take_deliveries(&id);
    assert_eq!(queued.iter().map(|q| q.0).collect::<Vec<_>>(), [3]);
    h.advance_to(next_attempt_at(&h, &id).await);
    assert_eq!(h.deliver(&id, 3).await, JobOutcome::Done);
    assert_eq!(
        attempts(&h, &id).await,
        [(Some(500), true), (None, true), (Some(200), false)]
    );

    let view = h.view(&id).await;
    assert_eq!(
        (view.status, view.webhook_status),
        ("SUCCEEDED", WebhookStatus::Succeeded)
    );
    assert_eq!(view.webhook.as_ref().unwrap().attempts.len(), 3);
    let posts = h.posts_for(&id);
    assert_eq!(posts.len(), 3);
    let output = h.saved_output(&id).await.unwrap();
    for post in &posts {
        assert_eq!(post.header("webhook-id"), Some(format!("msg_{id}").as_str()));
        assert_standard_signature(post, SECRET);
        assert_baseten_signature(post, SECRET);
        assert_eq!(post.json()["data"]["output"], output);
        assert_eq!(post.json()["request_id"], id.as_str());
    }
    // Each attempt is signed at its own time.
    let stamps: Vec<i64> = posts
        .iter()
        .map(|p| p.header("webhook-timestamp").unwrap().parse().unwrap())
        .collect();
    assert!(stamps.windows(2).all(|w| w[0] < w[1]), "{stamps:?}");

    // Anything delivered after the success does nothing.
    assert_eq!(h.deliver(&id, 3).await, JobOutcome::Done);
    assert_eq!(h.deliver(&id, 4).await, JobOutcome::Done);
    assert_eq!(h.posts_for(&id).len(), 3);
    assert_eq!(h.due_at(&id).await, Some(h.purge_at_ms(&id).await));
    assert_eq!((h.model.calls(), h.events.outputs_saved()), (1, 1));
}

#[tokio::test]
async fn a_receiver_that_always_fails_ends_webhook_failed_after_the_whole_schedule_and_the_output_stays() {
    let h = AsyncHarness::embedded(settings());
    h.receiver.otherwise(Reply::Status(503));
    let id = h.submit(submission("unlucky", json!({}))).await;
    assert_eq!(h.run_request(&id).await, JobOutcome::Done);
    // Attempts due within 15 minutes come by delayed messages, later ones from the scheduler.
    h.settle(&id, Vec::new(), 30).await;

    let posts = h.posts_for(&id);
    assert_eq!(posts.len(), RETRY_DELAYS.len() + 1);
    assert!(posts
        .iter()
        .all(|p| p.header("webhook-id") == Some(format!("msg_{id}").as_str())));
    let stored = h.stored(&id).await;
    let at: Vec<i64> = stored["delivery"]["attempts"]
        .as_array()
        .unwrap()
        .iter()
        .map(|a| a["at_ms"].as_i64().unwrap())
        .collect();
    for (gap, delay) in at.windows(2).map(|w| w[1] - w[0]).zip(RETRY_DELAYS) {
        let delay = i64::try_from(delay.as_millis()).unwrap();
        assert!(gap >= delay && gap <= delay + delay / 10 + 1000, "{gap} vs {delay}");
    }
    assert!(
        at.last().unwrap() - at[0] >= 24 * 3600 * 1000,
        "the schedule spans a day"
    );

    let view = h.view(&id).await;
    assert_eq!(
        (view.status, view.webhook_status),
        ("WEBHOOK_FAILED", WebhookStatus::Failed)
    );
    assert_eq!(view.webhook.as_ref().unwrap().attempts.len(), posts.len());
    assert_eq!(view.webhook.as_ref().unwrap().next_attempt_at, None);
    let output = h.saved_output(&id).await.unwrap();
    assert_eq!(view.output, Some(output.clone()), "the output is still served");
    let served: Value = serde_json::from_slice(&h.api.output(&project(), &id).await.unwrap()).unwrap();
    assert_eq!(served, output);

    // Nothing more is tried.
    h.queue.take_sent();
    assert_eq!(h.schedule_pass().await["deliveries_queued"], 0);
    assert_eq!(h.deliver(&id, 9).await, JobOutcome::Done);
    assert_eq!(h.posts_for(&id).len(), posts.len());
    assert_eq!(h.due_at(&id).await, Some(h.purge_at_ms(&id).await));
}

#[tokio::test]
async fn a_410_or_a_redirect_stops_the_delivery_at_once() {
    for status in [410, 301] {
        let h = AsyncHarness::embedded(settings());
        h.receiver.then([Reply::Status(status)]);
        let id = h.submit(submission("gone", json!({}))).await;
        h.queue.take_sent();
        assert_eq!(h.run_request(&id).await, JobOutcome::Done);
        let view = h.view(&id).await;
        assert_eq!(
            (view.status, view.webhook_status),
            ("WEBHOOK_FAILED", WebhookStatus::Failed),
            "{status}"
        );
        assert_eq!(attempts(&h, &id).await, [(Some(u64::from(status)), true)]);
        assert!(h.take_deliveries(&id).is_empty(), "{status}: no retry is queued");
        assert!(view.output.is_some());
        h.advance(Duration::from_secs(3600));
        assert_eq!(h.schedule_pass().await["deliveries_queued"], 0);
        assert_eq!(h.posts_for(&id).len(), 1);
    }
}

#[tokio::test]
async fn a_429_with_retry_after_waits_longer_than_the_schedule() {
    let h = AsyncHarness::embedded(settings());
    h.receiver
        .then([Reply::StatusRetryAfter(429, Duration::from_secs(120))]);
    let id = h.submit(submission("slow-down", json!({}))).await;
    assert_eq!(h.run_request(&id).await, JobOutcome::Done);
    let stored = h.stored(&id).await;
    let first = stored["delivery"]["attempts"][0]["at_ms"].as_i64().unwrap();
    let due = next_attempt_at(&h, &id).await;
    assert!(due - first >= 120_000, "{}", due - first);
    h.advance(Duration::from_secs(60));
    assert!(matches!(h.deliver(&id, 2).await, JobOutcome::Retry { .. }));
    assert_eq!(h.posts_for(&id).len(), 1);
    h.advance_to(due);
    assert_eq!(h.deliver(&id, 2).await, JobOutcome::Done);
    assert_eq!(h.view(&id).await.webhook_status, WebhookStatus::Succeeded);
}

#[tokio::test]
async fn every_unexpired_secret_signs_during_a_rotation() {
    let h = AsyncHarness::embedded(settings());
    let newer = SigningSecret::generate();
    h.secrets.set(PROJECT, &[newer.as_str(), SECRET]);
    let id = h.submit(submission("rotating", json!({}))).await;
    assert_eq!(h.run_request(&id).await, JobOutcome::Done);
    let post = &h.posts_for(&id)[0];
    assert_eq!(post.header("webhook-signature").unwrap().split(' ').count(), 2);
    assert_eq!(post.header("x-baseten-signature").unwrap().split(',').count(), 2);
    for secret in [newer.as_str(), SECRET] {
        assert_standard_signature(post, secret);
        assert_baseten_signature(post, secret);
    }
}

#[tokio::test]
async fn without_a_secret_nothing_is_sent_unless_unsigned_webhooks_are_allowed() {
    let h = AsyncHarness::embedded(settings());
    h.secrets.set(PROJECT, &[]);
    let id = h.submit(submission("unsigned", json!({}))).await;
    assert_eq!(h.run_request(&id).await, JobOutcome::Done);
    assert!(h.receiver.posts().is_empty(), "not sent unsigned");
    let stored = h.stored(&id).await;
    let attempt = &stored["delivery"]["attempts"][0];
    assert!(
        attempt["error"].as_str().unwrap().contains("no webhook secret"),
        "{attempt}"
    );
    assert_eq!(attempt["status"], Value::Null);
    assert_eq!(h.view(&id).await.webhook_status, WebhookStatus::Pending);
    // A secret created meanwhile signs the next attempt.
    h.secrets.set(PROJECT, &[SECRET]);
    h.settle(&id, Vec::new(), 5).await;
    let posts = h.posts_for(&id);
    assert_eq!(posts.len(), 1);
    assert_standard_signature(&posts[0], SECRET);
    assert_eq!(h.view(&id).await.webhook_status, WebhookStatus::Succeeded);

    let mut allowing = settings();
    allowing.allow_unsigned_webhooks = true;
    let h = AsyncHarness::embedded(allowing);
    h.secrets.set(PROJECT, &[]);
    let id = h.submit(submission("unsigned", json!({}))).await;
    assert_eq!(h.run_request(&id).await, JobOutcome::Done);
    let posts = h.posts_for(&id);
    assert_eq!(posts.len(), 1);
    assert_eq!(posts[0].header("webhook-signature"), None);
    assert_eq!(posts[0].header("x-baseten-signature"), None);
    assert_eq!(posts[0].header("x-baseten-request-id"), Some(id.as_str()));
    assert_eq!(h.view(&id).await.webhook_status, WebhookStatus::Succeeded);
}

#[tokio::test]
async fn the_scheduler_does_not_duplicate_a_delivery_its_message_covers() {
    let h = AsyncHarness::embedded(settings());
    h.receiver.then([Reply::Status(500)]);
    let retried = h.submit(submission("retried", json!({}))).await;
    assert_eq!(h.run_request(&retried).await, JobOutcome::Done);
    let canceled = h.submit(submission("canceled", json!({}))).await;
    assert!(h.api.cancel(&project(), &canceled).await.unwrap().canceled);
    h.queue.take_sent();

    // Right away, and when the retry comes due, the messages sent cover both deliveries.
    assert_eq!(h.schedule_pass().await["deliveries_queued"], 0);
    h.advance_to(next_attempt_at(&h, &retried).await);
    assert_eq!(h.schedule_pass().await["deliveries_queued"], 0);
    assert!(h.queue.take_sent().is_empty(), "no second message for the same attempt");

    // Messages lost: a lease later the scheduler queues them again.
    h.advance(settings().lease);
    assert_eq!(h.schedule_pass().await["deliveries_queued"], 2);
    let mut queued: Vec<_> = h.queue.take_sent().into_iter().map(|sent| sent.job).collect();
    queued.sort_by_key(|job| format!("{job:?}"));
    let mut expected = vec![deliver_job(&retried, 2), deliver_job(&canceled, 1)];
    expected.sort_by_key(|job| format!("{job:?}"));
    assert_eq!(queued, expected);
    assert_eq!(h.deliver(&retried, 2).await, JobOutcome::Done);
    assert_eq!(h.deliver(&canceled, 1).await, JobOutcome::Done);
    assert_eq!(h.view(&retried).await.webhook_status, WebhookStatus::Succeeded);
    assert_eq!(h.view(&canceled).await.webhook_status, WebhookStatus::Succeeded);
}
