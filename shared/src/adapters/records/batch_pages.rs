//! A `/batch_inference` batch's inference records, kept in pages: one JSON-lines blob per page
//! (records in input order) and one small index blob naming each page's span of items, written
//! last. An item's id says its batch and position ([`BatchItemId`]), so finding it costs the
//! index and one page, and a poll of `n` items reads only the pages that hold them.

use super::retention::RecordRetention;
use crate::ports::clock::uuid_unix_ms;
use crate::ports::inference_records::InferenceRecord;
use crate::ports::{BatchItemId, BatchPage, BlobStore, ItemIdKind, ProjectId, StorageError};
use bytes::Bytes;
use serde::{Deserialize, Serialize};
use std::ops::Range;
use uuid::Uuid;

/// The index blob's body.
#[derive(Debug, Default, Serialize, Deserialize)]
struct PageIndex {
    pages: Vec<BatchPage>,
}

fn prefix(project: &ProjectId, batch_id: Uuid) -> String {
    format!("inferences/{project}/batches/{}", batch_id.simple())
}

fn page_key(project: &ProjectId, batch_id: Uuid, page: u32) -> String {
    format!("{}/page-{page:06}.jsonl", prefix(project, batch_id))
}

fn index_key(project: &ProjectId, batch_id: Uuid) -> String {
    format!("{}/pages.json", prefix(project, batch_id))
}

fn corrupt(what: &str, err: serde_json::Error) -> StorageError {
    StorageError::Backend(format!("corrupt batch inference {what}: {err}"))
}

/// The position of a record of `batch_id`; records of other ids are refused.
fn position(batch_id: Uuid, record: &InferenceRecord) -> Result<u32, StorageError> {
    BatchItemId::of_batch(record.inference_id, batch_id, ItemIdKind::Inference).ok_or_else(|| {
        StorageError::Invalid(format!(
            "inference {} is not an item of batch {batch_id}",
            record.inference_id
        ))
    })
}

/// Pages of batch records in a blob store; they expire with the records' retention (the bucket's
/// lifecycle rule on `inferences/`), and a batch past it has none.
pub(super) struct BatchPages<'a> {
    pub blobs: &'a dyn BlobStore,
    pub retention: &'a RecordRetention,
}

impl BatchPages<'_> {
    pub(crate) async fn put_page(
        &self,
        project: &ProjectId,
        batch_id: Uuid,
        page: u32,
        records: &[InferenceRecord],
    ) -> Result<Option<BatchPage>, StorageError> {
        let mut ordered = records
            .iter()
            .map(|record| position(batch_id, record).map(|at| (at, record)))
            .collect::<Result<Vec<_>, _>>()?;
        ordered.sort_by_key(|(at, _)| *at);
        let (Some((first, _)), Some((last, _))) = (ordered.first(), ordered.last()) else {
            return Ok(None);
        };
        let span = BatchPage {
            page,
            first: *first,
            last: *last,
        };
        let mut body = Vec::new();
        for (_, record) in &ordered {
            serde_json::to_writer(&mut body, record).map_err(|e| StorageError::Invalid(format!("record: {e}")))?;
            body.push(b'\n');
        }
        self.blobs
            .put(&page_key(project, batch_id, page), Bytes::from(body))
            .await?;
        Ok(Some(span))
    }

    pub(crate) async fn put_index(
        &self,
        project: &ProjectId,
        batch_id: Uuid,
        pages: &[BatchPage],
    ) -> Result<(), StorageError> {
        let body = serde_json::to_vec(&PageIndex { pages: pages.to_vec() })
            .map_err(|e| StorageError::Invalid(format!("page index: {e}")))?;
        self.blobs.put(&index_key(project, batch_id), Bytes::from(body)).await
    }

    /// The batch's pages; none before the index is written, nor past the retention (the
    /// lifecycle rule may have deleted some pages and not yet the index: reading them must not
    /// fail).
    async fn index(&self, project: &ProjectId, batch_id: Uuid) -> Result<Vec<BatchPage>, StorageError> {
        if batch_id.get_timestamp().is_some() && self.retention.is_past(None, uuid_unix_ms(&batch_id)) {
            return Ok(Vec::new());
        }
        match self.blobs.get(&index_key(project, batch_id)).await {
            Ok(bytes) => Ok(serde_json::from_slice::<PageIndex>(&bytes)
                .map_err(|e| corrupt("page index", e))?
                .pages),
            Err(StorageError::NotFound) => Ok(Vec::new()),
            Err(err) => Err(err),
        }
    }

    async fn page(&self, project: &ProjectId, batch_id: Uuid, page: u32) -> Result<Vec<InferenceRecord>, StorageError> {
        let bytes = self
            .blobs
            .get(&page_key(project, batch_id, page))
            .await
            .map_err(|err| match err {
                StorageError::NotFound => {
                    StorageError::Backend(format!("page {page} of batch {batch_id}'s inferences is missing"))
                }
                other => other,
            })?;
        crate::jsonl::lines(&bytes)
            .map(|line| {
                let mut record: InferenceRecord = serde_json::from_slice(line).map_err(|e| corrupt("page", e))?;
                record.project = project.clone();
                Ok(record)
            })
            .collect()
    }

    /// The records of the items at `items`, in input order.
    pub async fn records(
        &self,
        project: &ProjectId,
        batch_id: Uuid,
        items: Range<u32>,
    ) -> Result<Vec<InferenceRecord>, StorageError> {
        if items.is_empty() {
            return Ok(Vec::new());
        }
        let mut found = Vec::new();
        for span in self.index(project, batch_id).await? {
            if span.last < items.start || span.first >= items.end {
                continue;
            }
            for record in self.page(project, batch_id, span.page).await? {
                if position(batch_id, &record).is_ok_and(|at| items.contains(&at)) {
                    found.push(record);
                }
            }
        }
        found.sort_by_key(|record| record.inference_id);
        Ok(found)
    }

    /// The record of one item, when its batch's pages hold it.
    pub async fn record(
        &self,
        project: &ProjectId,
        item: BatchItemId,
    ) -> Result<Option<InferenceRecord>, StorageError> {
        let at = item.index;
        Ok(self
            .records(project, item.batch_id, at..at.saturating_add(1))
            .await?
            .into_iter()
            .next())
    }
}
