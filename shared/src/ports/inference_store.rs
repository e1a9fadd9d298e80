//! Stored inferences of the `/inference` endpoint, per project, listed by episode.

use super::StorageError;
use crate::functions::records::InferenceRecord;
use async_trait::async_trait;
use uuid::Uuid;

/// A page of an episode's inferences, oldest first; `has_more` is exact.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct InferencePage {
    pub records: Vec<InferenceRecord>,
    pub has_more: bool,
}

/// Inference records. Every lookup is scoped to a project: another project's id is not found.
#[async_trait]
pub trait InferenceStore: Send + Sync {
    /// Store a new record under `record.project`; [`StorageError::Conflict`] when its id exists.
    async fn put(&self, record: &InferenceRecord) -> Result<(), StorageError>;

    /// The record, if it exists in `project`.
    async fn get(&self, project: &str, inference_id: Uuid) -> Result<Option<InferenceRecord>, StorageError>;

    /// One page of the episode's inferences in creation order (the UUIDv7 time of the inference
    /// id), strictly after the inference `after` when given.
    async fn list_episode(
        &self,
        project: &str,
        episode_id: Uuid,
        after: Option<Uuid>,
        limit: usize,
    ) -> Result<InferencePage, StorageError>;

    /// Whether `project` has at least one inference in the episode.
    async fn episode_exists(&self, project: &str, episode_id: Uuid) -> Result<bool, StorageError>;
}
