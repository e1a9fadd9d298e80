//! [`InferenceStore`] over a state store and a blob store.

use super::batch_pages::BatchPages;
use super::payload::{body_str, stash, unstash};
use super::retention::RecordRetention;
use crate::ports::clock::uuid_unix_ms as uuid_ms;
use crate::ports::inference_records::InferenceRecord;
use crate::ports::{
    BatchItemId, BatchPage, BlobStore, InferencePage, InferenceStore, ItemIdKind, ListOrder, ListQuery, ProjectId,
    Record, SortCursor, StateStore, StorageError,
};
use async_trait::async_trait;
use serde_json::{Map, Value};
use std::ops::Range;
use std::sync::Arc;
use uuid::Uuid;

const KIND: &str = "inference";
/// One per inference record, owned by its function: what lists a function's inferences.
const FUNCTION_INDEX_KIND: &str = "function_inference";

/// Inference records in the state store, large ones' payloads in the blob store; a
/// `/batch_inference` batch's records in pages in the blob store. Records past `retention` are
/// gone (see [`RecordRetention`]).
#[derive(Clone)]
pub struct StateInferenceStore {
    state: Arc<dyn StateStore>,
    blobs: Arc<dyn BlobStore>,
    retention: RecordRetention,
}

fn record_id(project: &ProjectId, inference_id: Uuid) -> String {
    format!("{project}/{inference_id}")
}

fn episode_owner(project: &ProjectId, episode_id: Uuid) -> String {
    format!("{project}/{episode_id}")
}

fn function_owner(project: &ProjectId, function_name: &str) -> String {
    format!("{project}/{function_name}")
}

/// A page of `owner`'s records of `kind` (whose ids are inference ids), oldest first, strictly
/// after the inference `after`.
fn oldest_first(kind: &str, owner: String, project: &ProjectId, after: Option<Uuid>, limit: usize) -> ListQuery {
    ListQuery {
        kind: kind.into(),
        owner,
        after: after.map(|id| SortCursor {
            created_at_ms: uuid_ms(&id),
            id: record_id(project, id),
        }),
        limit,
        order: ListOrder::Asc,
    }
}

/// A key of its own for each write: a second put of an id (a batch item run again after a crash)
/// must not replace the payload of the record that stays.
fn blob_key(project: &ProjectId, inference_id: Uuid, write: Uuid) -> String {
    format!("inferences/{project}/{inference_id}/{}.json", write.simple())
}

impl StateInferenceStore {
    pub fn new(state: Arc<dyn StateStore>, blobs: Arc<dyn BlobStore>, retention: RecordRetention) -> Self {
        Self {
            state,
            blobs,
            retention,
        }
    }

    fn live(&self, stored: &Record) -> bool {
        !self.retention.is_past(stored.expires_at, stored.created_at_ms)
    }

    async fn decode(&self, stored: &Record) -> Result<InferenceRecord, StorageError> {
        let mut record: InferenceRecord = unstash(self.blobs.as_ref(), &stored.body).await.map_err(|e| match e {
            StorageError::NotFound => {
                StorageError::Backend(format!("the payload blob of {KIND} {} is missing", stored.id))
            }
            other => other,
        })?;
        record.project = ProjectId::new(body_str(&stored.body, "project").unwrap_or_default());
        Ok(record)
    }

    fn pages(&self) -> BatchPages<'_> {
        BatchPages {
            blobs: self.blobs.as_ref(),
            retention: &self.retention,
        }
    }

    /// The batch item whose episode id (minted for it) is `episode_id`, when there is one.
    async fn batch_episode(
        &self,
        project: &ProjectId,
        episode_id: Uuid,
    ) -> Result<Option<InferenceRecord>, StorageError> {
        let Some(item) = BatchItemId::parse(episode_id).filter(|item| item.kind == ItemIdKind::Episode) else {
            return Ok(None);
        };
        let record = self
            .pages()
            .record(project, BatchItemId::inference(item.batch_id, item.index))
            .await?;
        Ok(record.filter(|record| record.episode_id == episode_id))
    }
}

#[async_trait]
impl InferenceStore for StateInferenceStore {
    async fn put(&self, record: &InferenceRecord) -> Result<(), StorageError> {
        let project = &record.project;
        let mut body = Map::new();
        body.insert("project".into(), Value::String(project.to_string()));
        body.insert("inference_id".into(), Value::String(record.inference_id.to_string()));
        body.insert("episode_id".into(), Value::String(record.episode_id.to_string()));
        body.insert("function_name".into(), Value::String(record.function_name.clone()));
        body.insert("variant_name".into(), Value::String(record.variant_name.clone()));
        let key = blob_key(project, record.inference_id, Uuid::now_v7());
        let spilled = stash(self.blobs.as_ref(), &key, record, &mut body).await?;
        let created_at_ms = uuid_ms(&record.inference_id);
        let created = self
            .state
            .create(&Record {
                kind: KIND.into(),
                id: record_id(project, record.inference_id),
                owner: episode_owner(project, record.episode_id),
                created_at_ms,
                version: 1,
                expires_at: self.retention.expires_at(created_at_ms),
                body: Value::Object(body),
            })
            .await;
        if spilled && matches!(created, Err(StorageError::Conflict)) {
            // The record that stays names its own blob: this one is nobody's.
            if let Err(err) = self.blobs.delete(&key).await {
                tracing::warn!(key = %key, error = %err, "could not delete the payload of a duplicate inference record");
            }
        }
        created?;
        self.state
            .create(&Record {
                kind: FUNCTION_INDEX_KIND.into(),
                id: record_id(project, record.inference_id),
                owner: function_owner(project, &record.function_name),
                created_at_ms,
                version: 1,
                expires_at: self.retention.expires_at(created_at_ms),
                body: Value::Object(Map::new()),
            })
            .await
    }

    async fn get(&self, project: &ProjectId, inference_id: Uuid) -> Result<Option<InferenceRecord>, StorageError> {
        if let Some(stored) = self.state.get(KIND, &record_id(project, inference_id)).await? {
            if !self.live(&stored) {
                return Ok(None);
            }
            return self.decode(&stored).await.map(Some);
        }
        match BatchItemId::parse(inference_id).filter(|item| item.kind == ItemIdKind::Inference) {
            Some(item) => self.pages().record(project, item).await,
            None => Ok(None),
        }
    }

    async fn list_episode(
        &self,
        project: &ProjectId,
        episode_id: Uuid,
        after: Option<Uuid>,
        limit: usize,
    ) -> Result<InferencePage, StorageError> {
        let page = self
            .state
            .list_by_owner(&oldest_first(
                KIND,
                episode_owner(project, episode_id),
                project,
                after,
                limit,
            ))
            .await?;
        let live = page.records.iter().filter(|stored| self.live(stored));
        let mut records = futures::future::try_join_all(live.map(|stored| self.decode(stored))).await?;
        let mut has_more = page.has_more;
        // A batch item on the episode minted for it: the episode's first inference.
        if let Some(item) = self.batch_episode(project, episode_id).await? {
            if after.is_none_or(|after| after < item.inference_id) {
                records.insert(0, item);
                records.sort_by_key(|record| (uuid_ms(&record.inference_id), record.inference_id));
                if records.len() > limit {
                    records.truncate(limit);
                    has_more = true;
                }
            }
        }
        Ok(InferencePage { records, has_more })
    }

    async fn list_function(
        &self,
        project: &ProjectId,
        function_name: &str,
        after: Option<Uuid>,
        limit: usize,
    ) -> Result<InferencePage, StorageError> {
        let page = self
            .state
            .list_heads_by_owner(&oldest_first(
                FUNCTION_INDEX_KIND,
                function_owner(project, function_name),
                project,
                after,
                limit,
            ))
            .await?;
        let live = page.records.iter().filter(|head| self.live(head));
        let found = futures::future::try_join_all(live.map(|head| async move {
            match self.state.get(KIND, &head.id).await? {
                Some(stored) if self.live(&stored) => self.decode(&stored).await.map(Some),
                _ => Ok(None),
            }
        }))
        .await?;
        Ok(InferencePage {
            records: found.into_iter().flatten().collect(),
            has_more: page.has_more,
        })
    }

    async fn episode_exists(&self, project: &ProjectId, episode_id: Uuid) -> Result<bool, StorageError> {
        let page = self
            .state
            .list_heads_by_owner(&ListQuery {
                kind: KIND.into(),
                owner: episode_owner(project, episode_id),
                after: None,
                limit: 1,
                // The newest: if it is past its retention, so are the older ones.
                order: ListOrder::Desc,
            })
            .await?;
        Ok(page.records.iter().any(|stored| self.live(stored))
            || self.batch_episode(project, episode_id).await?.is_some())
    }

    async fn put_batch_page(
        &self,
        project: &ProjectId,
        batch_id: Uuid,
        page: u32,
        records: &[InferenceRecord],
    ) -> Result<Option<BatchPage>, StorageError> {
        self.pages().put_page(project, batch_id, page, records).await
    }

    async fn put_batch_index(
        &self,
        project: &ProjectId,
        batch_id: Uuid,
        pages: &[BatchPage],
    ) -> Result<(), StorageError> {
        self.pages().put_index(project, batch_id, pages).await
    }

    async fn batch_records(
        &self,
        project: &ProjectId,
        batch_id: Uuid,
        items: Range<u32>,
    ) -> Result<Vec<InferenceRecord>, StorageError> {
        self.pages().records(project, batch_id, items).await
    }
}
