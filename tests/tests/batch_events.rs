//! Batch event webhooks from the batch engine, on the embedded adapters: a batch that ends is told
//! to each subscribed endpoint exactly once — even when the telling fails half-way and the
//! scheduler's recovery pass tells it again, and when the batch is finalized again.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use nimbus_integration_tests::batch_harness::{custom_ids, lines_for, project, settings, Harness, MODEL, PROJECT};
use nimbus_shared::jobs::JobMessage;
use nimbus_shared::openai::batches::BatchStatus;
use nimbus_shared::ports::{BatchId, DeliveryId, ProjectId};
use nimbus_shared::ports::{JobOutcome, StateStore, SystemClock, UuidV7Ids};
use nimbus_shared::webhooks::endpoints::BatchEventType;
use nimbus_shared::webhooks::events::{delivery_id, DELIVERY_KIND};
use nimbus_shared::webhooks::{CreateEndpointRequest, UrlPolicy, WebhookEndpoints};
use std::sync::Arc;
use std::time::Duration;

fn endpoints(h: &Harness) -> WebhookEndpoints {
    WebhookEndpoints::new(
        Arc::clone(&h.state) as Arc<dyn StateStore>,
        Arc::new(SystemClock),
        Arc::new(UuidV7Ids),
        UrlPolicy::default(),
        Arc::new(nimbus_shared::adapters::embedded::LocalSealer::in_data_dir(
            h.dir.path(),
        )),
    )
}

async fn endpoint(endpoints: &WebhookEndpoints, project: &str, events: &[&str]) -> String {
    let request = CreateEndpointRequest {
        url: "https://hooks.example.com/batches".to_owned(),
        event_types: events.iter().map(|e| (*e).to_owned()).collect(),
        name: None,
        secret: None,
    };
    endpoints
        .create(&ProjectId::new(project), request)
        .await
        .unwrap()
        .endpoint
        .id
}

/// Run every batch job on the queue; webhook jobs are taken off the queue (not run: there is no
/// receiver) and returned.
async fn run_batch_jobs(h: &Harness) -> Vec<JobMessage> {
    let mut webhook_jobs = Vec::new();
    let give_up = tokio::time::Instant::now() + Duration::from_secs(20);
    while !h.queue.is_empty() {
        assert!(tokio::time::Instant::now() < give_up, "the queue did not drain");
        let Some(message) = h.receive().await else {
            tokio::time::sleep(Duration::from_millis(20)).await;
            continue;
        };
        let job: JobMessage = serde_json::from_str(&message.body).unwrap();
        if matches!(job, JobMessage::WebhookDeliver { .. }) {
            webhook_jobs.push(job);
            h.settle(&message, JobOutcome::Done).await;
        } else {
            h.handle(&message).await;
        }
    }
    webhook_jobs
}

#[tokio::test]
async fn a_failed_telling_is_repeated_by_the_recovery_pass_without_doubling() {
    let (h, _provider) = Harness::with_model(settings(), Duration::from_millis(1));
    let endpoints = endpoints(&h);
    let first = endpoint(&endpoints, PROJECT, &["batch.completed"]).await;
    let second = endpoint(&endpoints, PROJECT, &["batch.completed", "batch.failed"]).await;
    let not_subscribed = endpoint(&endpoints, PROJECT, &["batch.cancelled"]).await;
    let other_project = endpoint(&endpoints, "another-project", &["batch.completed"]).await;

    // The second endpoint's delivery cannot be written: the first one is, then the telling fails.
    let failing_owner = second.clone();
    h.state
        .fail_writes(1, move |r| r.kind == DELIVERY_KIND && r.owner == failing_owner);
    let created = h.create_batch(&lines_for(MODEL, &custom_ids(12, None))).await;
    let mut webhook_jobs = run_batch_jobs(&h).await;
    assert_eq!(h.state.injected(), 1);
    let batch = h.batch(&created.id).await;
    assert_eq!(batch.status, BatchStatus::Completed);
    assert_eq!(h.count_records(DELIVERY_KIND, &first).await, 1);
    assert_eq!(h.count_records(DELIVERY_KIND, &second).await, 0);

    // The batch stays active until its ending is told: the recovery pass tells it again.
    h.schedule_pass().await.unwrap();
    webhook_jobs.extend(run_batch_jobs(&h).await);
    // And once it is told, another pass or finalization tells nothing more.
    h.schedule_pass().await.unwrap();
    h.schedule_pass().await.unwrap();
    webhook_jobs.extend(run_batch_jobs(&h).await);

    for endpoint in [&first, &second] {
        assert_eq!(h.count_records(DELIVERY_KIND, endpoint).await, 1, "{endpoint}");
    }
    for endpoint in [&not_subscribed, &other_project] {
        assert_eq!(h.count_records(DELIVERY_KIND, endpoint).await, 0, "{endpoint}");
    }
    let expected: Vec<JobMessage> = [&first, &second]
        .into_iter()
        .map(|endpoint| JobMessage::WebhookDeliver {
            delivery_id: delivery_id(endpoint, &BatchId::new(&created.id), BatchEventType::Completed),
            attempt: 1,
        })
        .collect();
    assert_eq!(webhook_jobs, expected, "one first attempt per endpoint");
}

#[tokio::test]
async fn a_batch_that_fails_validation_or_is_cancelled_is_told_with_its_status() {
    let (h, _provider) = Harness::with_model(settings(), Duration::from_millis(1));
    let endpoints = endpoints(&h);
    let all = endpoint(
        &endpoints,
        PROJECT,
        &["batch.completed", "batch.failed", "batch.cancelled", "batch.expired"],
    )
    .await;

    let invalid = h.create_batch(&["not json".to_owned()]).await;
    let cancelled = h.create_batch(&lines_for(MODEL, &custom_ids(5, None))).await;
    h.api
        .cancel_batch(&project(), &BatchId::new(&cancelled.id))
        .await
        .unwrap();
    let webhook_jobs = run_batch_jobs(&h).await;
    assert_eq!(h.batch(&invalid.id).await.status, BatchStatus::Failed);
    assert_eq!(h.batch(&cancelled.id).await.status, BatchStatus::Cancelled);

    let mut told: Vec<DeliveryId> = webhook_jobs
        .iter()
        .map(|job| match job {
            JobMessage::WebhookDeliver { delivery_id, .. } => delivery_id.clone(),
            other => panic!("{other:?}"),
        })
        .collect();
    told.sort();
    let mut expected = vec![
        delivery_id(&all, &BatchId::new(&invalid.id), BatchEventType::Failed),
        delivery_id(&all, &BatchId::new(&cancelled.id), BatchEventType::Cancelled),
    ];
    expected.sort();
    assert_eq!(told, expected);
}
