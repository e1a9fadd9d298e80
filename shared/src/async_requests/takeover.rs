//! A restart of the only worker (the local server): its in-process queue lost every message, so
//! each request still queued or running is queued again, without the lease of the run that died.

use super::records::{StoredRequest, KIND};
use super::service::AsyncService;
use super::{AsyncStatus, DUE_LANE};
use crate::jobs::JobMessage;
use crate::ports::{SoleWorkerGuard, StorageError};
use crate::records::Loaded;
use std::time::Duration;

impl AsyncService {
    /// Queue again every request not run to its end (`QUEUED`, `IN_PROGRESS`), dropping the leases
    /// of runs of the previous process. `_guard` proves this process is the storage's only worker;
    /// run it before any job starts. Every live request has an entry on the due index, so that is
    /// where they are found. Returns how many were queued. (Concluded requests owe at most a webhook
    /// attempt, which the scheduler queues when it comes due.)
    pub async fn take_over(&self, _guard: &dyn SoleWorkerGuard) -> Result<u64, StorageError> {
        let state = self.deps.state.as_ref();
        let mut queued = 0;
        for item in self.due.due(DUE_LANE, i64::MAX, usize::MAX).await? {
            let Some(mut loaded) = Loaded::<StoredRequest>::get(state, KIND, &item.target).await? else {
                continue;
            };
            match loaded.body.status {
                AsyncStatus::Queued => {}
                AsyncStatus::InProgress => {
                    if loaded.body.lease_until_ms.take().is_some() {
                        loaded.save(state).await?;
                    }
                }
                _ => continue,
            }
            let job = JobMessage::AsyncRun {
                request_id: item.target.clone(),
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
