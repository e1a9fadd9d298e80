//! Stored feedback (`POST /feedback`), per project.

use super::ProjectId;
use super::StorageError;
use crate::ports::inference_records::FeedbackRecord;
use async_trait::async_trait;
use uuid::Uuid;

/// Feedback records. Lookups are scoped to a project: another project's id is not found.
#[async_trait]
pub trait FeedbackStore: Send + Sync {
    /// Store a new record under `record.project`; [`StorageError::Conflict`] when its id exists.
    async fn put(&self, record: &FeedbackRecord) -> Result<(), StorageError>;

    /// The record, if it exists in `project`.
    async fn get(&self, project: &ProjectId, feedback_id: Uuid) -> Result<Option<FeedbackRecord>, StorageError>;

    /// The newest feedback of `metric_name` on the inference or episode `target_id`, if any.
    async fn latest_for_target(
        &self,
        project: &ProjectId,
        target_id: Uuid,
        metric_name: &str,
    ) -> Result<Option<FeedbackRecord>, StorageError>;
}
