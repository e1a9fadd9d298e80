//! The scheduler's pass over async requests whose time came (lane [`DUE_LANE`]): a request still
//! queued at its deadline expires (its webhook says so); one whose worker is gone is queued again;
//! a webhook retry that is due gets its job; a request past its retention is deleted with its
//! output.

use super::jobs::expired_error;
use super::requests::AsyncRequests;
use super::stored::{webhook_body_key, StoredRequest, KIND};
use super::{AsyncStatus, DUE_LANE};
use crate::jobs::JobMessage;
use crate::ports::{AsyncRequestId, StorageError};
use crate::records::Loaded;
use crate::scheduler::{another_round, ScheduleError, ScheduledTask};
use async_trait::async_trait;
use serde::Serialize;
use std::sync::Arc;
use std::time::Duration;

/// How many due requests one round of a pass looks at; a pass goes on with another round while
/// the last one was full and the pass has time ([`another_round`]).
const ROUND: usize = 1000;

/// What one pass did.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub(crate) struct DueWorkReport {
    pub due: u64,
    pub expired: u64,
    pub requeued: u64,
    pub deliveries_queued: u64,
    pub purged: u64,
    pub errors: u64,
    /// Rounds of at most 1,000 due requests this pass read.
    pub rounds: u64,
}

/// The async requests' scheduled task.
pub struct AsyncDueWork {
    requests: Arc<AsyncRequests>,
}

impl AsyncDueWork {
    pub fn new(requests: Arc<AsyncRequests>) -> Self {
        Self { requests }
    }
}

#[async_trait]
impl ScheduledTask for AsyncDueWork {
    fn name(&self) -> &'static str {
        "async_requests"
    }

    async fn run(&self, now_ms: i64) -> Result<serde_json::Value, ScheduleError> {
        let mut report = DueWorkReport::default();
        loop {
            // Each request looked at moves on (to a later due time, or out of the index), so the
            // next round reads the next ones.
            let due = self.requests.due.due(DUE_LANE, now_ms, ROUND).await?;
            let read = due.len();
            let errors_before = report.errors;
            report.rounds += 1;
            report.due += due.len() as u64;
            for item in due {
                if let Err(err) = self.requests.look_at(&item.target, now_ms, &mut report).await {
                    tracing::warn!(request = %item.target, error = %err, "could not handle a due async request");
                    report.errors += 1;
                }
            }
            if !another_round(read, ROUND, report.errors - errors_before) {
                break;
            }
        }
        serde_json::to_value(&report).map_err(|e| ScheduleError::Task(e.to_string()))
    }

    async fn next_due(&self) -> Result<Option<i64>, ScheduleError> {
        Ok(self.requests.due.next_due(DUE_LANE).await?)
    }
}

impl AsyncRequests {
    async fn look_at(&self, request_id: &str, now: i64, report: &mut DueWorkReport) -> Result<(), StorageError> {
        let state = self.deps.state.as_ref();
        let Some(mut loaded) = Loaded::<StoredRequest>::get(state, KIND, request_id).await? else {
            return self.due.clear(DUE_LANE, request_id).await;
        };
        let lease_ms = self.lease_ms();
        let request = &loaded.body;
        match request.status {
            AsyncStatus::Queued if now >= request.queue_deadline_ms() => {
                let error = expired_error(request.max_time_in_queue_s);
                loaded.body.conclude(AsyncStatus::Expired, Some(error), None, now);
                match loaded.save(state).await {
                    Ok(()) => {
                        report.expired += 1;
                        self.count_status(AsyncStatus::Expired);
                        self.leave_waiting_list(&loaded.body).await;
                        self.queue_first_delivery(&loaded.body, now).await
                    }
                    // A worker (or a cancel) got there first; the next pass sees what it did.
                    Err(StorageError::Conflict) => Ok(()),
                    Err(err) => Err(err),
                }
            }
            AsyncStatus::Queued => self.due.set(DUE_LANE, request_id, request.queue_deadline_ms()).await,
            AsyncStatus::InProgress => {
                let alive_until = request
                    .lease_until_ms
                    .until_ms()
                    .into_iter()
                    .chain(request.next_run_at_ms)
                    .max()
                    .filter(|until| *until > now);
                match alive_until {
                    Some(until) => self.due.set(DUE_LANE, request_id, until + lease_ms).await,
                    None => {
                        // Its worker is gone and its message may be too: queue it again (a
                        // duplicate message is harmless, the claim is conditional).
                        let job = JobMessage::AsyncRun {
                            request_id: AsyncRequestId::new(request_id),
                        };
                        self.deps
                            .queue
                            .send_priority(&job.to_body(), request.priority, Duration::ZERO)
                            .await?;
                        report.requeued += 1;
                        self.due.set(DUE_LANE, request_id, now + lease_ms).await
                    }
                }
            }
            _ if request.delivery_pending() => {
                let delivery = request.delivery.as_ref();
                let next = delivery.and_then(|d| d.next_attempt_at_ms).unwrap_or(now);
                if next > now {
                    return self.due.set(DUE_LANE, request_id, next).await;
                }
                let attempt = delivery.map_or(0, |d| d.attempts.len()) + 1;
                let job = JobMessage::AsyncDeliver {
                    request_id: AsyncRequestId::new(request_id),
                    attempt: u32::try_from(attempt).unwrap_or(u32::MAX),
                };
                self.deps
                    .queue
                    .send_priority(&job.to_body(), request.priority, Duration::ZERO)
                    .await?;
                report.deliveries_queued += 1;
                self.due.set(DUE_LANE, request_id, now + lease_ms).await
            }
            _ => {
                let purge_at = self.expires_at_s(request.created_at_ms).saturating_mul(1000);
                if now < purge_at {
                    return self.due.set(DUE_LANE, request_id, purge_at).await;
                }
                let webhook_body = request
                    .webhook_body_saved
                    .then(|| webhook_body_key(&request.project, request_id));
                for key in request.saved_output_key().into_iter().chain(webhook_body) {
                    match self.deps.blobs.delete(&key).await {
                        Ok(()) | Err(StorageError::NotFound) => {}
                        Err(err) => return Err(err),
                    }
                }
                self.forget_awaiting_secret(request).await?;
                state.delete(KIND, request_id, None).await?;
                report.purged += 1;
                self.due.clear(DUE_LANE, request_id).await
            }
        }
    }
}
