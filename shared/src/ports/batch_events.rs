//! What the batch engine tells the outside world about a batch that ended: webhook events in
//! Nimbus, nothing in hosts and tests that do not care.

use super::StorageError;
use super::{BatchId, ProjectId};
use async_trait::async_trait;

/// Told once a batch has reached a terminal status (`completed`, `failed`, `cancelled`,
/// `expired`). The engine may tell it again for the same batch (a retried finalization, a poller
/// pass after a crash), so implementations must be idempotent per `(batch_id, status)`; an error
/// makes the engine try again later.
#[async_trait]
pub trait BatchEventSink: Send + Sync {
    async fn batch_ended(
        &self,
        project: &ProjectId,
        batch_id: &BatchId,
        status: &str,
        at_ms: i64,
    ) -> Result<(), StorageError>;
}
