//! Running batch event deliveries: the `webhook_deliver` job (one attempt, then the next one
//! scheduled) and the scheduled task of lane [`DELIVERY_LANE`] (attempts that fell due without a
//! message, purging finished deliveries after [`super::events::DELIVERY_RETENTION_MS`]).
//!
//! An attempt is claimed with a short lease written to the record (a conditional write), so two
//! messages for the same attempt never post twice at once; a worker that dies mid-attempt leaves
//! the lease to expire and the due index brings the delivery back (the receiver may then see the
//! same `webhook-id` twice, which Standard Webhooks receivers de-duplicate).

use super::events::{
    due_at, BatchWebhooks, StoredDelivery, DELIVERY_KIND, DELIVERY_LANE, DELIVERY_RETENTION_MS, LOST_MESSAGE_GRACE_MS,
};
use crate::jobs::{JobMessage, JobRunner};
use crate::ports::{JobOutcome, SoleWorkerGuard, StorageError};
use crate::records::LeaseUntil;
use crate::records::Loaded;
use crate::scheduler::{another_round, ScheduleError, ScheduledTask};
use async_trait::async_trait;
use std::time::Duration;
use tokio::time::Instant;

/// How long one worker holds an attempt (the transport times out after 10 s).
const LEASE_MS: i64 = 60_000;
/// Longest delay of a queued message (SQS's limit); later attempts wait in the due index only.
const MAX_MESSAGE_DELAY_MS: i64 = 900_000;
/// Due deliveries read per round of a scheduler pass (rounds go on while full and the pass has
/// time).
const DUE_PER_PASS: usize = 500;

impl BatchWebhooks {
    /// One attempt of a delivery, if it is this message's turn.
    async fn deliver(&self, id: &str, attempt: u32) -> Result<JobOutcome, StorageError> {
        let state = self.state.as_ref();
        let Some(mut loaded) = Loaded::<StoredDelivery>::get(state, DELIVERY_KIND, id).await? else {
            return Ok(JobOutcome::Done);
        };
        let now_ms = self.clock.now_unix_ms();
        let stored = &loaded.body;
        // Finished, an attempt this message is late for, or another worker on it: nothing to do
        // (a worker that dies is covered by the due index).
        let attempts_made = u32::try_from(stored.delivery.attempts.len()).unwrap_or(u32::MAX);
        if stored.delivery.is_final() || attempt <= attempts_made || stored.lease_until_ms.held_at(now_ms) {
            return Ok(JobOutcome::Done);
        }
        if let Some(wait_ms) = stored
            .delivery
            .next_attempt_at_ms
            .map(|at| at - now_ms)
            .filter(|w| *w > 0)
        {
            return Ok(if wait_ms <= MAX_MESSAGE_DELAY_MS {
                JobOutcome::Retry {
                    retry_after: Duration::from_millis(u64::try_from(wait_ms).unwrap_or(0)),
                }
            } else {
                JobOutcome::Done
            });
        }
        let Some(endpoint) = self.endpoints.by_id(&stored.endpoint_id).await? else {
            // The endpoint was deleted: this event is not sent any more.
            loaded.body.delivery.cancel();
            return self.save_and_reschedule(id, loaded, now_ms).await;
        };
        loaded.body.lease_until_ms = LeaseUntil::until(now_ms + LEASE_MS);
        match loaded.save(state).await {
            Ok(()) => {}
            Err(StorageError::Conflict) => return Ok(JobOutcome::Done),
            Err(err) => return Err(err),
        }
        self.due.set(DELIVERY_LANE, id, now_ms + LEASE_MS).await?;

        let secrets = endpoint
            .body
            .signing_secrets(self.endpoints.sealer(), &endpoint.record.id, now_ms)
            .await?;
        let attempt_at_ms = self.clock.now_unix_ms();
        let outcome = loaded
            .body
            .delivery
            .attempt(self.transport.as_ref(), &secrets, attempt_at_ms)
            .await;
        tracing::info!(delivery = %id, attempt, outcome = ?outcome, "batch event webhook attempted");
        loaded.body.lease_until_ms = LeaseUntil::NONE;
        self.save_and_reschedule(id, loaded, self.clock.now_unix_ms()).await
    }

    /// Save a delivery after an attempt (or a cancel), then schedule what comes next: a delayed
    /// message for an attempt due within 15 minutes, the due index always.
    async fn save_and_reschedule(
        &self,
        id: &str,
        mut loaded: Loaded<StoredDelivery>,
        now_ms: i64,
    ) -> Result<JobOutcome, StorageError> {
        let delivery = &loaded.body.delivery;
        if delivery.is_final() {
            loaded.record.expires_at = Some((now_ms + DELIVERY_RETENTION_MS).div_euclid(1000) + 1);
        }
        if let Err(err) = loaded.save(self.state.as_ref()).await {
            // The lease runs out and the due index brings the delivery back.
            tracing::warn!(delivery = %id, error = %err, "could not save a webhook attempt");
            return Ok(JobOutcome::Done);
        }
        let next_due = due_at(&loaded.body);
        let delivery = &loaded.body.delivery;
        if !delivery.is_final() && next_due - now_ms <= MAX_MESSAGE_DELAY_MS {
            let next_attempt = u32::try_from(delivery.attempts.len() + 1).unwrap_or(u32::MAX);
            let delay = Duration::from_millis(u64::try_from(next_due - now_ms).unwrap_or(0));
            if self.send_attempt(id, next_attempt, delay).await {
                self.due
                    .set(DELIVERY_LANE, id, next_due + LOST_MESSAGE_GRACE_MS)
                    .await?;
                return Ok(JobOutcome::Done);
            }
        }
        self.due.set(DELIVERY_LANE, id, next_due).await?;
        Ok(JobOutcome::Done)
    }

    /// One due item of the lane: queue its attempt, or purge it once kept long enough.
    async fn handle_due(&self, id: &str, now_ms: i64, report: &mut DueReport) -> Result<(), StorageError> {
        let Some(loaded) = Loaded::<StoredDelivery>::get(self.state.as_ref(), DELIVERY_KIND, id).await? else {
            self.due.clear(DELIVERY_LANE, id).await?;
            return Ok(());
        };
        let next_due = due_at(&loaded.body);
        if next_due > now_ms {
            // The index was behind the record (a crash between the two writes).
            self.due.set(DELIVERY_LANE, id, next_due).await?;
        } else if loaded.body.delivery.is_final() {
            self.state
                .delete(DELIVERY_KIND, id, Some(loaded.record.version))
                .await?;
            self.due.clear(DELIVERY_LANE, id).await?;
            report.purged += 1;
        } else {
            let attempt = u32::try_from(loaded.body.delivery.attempts.len() + 1).unwrap_or(u32::MAX);
            self.due.set(DELIVERY_LANE, id, now_ms + LOST_MESSAGE_GRACE_MS).await?;
            if self.send_attempt(id, attempt, Duration::ZERO).await {
                report.queued += 1;
            }
        }
        Ok(())
    }
}

impl BatchWebhooks {
    /// The local server's start: queue the next attempt of every pending delivery (the previous
    /// process's queue, and its messages, are gone; the due index would look only
    /// [`LOST_MESSAGE_GRACE_MS`] later), dropping leases of attempts that died with it. An attempt
    /// due within a queue delay gets a delayed message, a later one is left to the scheduler.
    /// `_guard` proves this process is the storage's only worker; run it before any job starts.
    /// Returns how many were queued.
    pub async fn take_over(&self, _guard: &dyn SoleWorkerGuard) -> Result<u64, StorageError> {
        let state = self.state.as_ref();
        let now_ms = self.clock.now_unix_ms();
        let mut queued = 0;
        for item in self.due.due(DELIVERY_LANE, i64::MAX, usize::MAX).await? {
            let Some(mut loaded) = Loaded::<StoredDelivery>::get(state, DELIVERY_KIND, &item.target).await? else {
                continue;
            };
            if loaded.body.delivery.is_final() {
                continue;
            }
            if loaded.body.lease_until_ms.held_at(now_ms) {
                loaded.body.lease_until_ms = LeaseUntil::NONE;
                loaded.save(state).await?;
            }
            let wait_ms = (due_at(&loaded.body) - now_ms).max(0);
            if wait_ms > MAX_MESSAGE_DELAY_MS {
                continue;
            }
            let attempt = u32::try_from(loaded.body.delivery.attempts.len() + 1).unwrap_or(u32::MAX);
            let delay = Duration::from_millis(u64::try_from(wait_ms).unwrap_or(0));
            if self.send_attempt(&item.target, attempt, delay).await {
                queued += 1;
            }
        }
        Ok(queued)
    }
}

#[derive(Debug, Default, serde::Serialize)]
struct DueReport {
    due: u64,
    queued: u64,
    purged: u64,
    errors: u64,
}

#[async_trait]
impl JobRunner for BatchWebhooks {
    async fn run(&self, job: &JobMessage, _deadline: Instant) -> JobOutcome {
        let JobMessage::WebhookDeliver { delivery_id, attempt } = job else {
            tracing::error!(?job, "a job of another family reached the webhook runner");
            return JobOutcome::Done;
        };
        match self.deliver(delivery_id.as_str(), *attempt).await {
            Ok(outcome) => outcome,
            Err(err) => {
                tracing::warn!(delivery = %delivery_id, error = %err, "webhook attempt failed; it will be retried");
                JobOutcome::Retry {
                    retry_after: Duration::from_secs(5),
                }
            }
        }
    }
}

#[async_trait]
impl ScheduledTask for BatchWebhooks {
    fn name(&self) -> &'static str {
        "webhook_deliveries"
    }

    async fn run(&self, now_ms: i64) -> Result<serde_json::Value, ScheduleError> {
        let mut report = DueReport::default();
        loop {
            let due = self.due.due(DELIVERY_LANE, now_ms, DUE_PER_PASS).await?;
            let read = due.len();
            let errors_before = report.errors;
            for item in due {
                report.due += 1;
                if let Err(err) = self.handle_due(&item.target, now_ms, &mut report).await {
                    tracing::warn!(delivery = %item.target, error = %err, "could not handle a due webhook delivery");
                    report.errors += 1;
                }
            }
            if !another_round(read, DUE_PER_PASS, report.errors - errors_before) {
                break;
            }
        }
        serde_json::to_value(&report).map_err(|e| ScheduleError::Task(e.to_string()))
    }

    async fn next_due(&self) -> Result<Option<i64>, ScheduleError> {
        Ok(self.due.next_due(DELIVERY_LANE).await?)
    }
}
