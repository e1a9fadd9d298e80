use super::*;
use crate::jobs::JobRunner;
use crate::ports::webhook_url::{UrlPolicy, WebhookUrl};
use crate::ports::ProjectId;
use crate::ports::Record;
use crate::ports::{JobOutcome, PostOutcome, QueueMessage, UuidV7Ids};
use crate::scheduler::ScheduledTask;
use crate::webhooks::endpoints::{CreateEndpointRequest, CreatedEndpoint};
use crate::webhooks::signing::{standard_signature, SigningSecret};
use crate::webhooks::test_support::{memory_state, test_sealer, ManualClock};
use bytes::Bytes;
use std::collections::VecDeque;
use std::sync::Mutex;

/// Messages sent, in order: (body, priority, delay).
#[derive(Default)]
struct RecordingQueue {
    sent: Mutex<Vec<(String, Priority, Duration)>>,
}

impl RecordingQueue {
    fn take(&self) -> Vec<(JobMessage, Priority, Duration)> {
        std::mem::take(&mut *self.sent.lock().unwrap())
            .into_iter()
            .map(|(body, priority, delay)| (serde_json::from_str(&body).unwrap(), priority, delay))
            .collect()
    }
}

#[async_trait]
impl JobQueue for RecordingQueue {
    async fn send(&self, _body: &str, _delay: Duration) -> Result<String, StorageError> {
        panic!("batch-lane sends are not expected here")
    }

    async fn send_priority(&self, body: &str, priority: Priority, delay: Duration) -> Result<String, StorageError> {
        self.sent.lock().unwrap().push((body.to_owned(), priority, delay));
        Ok("m".into())
    }

    async fn receive(&self, _: usize, _: Duration, _: Duration) -> Result<Vec<QueueMessage>, StorageError> {
        Ok(Vec::new())
    }

    async fn delete(&self, _receipt: &str) -> Result<(), StorageError> {
        Ok(())
    }

    async fn change_visibility(&self, _receipt: &str, _timeout: Duration) -> Result<(), StorageError> {
        Ok(())
    }
}

/// One post: the URL, the headers, the body.
type Post = (String, Vec<(String, String)>, Bytes);

/// Answers posts from a script (then 200) and records what was posted.
#[derive(Default)]
struct ScriptedTransport {
    script: Mutex<VecDeque<PostOutcome>>,
    posts: Mutex<Vec<Post>>,
}

#[async_trait]
impl WebhookTransport for ScriptedTransport {
    async fn post(&self, url: &WebhookUrl, headers: &[(String, String)], body: Bytes) -> PostOutcome {
        self.posts
            .lock()
            .unwrap()
            .push((url.as_str().to_owned(), headers.to_vec(), body));
        self.script
            .lock()
            .unwrap()
            .pop_front()
            .unwrap_or(PostOutcome::Response {
                status: 200,
                retry_after: None,
            })
    }
}

fn header<'a>(headers: &'a [(String, String)], name: &str) -> &'a str {
    headers
        .iter()
        .find(|(n, _)| n.eq_ignore_ascii_case(name))
        .map(|(_, v)| v.as_str())
        .unwrap_or_else(|| panic!("no {name} header in {headers:?}"))
}

struct Fixture {
    state: Arc<dyn StateStore>,
    clock: Arc<ManualClock>,
    queue: Arc<RecordingQueue>,
    transport: Arc<ScriptedTransport>,
    endpoints: Arc<WebhookEndpoints>,
    hooks: BatchWebhooks,
}

impl Fixture {
    fn new() -> Self {
        let state = memory_state();
        let clock = ManualClock::new();
        let queue = Arc::new(RecordingQueue::default());
        let transport = Arc::new(ScriptedTransport::default());
        let endpoints = Arc::new(WebhookEndpoints::new(
            Arc::clone(&state),
            clock.clone(),
            Arc::new(UuidV7Ids),
            UrlPolicy {
                allow_loopback_http: true,
            },
            test_sealer(),
        ));
        let hooks = BatchWebhooks::new(BatchWebhooksDeps {
            state: Arc::clone(&state),
            queue: queue.clone(),
            clock: clock.clone(),
            ids: Arc::new(UuidV7Ids),
            endpoints: Arc::clone(&endpoints),
            transport: transport.clone(),
        });
        Self {
            state,
            clock,
            queue,
            transport,
            endpoints,
            hooks,
        }
    }

    async fn endpoint(&self, project: &str, events: &[&str]) -> CreatedEndpoint {
        let request = CreateEndpointRequest {
            url: "http://127.0.0.1:9/hook".into(),
            event_types: events.iter().map(|e| (*e).to_owned()).collect(),
            name: None,
            secret: None,
        };
        self.endpoints.create(&ProjectId::new(project), request).await.unwrap()
    }

    async fn delivery(&self, id: &DeliveryId) -> Option<StoredDelivery> {
        let record = self.state.get(DELIVERY_KIND, id.as_str()).await.unwrap()?;
        Some(decode(&record).unwrap())
    }

    async fn deliveries_of(&self, endpoint_id: &str) -> Vec<Record> {
        crate::records::list_all(self.state.as_ref(), DELIVERY_KIND, endpoint_id)
            .await
            .unwrap()
    }

    async fn run(&self, delivery_id: &DeliveryId, attempt: u32) -> JobOutcome {
        let job = JobMessage::WebhookDeliver {
            delivery_id: delivery_id.clone(),
            attempt,
        };
        JobRunner::run(&self.hooks, &job, Instant::now() + Duration::from_secs(60)).await
    }

    /// One pass of the scheduled task now; its report.
    async fn pass(&self) -> serde_json::Value {
        ScheduledTask::run(&self.hooks, self.clock.now_unix_ms()).await.unwrap()
    }

    async fn due(&self) -> Vec<crate::scheduler::DueItem> {
        self.hooks.due.due(DELIVERY_LANE, i64::MAX, 100).await.unwrap()
    }
}

use tokio::time::Instant;

#[tokio::test]
async fn a_batch_event_reaches_each_subscribed_endpoint_of_its_project_once() {
    let f = Fixture::new();
    let both = f.endpoint("p1", &["batch.completed", "batch.failed"]).await;
    let failed_only = f.endpoint("p1", &["batch.failed"]).await;
    let other_project = f.endpoint("p2", &["batch.completed"]).await;
    let at_ms = ManualClock::START_MS - 3_000;

    f.hooks
        .batch_ended(&ProjectId::new("p1"), &BatchId::new("batch_1"), "completed", at_ms)
        .await
        .unwrap();
    // A retried finalization reports the same ending again: nothing more is created or sent.
    f.clock.advance_ms(1_000);
    f.hooks
        .batch_ended(&ProjectId::new("p1"), &BatchId::new("batch_1"), "completed", at_ms)
        .await
        .unwrap();

    let id = delivery_id(&both.endpoint.id, &BatchId::new("batch_1"), BatchEventType::Completed);
    assert_eq!(f.deliveries_of(&both.endpoint.id).await.len(), 1);
    assert!(f.deliveries_of(&failed_only.endpoint.id).await.is_empty());
    assert!(f.deliveries_of(&other_project.endpoint.id).await.is_empty());
    let sent = f.queue.take();
    assert_eq!(
        sent,
        vec![(
            JobMessage::WebhookDeliver {
                delivery_id: id.clone(),
                attempt: 1
            },
            Priority::P1,
            Duration::ZERO
        )]
    );

    let stored = f.delivery(&id).await.unwrap();
    assert_eq!(stored.delivery.style, SignatureStyle::Standard);
    assert_eq!(stored.delivery.state, DeliveryState::Pending);
    let body: serde_json::Value = serde_json::from_str(&stored.delivery.body).unwrap();
    assert_eq!(
        body,
        serde_json::json!({
            "object": "event",
            "id": stored.event_id,
            "type": "batch.completed",
            "created_at": at_ms / 1000,
            "data": {"id": "batch_1"},
        })
    );
    assert!(stored.event_id.starts_with("evt_"));
    // Due in the index too, in case the message is lost.
    assert_eq!(f.due().await.len(), 1);
}

#[tokio::test]
async fn statuses_without_an_event_and_projects_without_endpoints_send_nothing() {
    let f = Fixture::new();
    f.endpoint("p1", &["batch.completed"]).await;
    f.hooks
        .batch_ended(&ProjectId::new("p1"), &BatchId::new("batch_1"), "in_progress", 0)
        .await
        .unwrap();
    f.hooks
        .batch_ended(&ProjectId::new("p2"), &BatchId::new("batch_2"), "completed", 0)
        .await
        .unwrap();
    assert!(f.queue.take().is_empty());
    assert!(f.due().await.is_empty());
}

#[tokio::test]
async fn an_attempt_is_signed_with_the_endpoints_secret() {
    let f = Fixture::new();
    let endpoint = f.endpoint("p1", &["batch.cancelled"]).await;
    f.hooks
        .batch_ended(&ProjectId::new("p1"), &BatchId::new("batch_9"), "cancelled", 0)
        .await
        .unwrap();
    let id = delivery_id(
        &endpoint.endpoint.id,
        &BatchId::new("batch_9"),
        BatchEventType::Cancelled,
    );
    f.queue.take();

    assert_eq!(f.run(&id, 1).await, JobOutcome::Done);
    let posts = f.transport.posts.lock().unwrap().clone();
    assert_eq!(posts.len(), 1);
    let (url, headers, body) = &posts[0];
    assert_eq!(url, "http://127.0.0.1:9/hook");
    let secret = SigningSecret::parse(&endpoint.signing_secret).unwrap();
    let webhook_id = header(headers, "webhook-id");
    let timestamp: i64 = header(headers, "webhook-timestamp").parse().unwrap();
    assert_eq!(
        header(headers, "webhook-signature"),
        standard_signature(&[secret], webhook_id, timestamp, body)
    );
    let stored = f.delivery(&id).await.unwrap();
    assert_eq!(stored.delivery.state, DeliveryState::Succeeded);
    assert_eq!(stored.delivery.webhook_id, webhook_id);
    // Nothing more to send; the index now holds the purge time.
    assert!(f.queue.take().is_empty());
    let due = f.due().await;
    assert_eq!(due[0].due_at_ms, f.clock.now_unix_ms() + DELIVERY_RETENTION_MS);
    // A duplicate message for the same attempt posts nothing.
    assert_eq!(f.run(&id, 1).await, JobOutcome::Done);
    assert_eq!(f.transport.posts.lock().unwrap().len(), 1);
}

#[tokio::test]
async fn a_failed_attempt_is_retried_with_the_same_webhook_id() {
    let f = Fixture::new();
    let endpoint = f.endpoint("p1", &["batch.completed"]).await;
    f.hooks
        .batch_ended(&ProjectId::new("p1"), &BatchId::new("batch_1"), "completed", 0)
        .await
        .unwrap();
    let id = delivery_id(
        &endpoint.endpoint.id,
        &BatchId::new("batch_1"),
        BatchEventType::Completed,
    );
    f.queue.take();
    f.transport.script.lock().unwrap().push_back(PostOutcome::Response {
        status: 503,
        retry_after: None,
    });

    assert_eq!(f.run(&id, 1).await, JobOutcome::Done);
    let stored = f.delivery(&id).await.unwrap();
    assert_eq!(stored.delivery.state, DeliveryState::Pending);
    assert_eq!(stored.delivery.attempts.len(), 1);
    let next_ms = stored.delivery.next_attempt_at_ms.unwrap();
    // The next attempt is within 15 minutes: a delayed message for attempt 2.
    let sent = f.queue.take();
    assert_eq!(sent.len(), 1);
    let (job, priority, delay) = &sent[0];
    assert_eq!(
        job,
        &JobMessage::WebhookDeliver {
            delivery_id: id.clone(),
            attempt: 2
        }
    );
    assert_eq!(*priority, Priority::P1);
    let now = f.clock.now_unix_ms();
    assert_eq!(i64::try_from(delay.as_millis()).unwrap(), next_ms - now);
    // The scheduler leaves it alone unless the message is lost.
    assert!(f.due().await[0].due_at_ms > next_ms);

    // Early: the message waits; on time: attempt 2, same webhook-id.
    assert!(matches!(f.run(&id, 2).await, JobOutcome::Retry { .. }));
    f.clock.advance_ms(next_ms - now);
    assert_eq!(f.run(&id, 2).await, JobOutcome::Done);
    let posts = f.transport.posts.lock().unwrap().clone();
    assert_eq!(posts.len(), 2);
    assert_eq!(header(&posts[0].1, "webhook-id"), header(&posts[1].1, "webhook-id"));
    assert_eq!(f.delivery(&id).await.unwrap().delivery.state, DeliveryState::Succeeded);
}

#[tokio::test]
async fn the_scheduler_queues_lost_attempts_and_purges_old_deliveries() {
    let f = Fixture::new();
    let endpoint = f.endpoint("p1", &["batch.expired"]).await;
    f.hooks
        .batch_ended(&ProjectId::new("p1"), &BatchId::new("batch_1"), "expired", 0)
        .await
        .unwrap();
    let id = delivery_id(&endpoint.endpoint.id, &BatchId::new("batch_1"), BatchEventType::Expired);
    f.queue.take(); // lost

    assert_eq!(f.pass().await["queued"], 0, "not before the message is presumed lost");
    f.clock.advance_ms(LOST_MESSAGE_GRACE_MS);
    assert_eq!(f.pass().await["queued"], 1);
    assert_eq!(
        f.queue.take()[0].0,
        JobMessage::WebhookDeliver {
            delivery_id: id.clone(),
            attempt: 1
        }
    );
    assert_eq!(f.pass().await["queued"], 0, "queued once per grace period");
    assert_eq!(f.run(&id, 1).await, JobOutcome::Done);
    assert_eq!(f.delivery(&id).await.unwrap().delivery.state, DeliveryState::Succeeded);

    f.clock.advance_ms(DELIVERY_RETENTION_MS - 1);
    assert_eq!(f.pass().await["purged"], 0);
    f.clock.advance_ms(1);
    assert_eq!(f.pass().await["purged"], 1);
    assert!(f.delivery(&id).await.is_none());
    assert!(f.due().await.is_empty());
}

#[tokio::test]
async fn deleting_an_endpoint_cancels_its_pending_deliveries() {
    let f = Fixture::new();
    let endpoint = f.endpoint("p1", &["batch.completed"]).await;
    f.hooks
        .batch_ended(&ProjectId::new("p1"), &BatchId::new("batch_1"), "completed", 0)
        .await
        .unwrap();
    let id = delivery_id(
        &endpoint.endpoint.id,
        &BatchId::new("batch_1"),
        BatchEventType::Completed,
    );
    f.endpoints
        .delete(&ProjectId::new("p1"), &endpoint.endpoint.id)
        .await
        .unwrap();
    assert_eq!(f.run(&id, 1).await, JobOutcome::Done);
    assert!(f.transport.posts.lock().unwrap().is_empty());
    assert_eq!(f.delivery(&id).await.unwrap().delivery.state, DeliveryState::Canceled);
}

#[tokio::test]
async fn deliveries_are_listed_under_their_endpoint_for_its_project_only() {
    let f = Fixture::new();
    let endpoint = f.endpoint("p1", &["batch.completed"]).await;
    f.hooks
        .batch_ended(&ProjectId::new("p1"), &BatchId::new("batch_1"), "completed", 0)
        .await
        .unwrap();
    let id = delivery_id(
        &endpoint.endpoint.id,
        &BatchId::new("batch_1"),
        BatchEventType::Completed,
    );
    f.run(&id, 1).await;
    let list = f
        .hooks
        .list_deliveries(
            &ProjectId::new("p1"),
            &endpoint.endpoint.id,
            crate::webhooks::WEBHOOK_PAGE.check(20).unwrap(),
        )
        .await
        .unwrap();
    assert_eq!(list.data.len(), 1);
    assert_eq!(list.data[0].id, id.as_str());
    assert_eq!(list.data[0].state, DeliveryState::Succeeded);
    assert_eq!(list.data[0].attempts.len(), 1);
    let err = f
        .hooks
        .list_deliveries(
            &ProjectId::new("p2"),
            &endpoint.endpoint.id,
            crate::webhooks::WEBHOOK_PAGE.check(20).unwrap(),
        )
        .await
        .unwrap_err();
    assert!(matches!(err, WebhooksError::NotFound { .. }), "{err:?}");
}

#[test]
fn a_pending_delivery_outlives_any_retry_schedule() {
    use crate::webhooks::delivery::{MAX_RETRY_AFTER, RETRY_DELAYS};
    let longest_wait = RETRY_DELAYS.iter().copied().max().unwrap().max(MAX_RETRY_AFTER);
    // Every wait at its longest, plus a tenth of jitter.
    let longest_schedule_ms = longest_wait.as_millis() * 11 / 10 * RETRY_DELAYS.len() as u128;
    assert!(u128::try_from(PENDING_TTL_MS).unwrap() > longest_schedule_ms);
}

/// Stands for the local server's data-directory lock.
struct OnlyWorker;

impl crate::ports::SoleWorkerGuard for OnlyWorker {}

#[tokio::test]
async fn a_restart_queues_pending_deliveries_at_once_not_when_the_due_index_looks() {
    let f = Fixture::new();
    let endpoint = f.endpoint("p1", &["batch.completed"]).await;
    let finished = f.endpoint("p1", &["batch.completed"]).await;
    f.hooks
        .batch_ended(
            &ProjectId::new("p1"),
            &BatchId::new("batch_1"),
            "completed",
            ManualClock::START_MS,
        )
        .await
        .unwrap();
    let id = delivery_id(
        &endpoint.endpoint.id,
        &BatchId::new("batch_1"),
        BatchEventType::Completed,
    );
    let done = delivery_id(
        &finished.endpoint.id,
        &BatchId::new("batch_1"),
        BatchEventType::Completed,
    );
    assert_eq!(f.run(&done, 1).await, JobOutcome::Done);
    // The process dies before the other's first attempt: its message is gone, and the due index
    // would look only LOST_MESSAGE_GRACE_MS later.
    f.queue.take();

    assert_eq!(f.hooks.take_over(&OnlyWorker).await.unwrap(), 1);
    assert_eq!(
        f.queue.take(),
        vec![(
            JobMessage::WebhookDeliver {
                delivery_id: id.clone(),
                attempt: 1
            },
            Priority::P1,
            Duration::ZERO
        )]
    );
    assert_eq!(f.run(&id, 1).await, JobOutcome::Done);
    assert_eq!(f.delivery(&id).await.unwrap().delivery.state, DeliveryState::Succeeded);
}
