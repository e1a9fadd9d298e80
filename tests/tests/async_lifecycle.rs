//! An async request's life on the embedded adapters: submit, run, output, signed webhook; model
//! retries and their backoff; expiry in the queue (by a worker and by the scheduler); cancel;
//! tenant isolation; priority order; model slots shared with batches; purge after retention.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use nimbus_integration_tests::async_harness::{
    assert_baseten_signature, assert_standard_signature, deliver_job, output_key, project, run_job, settings,
    submission, AsyncHarness, Event, ModelStep, Reply, SentJob, MODEL, OTHER_PROJECT, SECRET, WEBHOOK_URL,
};
use nimbus_shared::async_requests::{AsyncError, ListAsyncRequests, WebhookStatus};
use nimbus_shared::jobs::JobMessage;
use nimbus_shared::model_slots::{self, SlotRequest};
use nimbus_shared::ports::ProjectId;
use nimbus_shared::ports::{JobOutcome, Priority};
use serde_json::{json, Value};
use std::time::Duration;

fn retry(ms: u64) -> JobOutcome {
    JobOutcome::Retry {
        retry_after: Duration::from_millis(ms),
    }
}

fn retry_after_ms(outcome: JobOutcome) -> u64 {
    match outcome {
        JobOutcome::Retry { retry_after } => u64::try_from(retry_after.as_millis()).unwrap(),
        JobOutcome::Done => panic!("expected a retry, got Done"),
    }
}

/// The wait the stored request asks for before its next attempt, from its last attempt's end.
async fn stored_backoff_ms(h: &AsyncHarness, id: &str) -> i64 {
    let stored = h.stored(id).await;
    let finished = stored["attempts"].as_array().unwrap().last().unwrap()["finished_at_ms"]
        .as_i64()
        .unwrap();
    stored["next_run_at_ms"].as_i64().unwrap() - finished
}

fn error_codes(body: &Value) -> Vec<String> {
    body["errors"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["code"].as_str().unwrap().to_owned())
        .collect()
}

// The happy path ---------------------------------------------------------------------------------

#[tokio::test]
async fn a_request_runs_once_saves_its_output_and_sends_one_signed_webhook() {
    let h = AsyncHarness::embedded(settings());
    let id = h.submit(submission("hello", json!({}))).await;

    let queued = h.view(&id).await;
    assert_eq!(
        (queued.status, queued.webhook_status),
        ("QUEUED", WebhookStatus::Pending)
    );
    assert_eq!(queued.model_id, MODEL);
    assert_eq!(queued.priority, 1, "Baseten's default priority");
    assert_eq!(
        h.queue.take_sent(),
        [SentJob {
            job: run_job(&id),
            priority: Some(Priority::P1),
            delay: Duration::ZERO
        }]
    );
    let created = h.record(&id).await.created_at_ms;
    assert_eq!(h.due_at(&id).await, Some(created + 600_000), "the expiry check is due");

    let message = h.receive().await.expect("the async_run message");
    assert_eq!(serde_json::from_str::<JobMessage>(&message.body).unwrap(), run_job(&id));
    assert_eq!(h.handle(&message).await, JobOutcome::Done);
    assert!(h.receive().await.is_none(), "nothing else was queued");

    let view = h.view(&id).await;
    assert_eq!(
        (view.status, view.webhook_status),
        ("SUCCEEDED", WebhookStatus::Succeeded)
    );
    assert!(view.errors.is_empty());
    assert!(view.started_at.is_some() && view.finished_at.is_some());
    assert_eq!(view.attempts.len(), 1);
    assert!(view.attempts[0].finished_at.is_some() && view.attempts[0].error.is_none());
    let output = h.saved_output(&id).await.expect("the output blob");
    assert_eq!(output["choices"][0]["message"]["content"], "echo:hello");
    assert_eq!(view.output.as_ref(), Some(&output), "small outputs are inline");
    let served: Value = serde_json::from_slice(&h.api.output(&project(), &id).await.unwrap()).unwrap();
    assert_eq!(served, output);

    let posts = h.posts_for(&id);
    assert_eq!(posts.len(), 1, "exactly one webhook");
    let post = &posts[0];
    assert_eq!(post.url, WEBHOOK_URL);
    assert_eq!(post.header("content-type"), Some("application/json"));
    assert_eq!(post.header("webhook-id"), Some(format!("msg_{id}").as_str()));
    assert_eq!(post.header("x-baseten-request-id"), Some(id.as_str()));
    assert_standard_signature(post, SECRET);
    assert_baseten_signature(post, SECRET);
    let body = post.json();
    assert_eq!(body["request_id"], id.as_str());
    assert_eq!(body["model_id"], MODEL);
    assert_eq!(body["type"], "async_request_completed");
    assert!(body["time"].as_str().unwrap().ends_with('Z'), "{body}");
    assert_eq!(body["data"], json!({"output": output}));
    assert_eq!(body["errors"], json!([]));

    let webhook = view.webhook.expect("the webhook's delivery");
    assert_eq!(webhook.webhook_id.as_deref(), Some(format!("msg_{id}").as_str()));
    assert_eq!(webhook.attempts.len(), 1);
    assert_eq!(webhook.attempts[0].status_code, Some(200));
    assert_eq!(webhook.next_attempt_at, None);
    assert_eq!(
        h.due_at(&id).await,
        Some(h.purge_at_ms(&id).await),
        "the next look is the purge"
    );
    assert!(matches!(
        h.events.all().as_slice(),
        [Event::ModelCall(_), Event::OutputSaved(_), Event::WebhookPost(_)]
    ));

    // A duplicate of the message, and a scheduler pass, change nothing.
    assert_eq!(h.run_request(&id).await, JobOutcome::Done);
    assert_eq!(h.schedule_pass().await["due"], 0);
    assert_eq!((h.model.calls(), h.receiver.posts().len()), (1, 1));
}

#[tokio::test]
async fn without_a_webhook_the_result_is_polled() {
    let h = AsyncHarness::embedded(settings());
    let id = h
        .submit(json!({"model_input": {"model": MODEL, "messages": [{"role": "user", "content": "poll"}]}}))
        .await;
    assert_eq!(h.run_request(&id).await, JobOutcome::Done);
    let view = h.view(&id).await;
    assert_eq!(
        (view.status, view.webhook_status),
        ("SUCCEEDED", WebhookStatus::NoWebhookProvided)
    );
    assert!(view.webhook.is_none());
    assert_eq!(view.output.unwrap()["choices"][0]["message"]["content"], "echo:poll");
    assert!(h.receiver.posts().is_empty());
}

#[tokio::test]
async fn an_output_over_the_inline_limit_is_linked_to_the_apis_own_route_where_the_store_makes_no_links() {
    let mut settings = settings();
    settings.inline_output_limit = 16;
    let h = AsyncHarness::embedded(settings);
    let id = h.submit(submission("large", json!({}))).await;
    assert_eq!(h.run_request(&id).await, JobOutcome::Done);
    let view = h.view(&id).await;
    assert_eq!(view.output, None);
    assert_eq!(view.output_url, Some(format!("/async_request/{id}/output")));
    let served: Value = serde_json::from_slice(&h.api.output(&project(), &id).await.unwrap()).unwrap();
    assert_eq!(Some(served), h.saved_output(&id).await);
}

#[tokio::test]
async fn after_the_retention_the_scheduler_deletes_the_request_and_its_output() {
    let h = AsyncHarness::embedded(settings());
    let id = h.submit(submission("short-lived", json!({}))).await;
    assert_eq!(h.run_request(&id).await, JobOutcome::Done);
    let purge_at = h.due_at(&id).await.unwrap();
    h.advance_to(purge_at - 1000);
    assert_eq!(h.schedule_pass().await["purged"], 0);
    assert!(h.saved_output(&id).await.is_some());
    h.advance_to(purge_at);
    let report = h.schedule_pass().await;
    assert_eq!(
        (report["purged"].clone(), report["errors"].clone()),
        (json!(1), json!(0))
    );
    assert!(h.blobs.size(&output_key(&id)).await.unwrap().is_none());
    assert!(matches!(h.api.get(&project(), &id).await, Err(AsyncError::NotFound(_))));
    assert_eq!(h.due_at(&id).await, None);
}

// Retries ----------------------------------------------------------------------------------------

#[tokio::test]
async fn a_model_failing_twice_with_500_then_answering_succeeds_on_the_third_attempt() {
    let h = AsyncHarness::embedded(settings());
    h.model.fail_times(2, 500);
    let config = json!({"inference_retry_config": {"max_attempts": 3, "initial_delay_ms": 1000, "max_delay_ms": 1500}});
    let id = h.submit(submission("flaky", config)).await;

    assert_eq!(h.run_request(&id).await, retry(1000));
    assert_eq!(stored_backoff_ms(&h, &id).await, 1000);
    let between = h.view(&id).await;
    assert_eq!(between.status, "IN_PROGRESS");
    assert_eq!(between.attempts.len(), 1);
    assert_eq!(between.attempts[0].error.as_ref().unwrap().code, "MODEL_PREDICT_ERROR");

    // Delivered again too early: it waits, and the model is not called.
    let early = retry_after_ms(h.run_request(&id).await);
    assert!((100..=1000).contains(&early), "{early}");
    assert_eq!(h.model.calls(), 1);

    h.advance(Duration::from_millis(1000));
    assert_eq!(h.run_request(&id).await, retry(1500), "2000 ms capped at max_delay_ms");
    assert_eq!(stored_backoff_ms(&h, &id).await, 1500);
    h.advance(Duration::from_millis(1500));
    assert_eq!(h.run_request(&id).await, JobOutcome::Done);

    let view = h.view(&id).await;
    assert_eq!(view.status, "SUCCEEDED");
    assert!(view.errors.is_empty());
    let codes: Vec<Option<String>> = view
        .attempts
        .iter()
        .map(|a| a.error.as_ref().map(|e| e.code.clone()))
        .collect();
    assert_eq!(
        codes,
        [
            Some("MODEL_PREDICT_ERROR".to_owned()),
            Some("MODEL_PREDICT_ERROR".to_owned()),
            None
        ]
    );
    assert_eq!(h.model.calls(), 3);
    assert_eq!(h.events.outputs_saved(), 1);
    assert_eq!(h.posts_for(&id).len(), 1);
}

#[tokio::test]
async fn backoff_doubles_per_attempt_up_to_max_delay_ms() {
    let h = AsyncHarness::embedded(settings());
    h.model.fail_times(4, 503);
    let config = json!({"inference_retry_config": {"max_attempts": 5, "initial_delay_ms": 100, "max_delay_ms": 300}});
    let id = h.submit(submission("backoff", config)).await;
    let mut waits = Vec::new();
    let outcome = loop {
        let outcome = h.run_request(&id).await;
        let JobOutcome::Retry { retry_after } = outcome else {
            break outcome;
        };
        waits.push(retry_after.as_millis());
        assert_eq!(
            i128::from(stored_backoff_ms(&h, &id).await),
            retry_after.as_millis() as i128
        );
        h.advance(retry_after);
    };
    assert_eq!(outcome, JobOutcome::Done);
    assert_eq!(waits, [100, 200, 300, 300]);
    assert_eq!(h.view(&id).await.status, "SUCCEEDED");
    assert_eq!(h.model.calls(), 5);
}

#[tokio::test]
async fn retries_stop_at_max_attempts_and_the_request_fails() {
    let h = AsyncHarness::embedded(settings());
    h.model.then([
        ModelStep::Fail {
            status: 502,
            retry_after: None,
        },
        ModelStep::Timeout,
    ]);
    let config = json!({"inference_retry_config": {"max_attempts": 2, "initial_delay_ms": 0, "max_delay_ms": 0}});
    let id = h.submit(submission("gives-up", config)).await;
    assert!(matches!(h.run_request(&id).await, JobOutcome::Retry { .. }));
    h.advance(Duration::from_millis(100));
    assert_eq!(h.run_request(&id).await, JobOutcome::Done);
    let view = h.view(&id).await;
    assert_eq!(view.status, "FAILED");
    assert_eq!(view.attempts.len(), 2);
    assert_eq!(view.errors.len(), 1);
    assert_eq!(view.errors[0].code, "MODEL_PREDICT_TIMEOUT");
    assert_eq!(h.model.calls(), 2);
    assert!(h.saved_output(&id).await.is_none());
    let post = &h.posts_for(&id)[0];
    assert_eq!(post.json()["data"], Value::Null);
    assert_eq!(error_codes(&post.json()), ["MODEL_PREDICT_TIMEOUT"]);
}

#[tokio::test]
async fn a_4xx_from_the_model_fails_at_once() {
    let h = AsyncHarness::embedded(settings());
    h.model.fail_times(1, 400);
    let id = h.submit(submission("bad-input", json!({}))).await;
    assert_eq!(h.run_request(&id).await, JobOutcome::Done);
    let view = h.view(&id).await;
    assert_eq!(view.status, "FAILED");
    assert_eq!(view.attempts.len(), 1);
    assert_eq!(view.errors[0].code, "MODEL_INVALID_INPUT");
    assert_eq!(h.model.calls(), 1);
    let posts = h.posts_for(&id);
    assert_eq!(posts.len(), 1);
    assert_eq!(posts[0].json()["data"], Value::Null);
    assert_eq!(error_codes(&posts[0].json()), ["MODEL_INVALID_INPUT"]);
    assert_standard_signature(&posts[0], SECRET);
    // Nothing comes back for it.
    assert_eq!(h.run_request(&id).await, JobOutcome::Done);
    assert_eq!(h.model.calls(), 1);
}

#[tokio::test]
async fn a_429_waits_at_least_its_retry_after() {
    let h = AsyncHarness::embedded(settings());
    h.model.then([ModelStep::Fail {
        status: 429,
        retry_after: Some(Duration::from_secs(7)),
    }]);
    let config = json!({"inference_retry_config": {"max_attempts": 3, "initial_delay_ms": 100, "max_delay_ms": 1000}});
    let id = h.submit(submission("throttled", config)).await;
    assert_eq!(h.run_request(&id).await, retry(7000));
    assert_eq!(stored_backoff_ms(&h, &id).await, 7000);
    assert_eq!(
        h.view(&id).await.attempts[0].error.as_ref().unwrap().code,
        "MODEL_UNAVAILABLE"
    );
    h.advance(Duration::from_secs(6));
    assert!(matches!(h.run_request(&id).await, JobOutcome::Retry { .. }));
    assert_eq!(h.model.calls(), 1, "not called before the Retry-After");
    h.advance(Duration::from_secs(1));
    assert_eq!(h.run_request(&id).await, JobOutcome::Done);
    assert_eq!(h.view(&id).await.status, "SUCCEEDED");
    assert_eq!(h.model.calls(), 2);
}

// Expiry -----------------------------------------------------------------------------------------

#[tokio::test]
async fn a_message_picked_up_after_the_deadline_expires_the_request() {
    let h = AsyncHarness::embedded(settings());
    let id = h
        .submit(submission("late", json!({"max_time_in_queue_seconds": 10})))
        .await;
    h.advance(Duration::from_secs(11));
    assert_eq!(h.run_request(&id).await, JobOutcome::Done);
    let view = h.view(&id).await;
    assert_eq!(
        (view.status, view.webhook_status),
        ("EXPIRED", WebhookStatus::Succeeded)
    );
    assert_eq!(view.errors[0].code, "ASYNC_REQUEST_EXPIRED");
    assert!(view.attempts.is_empty());
    assert_eq!(h.model.calls(), 0);
    let posts = h.posts_for(&id);
    assert_eq!(posts.len(), 1);
    assert_eq!(posts[0].json()["data"], Value::Null);
    assert_eq!(error_codes(&posts[0].json()), ["ASYNC_REQUEST_EXPIRED"]);
    assert_standard_signature(&posts[0], SECRET);
    assert_baseten_signature(&posts[0], SECRET);
    assert_eq!(h.due_at(&id).await, Some(h.purge_at_ms(&id).await));
}

#[tokio::test]
async fn the_scheduler_expires_a_queued_request_no_worker_took() {
    let h = AsyncHarness::embedded(settings());
    let id = h
        .submit(submission("never-run", json!({"max_time_in_queue_seconds": 10})))
        .await;
    h.queue.take_sent();
    h.advance(Duration::from_secs(5));
    assert_eq!(h.schedule_pass().await["due"], 0);
    assert_eq!(h.view(&id).await.status, "QUEUED");

    h.advance(Duration::from_secs(5));
    let report = h.schedule_pass().await;
    assert_eq!(
        (report["expired"].clone(), report["errors"].clone()),
        (json!(1), json!(0))
    );
    let view = h.view(&id).await;
    assert_eq!((view.status, view.webhook_status), ("EXPIRED", WebhookStatus::Pending));
    assert_eq!(
        h.queue.take_sent(),
        [SentJob {
            job: deliver_job(&id, 1),
            priority: Some(Priority::P1),
            delay: Duration::ZERO
        }],
        "its delivery is queued"
    );
    assert!(h.receiver.posts().is_empty(), "the scheduler sends no webhook itself");

    assert_eq!(h.deliver(&id, 1).await, JobOutcome::Done);
    let posts = h.posts_for(&id);
    assert_eq!(posts.len(), 1);
    assert_eq!(error_codes(&posts[0].json()), ["ASYNC_REQUEST_EXPIRED"]);
    assert_eq!(h.view(&id).await.webhook_status, WebhookStatus::Succeeded);
    assert_eq!(h.due_at(&id).await, Some(h.purge_at_ms(&id).await));

    // The original message, when a worker gets to it, does nothing.
    assert_eq!(h.run_request(&id).await, JobOutcome::Done);
    assert_eq!((h.model.calls(), h.receiver.posts().len()), (0, 1));
    assert_eq!(h.schedule_pass().await["due"], 0);
}

// Cancel -----------------------------------------------------------------------------------------

#[tokio::test]
async fn canceling_a_queued_request_ends_it_and_its_webhook_says_so() {
    let h = AsyncHarness::embedded(settings());
    let id = h.submit(submission("cancel-me", json!({}))).await;
    h.queue.take_sent();
    let outcome = h.api.cancel(&project(), &id).await.unwrap();
    assert!(outcome.canceled, "{outcome:?}");
    assert_eq!(outcome.request_id, id);
    let view = h.view(&id).await;
    assert_eq!((view.status, view.webhook_status), ("CANCELED", WebhookStatus::Pending));
    assert_eq!(view.errors[0].code, "ASYNC_REQUEST_CANCELED");
    assert_eq!(h.take_deliveries(&id), [(1, Duration::ZERO)]);

    assert_eq!(h.deliver(&id, 1).await, JobOutcome::Done);
    let posts = h.posts_for(&id);
    assert_eq!(posts.len(), 1);
    assert_eq!(posts[0].json()["data"], Value::Null);
    assert_eq!(error_codes(&posts[0].json()), ["ASYNC_REQUEST_CANCELED"]);
    assert_standard_signature(&posts[0], SECRET);

    assert_eq!(h.run_request(&id).await, JobOutcome::Done);
    assert_eq!(h.model.calls(), 0, "a canceled request never runs");
    let again = h.api.cancel(&project(), &id).await.unwrap();
    assert!(!again.canceled);
    assert!(again.message.contains("CANCELED"), "{}", again.message);
}

#[tokio::test]
async fn running_and_finished_requests_are_not_canceled() {
    let h = AsyncHarness::embedded(settings());
    h.model.then([ModelStep::Hold]);
    let id = h.submit(submission("busy", json!({}))).await;
    let run = h.spawn_run(&run_job(&id));
    while h.model.holding() == 0 {
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    let outcome = h.api.cancel(&project(), &id).await.unwrap();
    assert!(!outcome.canceled);
    assert!(outcome.message.contains("IN_PROGRESS"), "{}", outcome.message);
    h.model.release();
    assert_eq!(run.await.unwrap(), JobOutcome::Done);
    assert_eq!(h.view(&id).await.status, "SUCCEEDED");
    let outcome = h.api.cancel(&project(), &id).await.unwrap();
    assert!(!outcome.canceled);
    assert!(outcome.message.contains("SUCCEEDED"), "{}", outcome.message);
    assert_eq!(h.view(&id).await.status, "SUCCEEDED");
}

#[tokio::test]
async fn another_projects_ids_are_not_found_everywhere() {
    let h = AsyncHarness::embedded(settings());
    let id = h.submit(submission("mine", json!({}))).await;
    let other_id = h.submit_for(OTHER_PROJECT, submission("theirs", json!({}))).await;
    assert_eq!(h.run_request(&id).await, JobOutcome::Done);

    let not_found = |result: Result<(), AsyncError>| matches!(result, Err(AsyncError::NotFound(_)));
    assert!(not_found(
        h.api.get(&ProjectId::new(OTHER_PROJECT), &id).await.map(drop)
    ));
    assert!(not_found(
        h.api.output(&ProjectId::new(OTHER_PROJECT), &id).await.map(drop)
    ));
    assert!(not_found(
        h.api.cancel(&ProjectId::new(OTHER_PROJECT), &id).await.map(drop)
    ));
    let after_theirs = ListAsyncRequests {
        after: Some(id.clone()),
        ..ListAsyncRequests::default()
    };
    assert!(not_found(
        h.api
            .list(&ProjectId::new(OTHER_PROJECT), &after_theirs)
            .await
            .map(drop)
    ));
    let theirs = h
        .api
        .list(&ProjectId::new(OTHER_PROJECT), &ListAsyncRequests::default())
        .await
        .unwrap();
    let ids: Vec<&str> = theirs.data.iter().map(|v| v.request_id.as_str()).collect();
    assert_eq!(ids, [other_id.as_str()]);
    let mine = h.api.list(&project(), &ListAsyncRequests::default()).await.unwrap();
    let ids: Vec<&str> = mine.data.iter().map(|v| v.request_id.as_str()).collect();
    assert_eq!(ids, [id.as_str()]);
    // The other project's cancel attempt changed nothing.
    assert_eq!(h.view(&id).await.status, "SUCCEEDED");
    assert_eq!(
        h.api
            .get(&ProjectId::new(OTHER_PROJECT), &other_id)
            .await
            .unwrap()
            .status,
        "QUEUED"
    );
}

// Priority and model slots -----------------------------------------------------------------------

#[tokio::test]
async fn one_worker_takes_priority_0_before_2() {
    let h = AsyncHarness::embedded(settings());
    let mut low = Vec::new();
    for i in 0..20 {
        low.push(h.submit(submission(&format!("low-{i}"), json!({"priority": 2}))).await);
    }
    let mut high = Vec::new();
    for i in 0..3 {
        high.push(h.submit(submission(&format!("high-{i}"), json!({"priority": 0}))).await);
    }
    let normal = h.submit(submission("normal", json!({}))).await;
    let mut order = Vec::new();
    while let Some(message) = h.receive().await {
        let JobMessage::AsyncRun { request_id } = serde_json::from_str(&message.body).unwrap() else {
            panic!("{}", message.body)
        };
        assert_eq!(h.handle(&message).await, JobOutcome::Done);
        order.push(request_id.to_string());
    }
    let expected: Vec<String> = high.into_iter().chain([normal]).chain(low).collect();
    assert_eq!(order, expected);
    // Run in that order: the model saw the priority-0 requests first.
    let contents: Vec<String> = h
        .events
        .all()
        .into_iter()
        .filter_map(|e| match e {
            Event::ModelCall(content) => Some(content),
            _ => None,
        })
        .take(4)
        .collect();
    assert_eq!(contents, ["high-0", "high-1", "high-2", "normal"]);
}

#[tokio::test]
async fn a_run_waits_for_a_model_slot_held_by_a_batch() {
    let mut settings = settings();
    settings.model_limits.insert(MODEL.to_owned(), 1);
    let h = AsyncHarness::embedded(settings);
    let id = h.submit(submission("slotted", json!({}))).await;
    let now = h.now_ms();
    let batch_line = SlotRequest {
        model: MODEL,
        limit: 1,
        want: 1,
        token: "batch_1.00000",
        now_ms: now,
        until_ms: now + 3_600_000,
        waiting: None,
    };
    assert_eq!(model_slots::acquire(h.state.as_ref(), batch_line).await.unwrap(), 1);

    // No free slot: the model is not called, and the run is queued again with a fresh message
    // (retrying the same one would count toward its dead-letter limit however long it waits).
    h.queue.take_sent();
    assert_eq!(h.run_request(&id).await, JobOutcome::Done);
    assert_eq!(h.model.calls(), 0, "no free slot: the model is not called");
    let view = h.view(&id).await;
    assert_eq!(view.status, "QUEUED");
    assert!(view.attempts.is_empty());
    let again = |delay_s| SentJob {
        job: run_job(&id),
        priority: Some(Priority::P1),
        delay: Duration::from_secs(delay_s),
    };
    assert_eq!(h.queue.take_sent(), [again(2)]);
    // The longer it has waited, the longer the next wait (a tenth of it, at most a minute).
    h.advance(Duration::from_secs(300));
    assert_eq!(h.run_request(&id).await, JobOutcome::Done);
    assert_eq!(h.queue.take_sent(), [again(30)]);
    h.advance(Duration::from_secs(250));
    assert_eq!(h.run_request(&id).await, JobOutcome::Done);
    assert_eq!(h.queue.take_sent(), [again(55)]);
    assert_eq!(h.model.calls(), 0);

    model_slots::release(h.state.as_ref(), h.queue.as_ref(), MODEL, "batch_1.00000", h.now_ms())
        .await
        .unwrap();
    assert_eq!(h.run_request(&id).await, JobOutcome::Done);
    assert_eq!(h.view(&id).await.status, "SUCCEEDED");
    assert_eq!(h.model.calls(), 1);
    // The run handed its slot back.
    let again = SlotRequest {
        now_ms: h.now_ms(),
        ..batch_line
    };
    assert_eq!(model_slots::acquire(h.state.as_ref(), again).await.unwrap(), 1);
}

#[tokio::test]
async fn a_hanging_webhook_receiver_does_not_hold_the_model_slot() {
    let mut settings = settings();
    settings.model_limits.insert(MODEL.to_owned(), 1);
    let h = AsyncHarness::embedded(settings);
    h.receiver.then([Reply::Hang]);
    let id = h.submit(submission("slow-receiver", json!({}))).await;
    let run = h.spawn_run(&run_job(&id));
    for _ in 0..1000 {
        if !h.receiver.posts().is_empty() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    assert_eq!(h.receiver.posts().len(), 1, "the webhook is being posted");
    let now = h.now_ms();
    let batch_line = SlotRequest {
        model: MODEL,
        limit: 1,
        want: 1,
        token: "batch_1.00000",
        now_ms: now,
        until_ms: now + 60_000,
        waiting: None,
    };
    assert_eq!(
        model_slots::acquire(h.state.as_ref(), batch_line).await.unwrap(),
        1,
        "the model answered: its slot is free while the webhook is posted"
    );
    run.abort();
}
