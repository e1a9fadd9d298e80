//! Async requests on the AWS adapters against a moto server: records and the due index in
//! DynamoDB, outputs in S3, jobs on the per-priority SQS queues.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use nimbus_integration_tests::async_harness::{
    assert_baseten_signature, assert_standard_signature, deliver_job, request_with_status, run_job, settings,
    submission, AsyncHarness, InFlight, Stack, MODEL, SECRET,
};
use nimbus_integration_tests::moto::{create_bucket, create_queue, create_state_table, MotoServer};
use nimbus_shared::adapters::aws::{DynamoDbStateStore, S3BlobStore, SqsJobQueue};
use nimbus_shared::async_requests::{AsyncSettings, WebhookStatus};
use nimbus_shared::jobs::JobMessage;
use nimbus_shared::ports::{JobOutcome, Priority};
use serde_json::{json, Value};
use std::sync::Arc;
use std::time::Duration;

/// A harness over DynamoDB, S3 and SQS (the jobs queue and one queue per priority) on `moto`.
async fn aws_harness(moto: &MotoServer) -> AsyncHarness {
    aws_harness_with(moto, settings()).await
}

async fn aws_harness_with(moto: &MotoServer, settings: AsyncSettings) -> AsyncHarness {
    let config = moto.sdk_config().await;
    create_state_table(&config, "nimbus-state").await.unwrap();
    create_bucket(&config, "nimbus-bucket").await.unwrap();
    let jobs = create_queue(&config, "nimbus-jobs").await.unwrap();
    let mut queue = SqsJobQueue::new(&config, jobs);
    for priority in Priority::ALL {
        let url = create_queue(&config, &format!("nimbus-AsyncQueueP{}", priority.level()))
            .await
            .unwrap();
        queue = queue.with_priority_queue(priority, url);
    }
    let stack = Stack {
        state: Arc::new(DynamoDbStateStore::new(&config, "nimbus-state")),
        blobs: Arc::new(S3BlobStore::new(&config, "nimbus-bucket")),
        queue: Arc::new(queue),
    };
    AsyncHarness::over(stack, settings)
}

/// The next message on any queue, read as a job.
async fn next_job(h: &AsyncHarness) -> Option<(nimbus_shared::ports::QueueMessage, JobMessage)> {
    let message = h.receive().await?;
    let job = serde_json::from_str(&message.body).unwrap();
    Some((message, job))
}

#[tokio::test]
async fn a_request_runs_through_sqs_dynamodb_and_s3() {
    let moto = MotoServer::start().unwrap();
    let h = aws_harness(&moto).await;
    let low = h.submit(submission("low", json!({"priority": 2}))).await;
    let high = h.submit(submission("high", json!({"priority": 0}))).await;
    assert_eq!(h.view(&high).await.status, "QUEUED");
    let created = h.record(&high).await.created_at_ms;
    assert_eq!(h.due_at(&high).await, Some(created + 600_000));

    // Priority 0's queue is read first.
    let mut order = Vec::new();
    while let Some((message, job)) = next_job(&h).await {
        let JobMessage::AsyncRun { request_id } = &job else {
            panic!("{job:?}")
        };
        order.push(request_id.to_string());
        assert_eq!(h.handle(&message).await, JobOutcome::Done);
    }
    assert_eq!(order, [high.clone(), low.clone()]);

    for (id, content) in [(&high, "high"), (&low, "low")] {
        let view = h.view(id).await;
        assert_eq!(
            (view.status, view.webhook_status),
            ("SUCCEEDED", WebhookStatus::Succeeded)
        );
        assert_eq!(view.model_id, MODEL);
        let output = h.saved_output(id).await.expect("the output in S3");
        assert_eq!(output["choices"][0]["message"]["content"], format!("echo:{content}"));
        assert_eq!(view.output, Some(output.clone()));
        let posts = h.posts_for(id);
        assert_eq!(posts.len(), 1);
        assert_standard_signature(&posts[0], SECRET);
        assert_baseten_signature(&posts[0], SECRET);
        assert_eq!(posts[0].json()["data"]["output"], output);
        assert_eq!(h.due_at(id).await, Some(h.purge_at_ms(id).await));
    }
    assert_eq!(h.model.calls(), 2);
    assert!(h.receive().await.is_none());
}

#[tokio::test]
async fn the_scheduler_expires_a_request_on_dynamodb_and_its_delivery_goes_through_sqs() {
    let moto = MotoServer::start().unwrap();
    let h = aws_harness(&moto).await;
    let id = h
        .submit(submission(
            "too-late",
            json!({"priority": 2, "max_time_in_queue_seconds": 10}),
        ))
        .await;
    h.advance(Duration::from_secs(10));
    let report = h.schedule_pass().await;
    assert_eq!(
        (report["expired"].clone(), report["errors"].clone()),
        (json!(1), json!(0))
    );
    assert_eq!(h.view(&id).await.status, "EXPIRED");

    // Both messages are on priority 2's queue: the run (now nothing to do) and the delivery.
    let mut jobs = Vec::new();
    while let Some((message, job)) = next_job(&h).await {
        assert_eq!(h.handle(&message).await, JobOutcome::Done);
        jobs.push(job);
    }
    assert_eq!(jobs.len(), 2, "{jobs:?}");
    assert!(jobs.contains(&run_job(&id)), "{jobs:?}");
    assert!(jobs.contains(&deliver_job(&id, 1)), "{jobs:?}");
    assert_eq!(h.model.calls(), 0);
    let posts = h.posts_for(&id);
    assert_eq!(posts.len(), 1);
    assert_eq!(posts[0].json()["data"], Value::Null);
    assert_eq!(posts[0].json()["errors"][0]["code"], "ASYNC_REQUEST_EXPIRED");
    assert_standard_signature(&posts[0], SECRET);
    assert_eq!(h.view(&id).await.webhook_status, WebhookStatus::Succeeded);
    assert_eq!(h.due_at(&id).await, Some(h.purge_at_ms(&id).await));
}

#[tokio::test]
async fn a_refused_final_write_on_dynamodb_reruns_from_the_output_in_s3() {
    let moto = MotoServer::start().unwrap();
    let h = aws_harness(&moto).await;
    let id = h.submit(submission("crash", json!({}))).await;
    let (message, _) = next_job(&h).await.unwrap();
    h.state.fail_writes(1, |r| request_with_status(r, "SUCCEEDED"));
    // The message stays with the dead worker (never settled); the scheduler brings the request
    // back once that worker's lease is over.
    assert!(matches!(
        h.worker
            .handle_until(&message.body, tokio::time::Instant::now() + Duration::from_secs(60))
            .await,
        JobOutcome::Retry { .. }
    ));
    assert_eq!(h.state.injected(), 1);
    assert!(h.saved_output(&id).await.is_some());
    h.queue.take_sent();
    h.settle(&id, Vec::<InFlight>::new(), 20).await;
    let view = h.view(&id).await;
    assert_eq!(
        (view.status, view.webhook_status),
        ("SUCCEEDED", WebhookStatus::Succeeded)
    );
    assert_eq!(h.model.calls(), 1, "the rerun found the output in S3");
    assert_eq!(h.events.outputs_saved(), 1);
    h.events.assert_no_model_call_after_output();
}

#[tokio::test]
async fn an_output_over_the_inline_limit_is_a_presigned_s3_link() {
    let moto = MotoServer::start().unwrap();
    let mut settings = settings();
    settings.inline_output_limit = 16;
    let h = aws_harness_with(&moto, settings).await;
    let id = h.submit(submission("large", json!({}))).await;
    assert_eq!(h.run_request(&id).await, JobOutcome::Done);
    let view = h.view(&id).await;
    assert_eq!(view.output, None);
    let url = view.output_url.expect("a presigned link");
    let response = reqwest::get(&url).await.unwrap();
    assert!(response.status().is_success(), "{}", response.status());
    let linked: Value = response.json().await.unwrap();
    assert_eq!(Some(linked), h.saved_output(&id).await);
}
