//! Batch event webhooks: when a batch ends, every endpoint of its project subscribed to the event
//! type gets OpenAI's event (`{"object": "event", "id": "evt_…", "type": "batch.completed",
//! "created_at": …, "data": {"id": "batch_…"}}`), signed per Standard Webhooks with the
//! endpoint's secret.
//!
//! Each (endpoint, batch, event type) is one `webhook_delivery` record whose id is derived from
//! the three, created only if absent: the batch engine may report the same ending twice (a
//! retried finalization), and the second report finds the record and sends nothing. A new
//! delivery is queued at once (priority 1) and put in the due index (lane
//! [`DELIVERY_LANE`]); the runner (`event_delivery_jobs.rs`) attempts it and reschedules it, the
//! scheduled task queues attempts that fell due and purges old records.

use super::delivery::{Delivery, DeliveryAttempt, DeliveryState, SignatureStyle};
use super::endpoints::{BatchEventType, WebhookEndpoints};
use super::errors::WebhooksError;
use crate::jobs::JobMessage;
use crate::paging::PageLimit;
use crate::ports::{
    BatchEventSink, BatchId, Clock, DeliveryId, IdSource, JobQueue, ListOrder, ListQuery, Priority, ProjectId,
    StateStore, StorageError, WebhookTransport,
};
use crate::records::{decode, LeaseUntil, Loaded};
use crate::scheduler::DueIndex;
use async_trait::async_trait;
use serde::{Deserialize, Serialize};
use std::sync::Arc;
use std::time::Duration;

pub const DELIVERY_KIND: &str = "webhook_delivery";
/// The due-index lane of event deliveries: a pending delivery is due at its next attempt, a
/// finished one at its purge time.
pub(crate) const DELIVERY_LANE: &str = "webhook_delivery";
/// How long a finished delivery is kept (listed under its endpoint) before it is purged.
pub(crate) const DELIVERY_RETENTION_MS: i64 = 7 * 24 * 3600 * 1000;
/// A delivery with a message on its way is looked at by the scheduler only this long after the
/// message should have run (the message is then presumed lost).
pub(crate) const LOST_MESSAGE_GRACE_MS: i64 = 5 * 60_000;
/// The record TTL of a delivery still pending: longer than any retry schedule, even one whose
/// every wait is stretched to the longest `Retry-After` honoured.
const PENDING_TTL_MS: i64 = 8 * 24 * 3600 * 1000;

/// What is stored per delivery (owner: the endpoint, so that its deliveries list together).
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, utoipa::ToSchema)]
pub(crate) struct StoredDelivery {
    #[schema(value_type = String)]
    pub(crate) project: ProjectId,
    pub(crate) endpoint_id: String,
    pub(crate) batch_id: String,
    pub(crate) event_type: BatchEventType,
    pub(crate) event_id: String,
    pub(crate) delivery: Delivery,
    /// A worker is attempting it until then (ms); no one else attempts it meanwhile.
    #[serde(default)]
    #[schema(value_type = i64)]
    pub(crate) lease_until_ms: LeaseUntil,
    pub(crate) created_at_ms: i64,
}

/// The record id of the delivery of `event` about `batch_id` to `endpoint_id`.
pub fn delivery_id(endpoint_id: &str, batch_id: &BatchId, event: BatchEventType) -> DeliveryId {
    DeliveryId::new(format!("{endpoint_id}:{batch_id}:{}", event.status()))
}

/// OpenAI's event body, as sent and signed.
pub(crate) fn event_body(event_id: &str, event: BatchEventType, batch_id: &BatchId, created_at_s: i64) -> String {
    serde_json::json!({
        "object": "event",
        "id": event_id,
        "type": event.as_str(),
        "created_at": created_at_s,
        "data": {"id": batch_id.as_str()},
    })
    .to_string()
}

/// One delivery as listed under its endpoint.
#[derive(Debug, Clone, Serialize, PartialEq, utoipa::ToSchema)]
pub(crate) struct DeliveryView {
    pub id: String,
    pub object: &'static str,
    /// The `webhook-id` header of every attempt.
    pub webhook_id: String,
    pub event_id: String,
    pub event_type: BatchEventType,
    pub batch_id: String,
    pub created_at: i64,
    pub state: DeliveryState,
    pub attempts: Vec<DeliveryAttempt>,
    /// Unix seconds of the next attempt while pending.
    pub next_attempt_at: Option<i64>,
}

#[derive(Debug, Clone, Serialize, PartialEq, utoipa::ToSchema)]
pub(crate) struct DeliveryList {
    pub object: &'static str,
    pub data: Vec<DeliveryView>,
    pub has_more: bool,
}

/// Batch events to webhook endpoints: the batch engine's [`BatchEventSink`], the runner of
/// `webhook_deliver` jobs and the scheduled task of lane [`DELIVERY_LANE`].
pub struct BatchWebhooks {
    pub(crate) state: Arc<dyn StateStore>,
    pub(crate) queue: Arc<dyn JobQueue>,
    pub(crate) clock: Arc<dyn Clock>,
    pub(crate) ids: Arc<dyn IdSource>,
    pub(crate) endpoints: Arc<WebhookEndpoints>,
    pub(crate) transport: Arc<dyn WebhookTransport>,
    pub(crate) due: DueIndex,
}

/// What [`BatchWebhooks`] works with.
pub struct BatchWebhooksDeps {
    pub state: Arc<dyn StateStore>,
    pub queue: Arc<dyn JobQueue>,
    pub clock: Arc<dyn Clock>,
    pub ids: Arc<dyn IdSource>,
    pub endpoints: Arc<WebhookEndpoints>,
    pub transport: Arc<dyn WebhookTransport>,
}

impl BatchWebhooks {
    pub fn new(deps: BatchWebhooksDeps) -> Self {
        Self {
            due: DueIndex::new(Arc::clone(&deps.state)),
            state: deps.state,
            queue: deps.queue,
            clock: deps.clock,
            ids: deps.ids,
            endpoints: deps.endpoints,
            transport: deps.transport,
        }
    }

    /// Spread the delivery lane over `shards` owners ([`DueIndex::with_shards`]).
    pub(crate) fn with_due_index_shards(mut self, shards: u32) -> Self {
        self.due = self.due.with_shards(shards);
        self
    }

    /// Create the deliveries of one batch event; those that exist already are left alone (but
    /// put back in the due index, in case an earlier report stopped half-way).
    async fn emit(
        &self,
        project: &ProjectId,
        batch_id: &BatchId,
        event: BatchEventType,
        at_ms: i64,
    ) -> Result<u32, StorageError> {
        let endpoints = self.endpoints.subscribed(project, event).await?;
        if endpoints.is_empty() {
            return Ok(0);
        }
        let now_ms = self.clock.now_unix_ms();
        let event_id = self.ids.prefixed("evt_");
        let body = event_body(&event_id, event, batch_id, at_ms.div_euclid(1000));
        let mut created = 0;
        for (endpoint, stored_endpoint) in endpoints {
            let id = delivery_id(&endpoint.id, batch_id, event);
            let stored = StoredDelivery {
                project: project.clone(),
                endpoint_id: endpoint.id.clone(),
                batch_id: batch_id.to_string(),
                event_type: event,
                event_id: event_id.clone(),
                delivery: Delivery::new(
                    self.ids.prefixed("msg_"),
                    stored_endpoint.url.clone(),
                    body.clone(),
                    SignatureStyle::Standard,
                    None,
                    now_ms,
                ),
                lease_until_ms: LeaseUntil::NONE,
                created_at_ms: now_ms,
            };
            let record = crate::records::new_record(
                DELIVERY_KIND.to_owned(),
                id.to_string(),
                endpoint.id.clone(),
                now_ms,
                Some((now_ms + PENDING_TTL_MS).div_euclid(1000)),
                &stored,
            )?;
            match self.state.create(&record).await {
                Ok(()) => {}
                Err(StorageError::Conflict) => {
                    self.reschedule_existing(id.as_str()).await?;
                    continue;
                }
                Err(err) => return Err(err),
            }
            created += 1;
            // Found by the scheduler if the message below is lost (or this process dies first).
            self.due
                .set(DELIVERY_LANE, id.as_str(), now_ms + LOST_MESSAGE_GRACE_MS)
                .await?;
            if !self.send_attempt(id.as_str(), 1, Duration::ZERO).await {
                self.due.set(DELIVERY_LANE, id.as_str(), now_ms).await?;
            }
        }
        Ok(created)
    }

    /// Put an existing delivery back in the due index (an earlier report may have stopped before
    /// doing so): at its purge time once final, else when its next attempt's message is presumed
    /// lost (that message may well be on its way).
    async fn reschedule_existing(&self, id: &str) -> Result<(), StorageError> {
        let Some(loaded) = Loaded::<StoredDelivery>::get(self.state.as_ref(), DELIVERY_KIND, id).await? else {
            return Ok(());
        };
        let due = due_at(&loaded.body);
        let due = if loaded.body.delivery.is_final() {
            due
        } else {
            due + LOST_MESSAGE_GRACE_MS
        };
        self.due.set(DELIVERY_LANE, id, due).await
    }

    /// Queue attempt `attempt` of a delivery; whether the message was sent (a lost send is
    /// found again in the due index).
    pub(crate) async fn send_attempt(&self, delivery_id: &str, attempt: u32, delay: Duration) -> bool {
        let job = JobMessage::WebhookDeliver {
            delivery_id: DeliveryId::new(delivery_id),
            attempt,
        };
        match self.queue.send_priority(&job.to_body(), Priority::P1, delay).await {
            Ok(_) => true,
            Err(err) => {
                tracing::warn!(delivery = %delivery_id, error = %err, "could not queue a webhook attempt; the scheduler will");
                false
            }
        }
    }

    /// The latest deliveries to an endpoint of `project`, newest first, with their attempts.
    pub(crate) async fn list_deliveries(
        &self,
        project: &ProjectId,
        endpoint_id: &str,
        limit: PageLimit,
    ) -> Result<DeliveryList, WebhooksError> {
        let limit = limit.get();
        if self.endpoints.load(project, endpoint_id).await?.is_none() {
            return Err(WebhooksError::NotFound {
                what: "webhook endpoint",
                id: endpoint_id.to_owned(),
            });
        }
        let page = self
            .state
            .list_by_owner(&ListQuery {
                kind: DELIVERY_KIND.to_owned(),
                owner: endpoint_id.to_owned(),
                after: None,
                limit,
                order: ListOrder::Desc,
            })
            .await?;
        let data = page
            .records
            .iter()
            .map(|record| {
                let stored: StoredDelivery = decode(record)?;
                Ok(DeliveryView {
                    id: record.id.clone(),
                    object: "webhook_delivery",
                    webhook_id: stored.delivery.webhook_id.clone(),
                    event_id: stored.event_id,
                    event_type: stored.event_type,
                    batch_id: stored.batch_id,
                    created_at: stored.created_at_ms.div_euclid(1000),
                    state: stored.delivery.state,
                    next_attempt_at: stored.delivery.next_attempt_at_ms.map(|ms| ms.div_euclid(1000)),
                    attempts: stored.delivery.attempts,
                })
            })
            .collect::<Result<Vec<_>, StorageError>>()?;
        Ok(DeliveryList {
            object: "list",
            data,
            has_more: page.has_more,
        })
    }
}

/// When the due index should next look at a delivery: its next attempt while pending, else
/// its purge time.
pub(crate) fn due_at(stored: &StoredDelivery) -> i64 {
    if stored.delivery.is_final() {
        let finished_at = stored
            .delivery
            .attempts
            .last()
            .map_or(stored.created_at_ms, |attempt| attempt.at_ms);
        finished_at + DELIVERY_RETENTION_MS
    } else {
        stored
            .delivery
            .next_attempt_at_ms
            .unwrap_or(stored.created_at_ms)
            .max(stored.lease_until_ms.until_ms().unwrap_or(0))
    }
}

#[async_trait]
impl BatchEventSink for BatchWebhooks {
    async fn batch_ended(
        &self,
        project: &ProjectId,
        batch_id: &BatchId,
        status: &str,
        at_ms: i64,
    ) -> Result<(), StorageError> {
        let Some(event) = BatchEventType::for_status(status) else {
            tracing::warn!(batch = %batch_id, status, "a batch ended with a status that has no event");
            return Ok(());
        };
        let created = self.emit(project, batch_id, event, at_ms).await?;
        if created > 0 {
            tracing::info!(batch = %batch_id, event = event.as_str(), created, "batch event deliveries created");
        }
        Ok(())
    }
}

#[cfg(test)]
#[path = "events_tests.rs"]
mod tests;
