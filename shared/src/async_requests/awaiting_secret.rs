//! Deliveries waiting for a webhook secret: an attempt that finds its project without one (and
//! unsigned webhooks refused) puts the request in the due-index lane `awaiting_secret.{project}`;
//! creating a secret ([`AsyncApi::secret_created`](super::AsyncApi::secret_created)) makes those deliveries due at once instead
//! of at their next retry (which may be minutes away).

use super::requests::AsyncRequests;
use super::stored::StoredRequest;
use crate::ports::{ProjectId, StorageError};

/// The lane of a project's deliveries waiting for a secret.
pub(super) fn lane(project: &ProjectId) -> String {
    format!("awaiting_secret.{project}")
}

impl AsyncRequests {
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
}
