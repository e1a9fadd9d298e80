//! The `validate` job: stream the input file through validation, then either fail the batch with
//! every error listed, or write its chunk records, move it to `in_progress` and enqueue the chunks.
//! Running it twice is harmless: the plan is deterministic and chunk records are create-if-absent.

use super::finalize::Finalizer;
use super::input_validation::{ChunkLimits, LineError};
use super::lines::LineKinds;
use super::stored::{chunk_id, edit, Edit, Loaded, StoredBatch, StoredChunk, BATCH_KIND, CHUNK_KIND};
use super::{BatchSettings, BatchesError, JobMessage};
use crate::openai::batches::{BatchError, BatchErrors, BatchStatus};
use crate::ports::{BatchId, BlobStore, Clock, JobQueue, StateStore, StorageError};
use std::sync::Arc;

/// At most this many errors are listed on a failed batch (the record must stay small).
pub(crate) const MAX_LISTED_ERRORS: usize = 500;

fn batch_errors(errors: Vec<LineError>) -> BatchErrors {
    BatchErrors {
        object: "list".to_owned(),
        data: errors
            .into_iter()
            .take(MAX_LISTED_ERRORS)
            .map(|e| BatchError {
                code: e.code.to_owned(),
                message: e.message,
                param: e.param,
                line: e.line,
            })
            .collect(),
    }
}

/// Runs the `validate` job: checks a batch's input through its format, writes its chunk records
/// and enqueues them (or fails the batch with its errors).
pub(crate) struct Planner {
    pub(super) state: Arc<dyn StateStore>,
    pub(super) blobs: Arc<dyn BlobStore>,
    pub(super) queue: Arc<dyn JobQueue>,
    pub(super) clock: Arc<dyn Clock>,
    pub(super) settings: Arc<BatchSettings>,
    pub(super) kinds: LineKinds,
    pub(super) finalizer: Arc<Finalizer>,
}

impl Planner {
    pub(crate) async fn run_validation(&self, batch_id: &str) -> Result<(), BatchesError> {
        let Some(batch) = Loaded::<StoredBatch>::get(self.state.as_ref(), BATCH_KIND, batch_id).await? else {
            return Ok(());
        };
        if batch.body.batch.status != BatchStatus::Validating {
            self.finalizer.finalize_quietly(batch_id).await;
            return Ok(());
        }
        let limits = ChunkLimits {
            lines: self.settings.lines_per_chunk,
            bytes: self.settings.max_chunk_bytes,
        };
        let report = self
            .kinds
            .of(&batch.body)
            .plan(self.blobs.as_ref(), &batch.body.input_blob_key, limits)
            .await;
        let report = match report {
            Ok(report) => report,
            Err(StorageError::NotFound) => {
                tracing::error!(batch = %batch_id, file = %batch.body.batch.input_file_id, blob = %batch.body.input_blob_key, "the batch's input object is missing; the batch fails");
                let missing = LineError {
                    code: "file_not_found",
                    message: format!("The input file {} no longer exists.", batch.body.batch.input_file_id),
                    param: Some("input_file_id".to_owned()),
                    line: None,
                };
                return self.fail_validation(batch_id, vec![missing]).await;
            }
            Err(err) => return Err(err.into()),
        };
        if !report.is_valid() {
            return self.fail_validation(batch_id, report.errors).await;
        }
        let now_ms = self.clock.now_unix_ms();
        for (index, range) in report.chunks.iter().enumerate() {
            let index = u32::try_from(index).map_err(|_| StorageError::Invalid("too many chunks".into()))?;
            let chunk = StoredChunk {
                batch_id: batch_id.to_owned(),
                index,
                range: *range,
                lines_done: 0,
                segments: Vec::new(),
                done: false,
                lease: None,
                enqueued_at_ms: now_ms,
            };
            let record = crate::records::new_record(
                CHUNK_KIND.to_owned(),
                chunk_id(batch_id, index),
                batch_id.to_owned(),
                i64::from(index),
                None,
                &chunk,
            )?;
            match self.state.create(&record).await {
                Ok(()) | Err(StorageError::Conflict) => {}
                Err(err) => return Err(err.into()),
            }
        }
        let chunk_count =
            u32::try_from(report.chunks.len()).map_err(|_| StorageError::Invalid("too many chunks".into()))?;
        let started = self
            .transition(batch_id, |stored, now| {
                stored.batch.status = BatchStatus::InProgress;
                stored.batch.in_progress_at = Some(now);
                stored.batch.request_counts.total = report.total_requests;
                stored.chunks = chunk_count;
            })
            .await?;
        if !started {
            // Cancelled meanwhile: finish it (and remove the chunk records just written).
            self.finalizer.finalize_quietly(batch_id).await;
            return Ok(());
        }
        let jobs: Vec<String> = (0..chunk_count)
            .map(|chunk| {
                JobMessage::Chunk {
                    batch_id: BatchId::new(batch_id),
                    chunk,
                }
                .to_body()
            })
            .collect();
        // A lost send is noticed by the poller, which enqueues the chunks again.
        if let Err(err) = self.queue.send_all(&jobs).await {
            tracing::warn!(batch = %batch_id, error = %err, "could not enqueue every chunk; the poller will");
        }
        Ok(())
    }

    async fn fail_validation(&self, batch_id: &str, errors: Vec<LineError>) -> Result<(), BatchesError> {
        let errors = batch_errors(errors);
        self.transition(batch_id, |stored, now| {
            stored.batch.status = BatchStatus::Failed;
            stored.batch.failed_at = Some(now);
            stored.batch.errors = Some(errors.clone());
        })
        .await?;
        // Failed, or cancelled meanwhile: either way it is finished; tidy up.
        self.finalizer.finalize_quietly(batch_id).await;
        Ok(())
    }

    /// Apply `change` to a batch still `validating`; false when it no longer is.
    async fn transition(&self, batch_id: &str, change: impl Fn(&mut StoredBatch, i64)) -> Result<bool, BatchesError> {
        let now = self.clock.now_unix_s();
        let edited = edit(self.state.as_ref(), BATCH_KIND, batch_id, |batch: &mut StoredBatch| {
            if batch.batch.status != BatchStatus::Validating {
                return Edit::Keep(false);
            }
            change(batch, now);
            Edit::Save(true)
        })
        .await?;
        Ok(edited.is_some_and(|(changed, _)| changed))
    }
}
