//! [`FeedbackStore`] over a state store and a blob store.

use super::payload::{body_str, stash, unstash};
use super::retention::RecordRetention;
use crate::ports::clock::uuid_unix_ms as uuid_ms;
use crate::ports::inference_records::FeedbackRecord;
use crate::ports::{BlobStore, FeedbackStore, ListOrder, ListQuery, ProjectId, Record, StateStore, StorageError};
use async_trait::async_trait;
use serde_json::{Map, Value};
use std::sync::Arc;
use uuid::Uuid;

const KIND: &str = "feedback";
/// Feedback records read per listing when looking for a target's latest of one metric.
const TARGET_PAGE: usize = 25;

/// Feedback records in the state store, large ones' payloads (demonstrations) in the blob store;
/// records past `retention` are gone (see [`RecordRetention`]).
#[derive(Clone)]
pub struct StateFeedbackStore {
    state: Arc<dyn StateStore>,
    blobs: Arc<dyn BlobStore>,
    retention: RecordRetention,
}

fn record_id(project: &ProjectId, feedback_id: Uuid) -> String {
    format!("{project}/{feedback_id}")
}

impl StateFeedbackStore {
    pub fn new(state: Arc<dyn StateStore>, blobs: Arc<dyn BlobStore>, retention: RecordRetention) -> Self {
        Self {
            state,
            blobs,
            retention,
        }
    }
}

#[async_trait]
impl FeedbackStore for StateFeedbackStore {
    async fn put(&self, record: &FeedbackRecord) -> Result<(), StorageError> {
        let project = &record.project;
        let mut body = Map::new();
        body.insert("project".into(), Value::String(project.to_string()));
        body.insert("metric_name".into(), Value::String(record.metric_name.clone()));
        stash(
            self.blobs.as_ref(),
            &format!("feedback/{project}/{}.json", record.feedback_id),
            record,
            &mut body,
        )
        .await?;
        let created_at_ms = uuid_ms(&record.feedback_id);
        self.state
            .create(&Record {
                kind: KIND.into(),
                id: record_id(project, record.feedback_id),
                owner: format!("{project}/{}", record.target_id),
                created_at_ms,
                version: 1,
                expires_at: self.retention.expires_at(created_at_ms),
                body: Value::Object(body),
            })
            .await
    }

    async fn get(&self, project: &ProjectId, feedback_id: Uuid) -> Result<Option<FeedbackRecord>, StorageError> {
        let Some(stored) = self.state.get(KIND, &record_id(project, feedback_id)).await? else {
            return Ok(None);
        };
        if self.retention.is_past(stored.expires_at, stored.created_at_ms) {
            return Ok(None);
        }
        self.decode(&stored).await.map(Some)
    }

    async fn latest_for_target(
        &self,
        project: &ProjectId,
        target_id: Uuid,
        metric_name: &str,
    ) -> Result<Option<FeedbackRecord>, StorageError> {
        let mut after = None;
        loop {
            let page = self
                .state
                .list_by_owner(&ListQuery {
                    kind: KIND.into(),
                    owner: format!("{project}/{target_id}"),
                    after,
                    limit: TARGET_PAGE,
                    order: ListOrder::Desc,
                })
                .await?;
            let found = page.records.iter().find(|stored| {
                body_str(&stored.body, "metric_name") == Some(metric_name)
                    && !self.retention.is_past(stored.expires_at, stored.created_at_ms)
            });
            if let Some(stored) = found {
                return self.decode(stored).await.map(Some);
            }
            match page.records.last() {
                Some(last) if page.has_more => after = Some(last.cursor()),
                _ => return Ok(None),
            }
        }
    }
}

impl StateFeedbackStore {
    async fn decode(&self, stored: &Record) -> Result<FeedbackRecord, StorageError> {
        let mut record: FeedbackRecord = unstash(self.blobs.as_ref(), &stored.body).await.map_err(|e| match e {
            StorageError::NotFound => {
                StorageError::Backend(format!("the payload blob of {KIND} {} is missing", stored.id))
            }
            other => other,
        })?;
        record.project = ProjectId::new(body_str(&stored.body, "project").unwrap_or_default());
        Ok(record)
    }
}
