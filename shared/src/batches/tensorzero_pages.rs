//! When a `/batch_inference` batch ends, its inference records go from the saved results into
//! the inference store: one page per result blob (a segment's or a provider part's successes),
//! then the index that makes them findable. A page is rebuilt from the same blob each time, so a
//! finalizer that runs again (after a crash, or twice at once) writes the same pages. Items on an
//! episode the caller named are also stored one by one, so listing that episode finds them; items
//! whose ids do not derive from the batch (submitted before pages existed) are stored one by one.

use super::finalize::Finalizer;
use super::stored::StoredBatch;
use super::BatchesError;
use crate::ports::inference_records::InferenceRecord;
use crate::ports::{BatchItemId, BatchPage, ItemIdKind, ProjectId, StorageError};
use futures::{StreamExt, TryStreamExt};
use uuid::Uuid;

/// Records stored one by one at once.
const SINGLE_PUT_CONCURRENCY: usize = 16;

impl Finalizer {
    /// Keep the records in the result blobs `output_keys` as the batch's pages, then its index.
    pub(crate) async fn keep_inference_pages(
        &self,
        stored: &StoredBatch,
        output_keys: &[String],
    ) -> Result<(), BatchesError> {
        let project = &stored.project;
        let batch_id = Uuid::parse_str(&stored.batch.id)
            .map_err(|e| StorageError::Invalid(format!("batch id {}: {e}", stored.batch.id)))?;
        let mut spans: Vec<BatchPage> = Vec::new();
        for (page, key) in (0u32..).zip(output_keys) {
            let (paged, singles) = self.result_records(project, batch_id, key).await?;
            self.put_singles(singles).await?;
            if let Some(span) = self.records.put_batch_page(project, batch_id, page, &paged).await? {
                spans.push(span);
            }
        }
        self.records.put_batch_index(project, batch_id, &spans).await?;
        Ok(())
    }

    /// The records of one result blob: those the pages hold, and those also stored one by one.
    async fn result_records(
        &self,
        project: &ProjectId,
        batch_id: Uuid,
        key: &str,
    ) -> Result<(Vec<InferenceRecord>, Vec<InferenceRecord>), BatchesError> {
        let bytes = self.blobs.get(key).await?;
        let mut paged = Vec::new();
        let mut singles = Vec::new();
        for line in crate::jsonl::lines(&bytes) {
            let Ok(mut record) = serde_json::from_slice::<InferenceRecord>(line) else {
                // A result line of an item stored as it ran (a batch from before pages).
                continue;
            };
            record.project = project.clone();
            let derived = BatchItemId::of_batch(record.inference_id, batch_id, ItemIdKind::Inference);
            let minted_episode = BatchItemId::of_batch(record.episode_id, batch_id, ItemIdKind::Episode);
            match derived {
                Some(at) if minted_episode == Some(at) => paged.push(record),
                Some(_) => {
                    singles.push(record.clone());
                    paged.push(record);
                }
                None => singles.push(record),
            }
        }
        Ok((paged, singles))
    }

    /// Store records one by one; one stored before (an earlier finalizer) stays.
    async fn put_singles(&self, records: Vec<InferenceRecord>) -> Result<(), BatchesError> {
        futures::stream::iter(records)
            .map(|record| async move {
                match self.records.put(&record).await {
                    Ok(()) | Err(StorageError::Conflict) => Ok(()),
                    Err(err) => Err(err),
                }
            })
            .buffer_unordered(SINGLE_PUT_CONCURRENCY)
            .try_collect::<Vec<()>>()
            .await?;
        Ok(())
    }
}
