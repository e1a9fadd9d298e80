//! Deliveries waiting for a webhook secret: an attempt that finds its project without one (and
//! unsigned webhooks refused) puts the request in the due-index lane `awaiting_secret.{project}`;
//! creating a secret ([`AsyncService::secret_created`]) makes those deliveries due at once instead
//! of at their next retry (which may be minutes away).

use super::lifecycle::expect_due_move;
use super::service::AsyncService;
use super::stored::{StoredRequest, KIND};
use crate::ports::{ProjectId, StorageError};
use crate::records::Loaded;

/// Most deliveries brought forward per created secret (the rest keep their schedule).
const MAX_BROUGHT_FORWARD: usize = 1000;

/// The lane of a project's deliveries waiting for a secret.
fn lane(project: &ProjectId) -> String {
    format!("awaiting_secret.{project}")
}

impl AsyncService {
    /// Note that the request's delivery waits for its project to have a secret.
    pub(crate) async fn await_secret(&self, request: &StoredRequest, now: i64) {
        if let Err(err) = self.due.set(&lane(&request.project), &request.request_id, now).await {
            tracing::warn!(error = %err, "could not note a delivery waiting for a webhook secret; it keeps its schedule");
        }
    }

    /// Forget that the request's delivery waited for a secret (it is being purged).
    pub(crate) async fn forget_awaiting_secret(&self, request: &StoredRequest) -> Result<(), StorageError> {
        if request.delivery.is_none() {
            return Ok(());
        }
        match self.due.clear(&lane(&request.project), &request.request_id).await {
            Ok(()) | Err(StorageError::NotFound) => Ok(()),
            Err(err) => Err(err),
        }
    }

    /// A secret was created for `project`: every delivery that waited for one is due now (queued
    /// at once). How many were.
    pub async fn secret_created(&self, project: &ProjectId) -> Result<u64, StorageError> {
        let lane = lane(project);
        let state = self.deps.state.as_ref();
        let now = self.now_ms();
        let mut brought = 0;
        for item in self.due.due(&lane, i64::MAX, MAX_BROUGHT_FORWARD).await? {
            if let Some(mut loaded) = Loaded::<StoredRequest>::get(state, KIND, &item.target).await? {
                let pending = loaded.body.delivery_pending();
                if let Some(delivery) = loaded.body.delivery.as_mut().filter(|_| pending) {
                    delivery.next_attempt_at_ms = Some(now);
                    expect_due_move(&mut loaded.body);
                    match loaded.save(state).await {
                        Ok(()) => {
                            self.schedule_next_look(&loaded.body, now).await?;
                            brought += 1;
                        }
                        // Changed meanwhile (an attempt was made): it keeps its own schedule.
                        Err(StorageError::Conflict) => {}
                        Err(err) => return Err(err),
                    }
                }
            }
            self.due.clear(&lane, &item.target).await?;
        }
        Ok(brought)
    }
}
