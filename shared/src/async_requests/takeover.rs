//! A restart of the only worker (the local server): its in-process queue lost every message, so
//! each request still queued or running is queued again, without the lease of the run that died.

use super::lifecycle::MAX_QUEUE_DELAY;
use super::requests::AsyncRequests;
use super::stored::{StoredRequest, KIND};
use super::{AsyncStatus, DUE_LANE};
use crate::jobs::JobMessage;
use crate::ports::{AsyncRequestId, SoleWorkerGuard, StorageError};
use crate::records::LeaseUntil;
use crate::records::Loaded;
use std::time::Duration;

impl AsyncRequests {
    /// Queue again every request not run to its end (`QUEUED`, `IN_PROGRESS`), dropping the leases
    /// of runs of the previous process, and the next webhook attempt of every concluded request
    /// that owes one (its message was lost with the queue; the due index would only look a lease
    /// later). `_guard` proves this process is the storage's only worker; run it before any job
    /// starts. Every live request has an entry on the due index, so that is where they are found.
    /// Returns how many were queued.
    pub async fn take_over(&self, _guard: &dyn SoleWorkerGuard) -> Result<u64, StorageError> {
        let state = self.deps.state.as_ref();
        let mut queued = 0;
        let now = self.now_ms();
        for item in self.due.due(DUE_LANE, i64::MAX, usize::MAX).await? {
            let Some(mut loaded) = Loaded::<StoredRequest>::get(state, KIND, &item.target).await? else {
                continue;
            };
            match loaded.body.status {
                AsyncStatus::Queued => {}
                AsyncStatus::InProgress => {
                    if loaded.body.lease_until_ms.is_set() {
                        loaded.body.lease_until_ms = LeaseUntil::NONE;
                        loaded.save(state).await?;
                    }
                }
                _ => {
                    if self.resume_delivery(&loaded.body, now).await? {
                        queued += 1;
                    }
                    continue;
                }
            }
            let job = JobMessage::AsyncRun {
                request_id: AsyncRequestId::new(item.target.clone()),
            };
            self.deps
                .queue
                .send_priority(&job.to_body(), loaded.body.priority, Duration::ZERO)
                .await?;
            queued += 1;
        }
        Ok(queued)
    }
}

impl AsyncRequests {
    /// Queue the next webhook attempt of a concluded request that owes one: at once when due, else
    /// delayed until it is (a retry further away than a queue delay is left to the scheduler).
    /// Whether a message was queued.
    async fn resume_delivery(&self, request: &StoredRequest, now: i64) -> Result<bool, StorageError> {
        let Some(delivery) = request.delivery.as_ref().filter(|_| request.delivery_pending()) else {
            return Ok(false);
        };
        let wait_ms = delivery.next_attempt_at_ms.map_or(0, |at| (at - now).max(0));
        let wait = Duration::from_millis(u64::try_from(wait_ms).unwrap_or(0));
        if wait > MAX_QUEUE_DELAY {
            return Ok(false);
        }
        let job = JobMessage::AsyncDeliver {
            request_id: AsyncRequestId::new(request.request_id.clone()),
            attempt: u32::try_from(delivery.attempts.len() + 1).unwrap_or(u32::MAX),
        };
        self.deps
            .queue
            .send_priority(&job.to_body(), request.priority, wait)
            .await?;
        Ok(true)
    }
}
