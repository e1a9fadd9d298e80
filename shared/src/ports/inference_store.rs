//! Stored inferences of the `/inference` endpoint, per project, listed by episode.

use super::ProjectId;
use super::StorageError;
use crate::ports::inference_records::InferenceRecord;
use async_trait::async_trait;
use serde::{Deserialize, Serialize};
use std::ops::Range;
use uuid::Uuid;

/// A page of an episode's (or a function's) inferences, oldest first; `has_more` is exact.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct InferencePage {
    pub records: Vec<InferenceRecord>,
    pub has_more: bool,
}

/// One page of a `/batch_inference` batch's records: page `page` holds items of the batch from
/// `first` to `last` (input positions, both included; an item that failed has no record).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct BatchPage {
    pub page: u32,
    pub first: u32,
    pub last: u32,
}

/// Inference records. Every lookup is scoped to a project: another project's id is not found.
#[async_trait]
pub trait InferenceStore: Send + Sync {
    /// Store a new record under `record.project`; [`StorageError::Conflict`] when its id exists.
    async fn put(&self, record: &InferenceRecord) -> Result<(), StorageError>;

    /// The record, if it exists in `project`.
    async fn get(&self, project: &ProjectId, inference_id: Uuid) -> Result<Option<InferenceRecord>, StorageError>;

    /// One page of the episode's inferences in creation order (the UUIDv7 time of the inference
    /// id), strictly after the inference `after` when given.
    async fn list_episode(
        &self,
        project: &ProjectId,
        episode_id: Uuid,
        after: Option<Uuid>,
        limit: usize,
    ) -> Result<InferencePage, StorageError>;

    /// One page of the function's inferences in creation order, strictly after the inference
    /// `after` when given (what DICL examples are built from). `/batch_inference` items are not
    /// listed: they are kept in pages per batch, not per function.
    async fn list_function(
        &self,
        project: &ProjectId,
        function_name: &str,
        after: Option<Uuid>,
        limit: usize,
    ) -> Result<InferencePage, StorageError>;

    /// Whether `project` has at least one inference in the episode.
    async fn episode_exists(&self, project: &ProjectId, episode_id: Uuid) -> Result<bool, StorageError>;

    /// Keep records of items of the batch `batch_id` (ids derived from it, see
    /// [`super::batch_item_id`]) as its page `page`, in input order. Writing a page again replaces
    /// it: a page is rebuilt from the same results. `None` when `records` is empty.
    async fn put_batch_page(
        &self,
        project: &ProjectId,
        batch_id: Uuid,
        page: u32,
        records: &[InferenceRecord],
    ) -> Result<Option<BatchPage>, StorageError>;

    /// Make the batch's pages findable: from now on [`Self::get`], the episode lookups and
    /// [`Self::batch_records`] see its items.
    async fn put_batch_index(
        &self,
        project: &ProjectId,
        batch_id: Uuid,
        pages: &[BatchPage],
    ) -> Result<(), StorageError>;

    /// The records of the batch's items at positions `items`, in input order (an item without a
    /// record is left out); empty before the index is written.
    async fn batch_records(
        &self,
        project: &ProjectId,
        batch_id: Uuid,
        items: Range<u32>,
    ) -> Result<Vec<InferenceRecord>, StorageError>;
}
