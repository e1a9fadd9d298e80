//! Finishing a batch: when every chunk is done (→ `completed`), when it is cancelling and no run
//! holds a chunk any more (→ `cancelled`), or when its window has passed (→ `expired`). The output
//! file (successes) and the error file (failed lines, and lines that never ran) are streamed from
//! the saved segments into files under ids reserved beforehand, so an interrupted finalization
//! that runs again writes the same files. Safe to run twice at once.

use super::lines::missing_input_lines;
use super::lines::LineKinds;
use super::lines::{BatchLine, LineKind};
use super::live::Live;
use super::native::stored::PART_KIND;
use super::native::{close_staging, parts_expired, parts_of};
use super::stored::chunks_of;
use super::stored::{
    edit, list_all, BatchFormat, Edit, LeaseUntil, Loaded, Segment, StoredBatch, StoredChunk, ACTIVE_KIND, BATCH_KIND,
    CHUNK_KIND,
};
use super::BatchesError;
use crate::files::{FilesService, NewFile};
use crate::openai::batches::BatchStatus;
use crate::openai::files::FilePurpose;
use crate::ports::{
    BatchEventSink, BatchId, BlobStore, ByteStream, Clock, FileId, IdSource, InferenceStore, JobOutcome, JobQueue,
    StateStore, StorageError,
};
use bytes::Bytes;
use futures::{StreamExt, TryStreamExt};
use std::sync::Arc;

/// How long one finalizer may work before another may take over.
const FINALIZE_LEASE_MS: i64 = 15 * 60 * 1000;

/// How long a cancel waits for chunk runs to save what they finished before it seals the batch:
/// live runs notice a cancel within their status poll interval.
const CANCEL_GRACE_MS: i64 = 3000;

/// What one finalization attempt found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum FinalizeStep {
    /// This call finished the batch.
    Finished,
    /// Not ready (still running, finished already, or another finalizer works on it).
    NotReady,
    /// Ready once running chunks have saved, at the latest at this time (ms).
    WaitUntil(i64),
}

const CANCELLED_MESSAGE: &str = "This request was not executed because the batch was cancelled.";
const EXPIRED_MESSAGE: &str = "This request could not be executed before the completion window expired.";

/// Concatenated blobs, one after another, each streamed.
fn concat_blobs(blobs: Arc<dyn BlobStore>, keys: Vec<String>) -> ByteStream {
    futures::stream::iter(keys)
        .then(move |key| {
            let blobs = Arc::clone(&blobs);
            async move { blobs.get_stream(&key).await }
        })
        .try_flatten()
        .boxed()
}

/// The batch's input is no longer read: its hold on the bytes goes, and the bytes with it if the
/// file was deleted meanwhile. Idempotent.
pub(crate) async fn release_input(files: &FilesService, stored: &StoredBatch) -> Result<(), BatchesError> {
    if !matches!(stored.format, BatchFormat::OpenAiJsonl) {
        // A `/batch_inference` input is the batch's own object, kept: polls read its ids.
        return Ok(());
    }
    files
        .release_hold(
            &stored.input_blob_key,
            &FileId::new(&stored.batch.input_file_id),
            &BatchId::new(&stored.batch.id),
        )
        .await?;
    Ok(())
}

/// Ends batches: seals them, writes their result files (or keeps `/batch_inference` items'
/// inference pages), moves them to their terminal status, cleans up and tells their event.
pub(crate) struct Finalizer {
    pub(super) state: Arc<dyn StateStore>,
    pub(super) blobs: Arc<dyn BlobStore>,
    /// Hands batches with provider-native work open to the `native` job.
    pub(super) queue: Arc<dyn JobQueue>,
    pub(super) clock: Arc<dyn Clock>,
    /// Ids of the error lines of lines that never ran.
    pub(super) ids: Arc<dyn IdSource>,
    /// Result files are created here, and the input's hold released.
    pub(super) files: FilesService,
    /// Where `/batch_inference` items' inference pages go.
    pub(super) records: Arc<dyn InferenceStore>,
    pub(super) events: Arc<dyn BatchEventSink>,
    pub(super) kinds: LineKinds,
    pub(super) live: Live,
}

impl Finalizer {
    /// [`Finalizer::try_finalize`], logging instead of failing: the poller tries again.
    pub(crate) async fn finalize_quietly(&self, batch_id: &str) {
        if let Err(err) = self.try_finalize(batch_id).await {
            tracing::warn!(batch = %batch_id, error = %err, "finalizing failed; the poller will retry");
        }
    }

    /// The `finalize` job (sent by a cancel): tried again while running chunks may still save.
    pub(crate) async fn finalize_job(&self, batch_id: &str) -> Result<JobOutcome, BatchesError> {
        Ok(match self.finalize_step(batch_id).await? {
            FinalizeStep::WaitUntil(until_ms) => {
                let wait_ms = u64::try_from(until_ms - self.clock.now_unix_ms()).unwrap_or(0).max(100);
                JobOutcome::Retry {
                    retry_after: std::time::Duration::from_millis(wait_ms),
                }
            }
            FinalizeStep::Finished | FinalizeStep::NotReady => JobOutcome::Done,
        })
    }

    /// Finish the batch if it is ready. Returns whether this call finished it.
    pub(crate) async fn try_finalize(&self, batch_id: &str) -> Result<bool, BatchesError> {
        Ok(self.finalize_step(batch_id).await? == FinalizeStep::Finished)
    }

    /// Finish the batch if it is ready; else say whether it is worth trying again soon.
    pub(crate) async fn finalize_step(&self, batch_id: &str) -> Result<FinalizeStep, BatchesError> {
        for _ in 0..10 {
            let Some(mut batch) = Loaded::<StoredBatch>::get(self.state.as_ref(), BATCH_KIND, batch_id).await? else {
                return Ok(FinalizeStep::NotReady);
            };
            let status = batch.body.batch.status;
            if status.is_terminal() {
                self.clean_up(&batch.body).await?;
                return Ok(FinalizeStep::NotReady);
            }
            let all_done = batch.body.all_chunks_done();
            let native_open = batch.body.native.open();
            let overdue = batch.body.is_overdue(self.clock.as_ref());
            // Provider-native lines cut short by the window: the batch expired, even though
            // every part is counted now.
            let native_expired = overdue
                && !native_open
                && batch.body.native.staged > 0
                && parts_expired(self.state.as_ref(), batch_id).await?;
            let target = match status {
                BatchStatus::Cancelling => BatchStatus::Cancelled,
                BatchStatus::Finalizing => BatchStatus::Completed,
                BatchStatus::InProgress if all_done && !(native_open && overdue) && !native_expired => {
                    BatchStatus::Completed
                }
                BatchStatus::InProgress if overdue => BatchStatus::Expired,
                _ => return Ok(FinalizeStep::NotReady),
            };
            let now_ms = self.clock.now_unix_ms();
            if batch.body.finalize_lease_until_ms.held_at(now_ms) {
                return Ok(FinalizeStep::NotReady);
            }
            if target != BatchStatus::Completed && !batch.body.sealed {
                // Let running chunks save what they finished first; a cancel waits only a few
                // seconds (a chunk may be held by a run that died, or be stuck): after the seal,
                // what a late run saves is not counted and its lines are listed as never run.
                let chunks = chunks_of(self.state.as_ref(), batch_id).await?;
                let held_until = chunks
                    .iter()
                    .filter(|c| !c.done)
                    .filter_map(|c| c.held_until(now_ms))
                    .max();
                let wait_until = match (held_until, batch.body.batch.cancelling_at) {
                    (None, _) => None,
                    (Some(until), Some(cancelling_at)) if target == BatchStatus::Cancelled => {
                        Some(until.min(cancelling_at.saturating_mul(1000) + CANCEL_GRACE_MS))
                    }
                    (Some(until), _) => Some(until),
                };
                if let Some(until_ms) = wait_until.filter(|until| *until > now_ms) {
                    return Ok(FinalizeStep::WaitUntil(until_ms));
                }
            }
            if native_open {
                // Staged lines wait for their provider batches: the `native` job finalizes
                // once every part is counted.
                if !close_staging(self.state.as_ref(), self.queue.as_ref(), &mut batch).await? {
                    continue;
                }
                return Ok(FinalizeStep::NotReady);
            }
            batch.body.sealed = true;
            batch.body.finalize_lease_until_ms = LeaseUntil::until(now_ms + FINALIZE_LEASE_MS);
            if batch.body.reserved_output_file_id.is_none() {
                batch.body.reserved_output_file_id = Some(self.ids.prefixed("file-"));
                batch.body.reserved_error_file_id = Some(self.ids.prefixed("file-"));
            }
            if target == BatchStatus::Completed && status == BatchStatus::InProgress {
                batch.body.batch.status = BatchStatus::Finalizing;
                batch.body.batch.finalizing_at = Some(self.clock.now_unix_s());
            }
            match batch.save(self.state.as_ref()).await {
                Ok(()) => {}
                Err(StorageError::Conflict) => continue,
                Err(err) => return Err(err.into()),
            }
            if let Err(err) = self.assemble_and_finish(&batch.body, target).await {
                // Let the next attempt (a worker, the poller) take over at once.
                self.drop_finalize_lease(batch_id).await;
                return Err(err);
            }
            return Ok(FinalizeStep::Finished);
        }
        Ok(FinalizeStep::NotReady)
    }

    async fn drop_finalize_lease(&self, batch_id: &str) {
        let dropped = edit(self.state.as_ref(), BATCH_KIND, batch_id, |batch: &mut StoredBatch| {
            if batch.batch.status.is_terminal() {
                return Edit::Keep(());
            }
            batch.finalize_lease_until_ms = LeaseUntil::NONE;
            Edit::Save(())
        })
        .await;
        if let Err(err) = dropped {
            tracing::warn!(batch = %batch_id, error = %err, "could not drop the finalize lease; it expires");
        }
    }

    /// Write the result files of a sealed batch and move it to its terminal status.
    async fn assemble_and_finish(&self, stored: &StoredBatch, target: BatchStatus) -> Result<(), BatchesError> {
        let batch_id = stored.batch.id.clone();
        // Only the chunks of a finished validation count: a cancel can land while validation is
        // still writing chunk records, and then the batch has no requests yet (`total` 0).
        let planned = stored.chunks;
        let chunks: Vec<StoredChunk> = chunks_of(self.state.as_ref(), &batch_id)
            .await?
            .into_iter()
            .filter(|chunk| chunk.index < planned)
            .collect();
        let unrun: u64 = chunks.iter().map(|c| c.range.lines.saturating_sub(c.lines_done)).sum();
        let completed = stored.batch.request_counts.completed;
        let failed = stored.batch.request_counts.failed;
        // Results of provider-native parts follow the workers'.
        let parts = parts_of(self.state.as_ref(), &batch_id).await?;
        let segments: Vec<&Segment> = chunks
            .iter()
            .flat_map(|c| c.segments.iter())
            .chain(parts.iter().filter_map(|p| p.body.result.as_ref()))
            .collect();
        let output_keys: Vec<String> = segments.iter().filter_map(|s| s.output_key.clone()).collect();
        let error_keys: Vec<String> = segments.iter().filter_map(|s| s.error_key.clone()).collect();

        let (code, message) = if target == BatchStatus::Expired {
            ("batch_expired", EXPIRED_MESSAGE)
        } else {
            ("batch_cancelled", CANCELLED_MESSAGE)
        };
        let kind = self.kinds.of(stored);
        let (output_file_id, error_file_id) = match &stored.format {
            BatchFormat::OpenAiJsonl => {
                let output_file_id = match (&stored.reserved_output_file_id, completed > 0) {
                    (Some(id), true) => {
                        let body = concat_blobs(Arc::clone(&self.blobs), output_keys);
                        Some(self.write_result_file(stored, id, "output", body).await?)
                    }
                    _ => None,
                };
                let error_file_id = match (&stored.reserved_error_file_id, failed + unrun > 0) {
                    (Some(id), true) => {
                        let not_run = self.not_run_lines(stored, kind, chunks.clone(), code, message);
                        let body = concat_blobs(Arc::clone(&self.blobs), error_keys).chain(not_run).boxed();
                        Some(self.write_result_file(stored, id, "error", body).await?)
                    }
                    _ => None,
                };
                (output_file_id, error_file_id)
            }
            // The results are the inference records, kept in the batch's pages; what failed or
            // never ran is kept beside the batch for polling.
            BatchFormat::TensorZero(_) => {
                self.keep_inference_pages(stored, &output_keys).await?;
                if failed + unrun > 0 {
                    let not_run = self.not_run_lines(stored, kind, chunks.clone(), code, message);
                    let body = concat_blobs(Arc::clone(&self.blobs), error_keys).chain(not_run).boxed();
                    self.blobs.put_stream(&stored.failures_key(), body).await?;
                }
                (None, None)
            }
        };

        let now = self.clock.now_unix_s();
        // The sealed batch only moves by a cancel: the edit sees it fresh after a lost write.
        let edited = edit(self.state.as_ref(), BATCH_KIND, &batch_id, |batch: &mut StoredBatch| {
            let current_status = batch.batch.status;
            if current_status.is_terminal() {
                return Edit::Keep(());
            }
            let object = &mut batch.batch;
            // A cancel that arrived while finalizing still ends `cancelled` (with every result).
            let final_status = if current_status == BatchStatus::Cancelling {
                BatchStatus::Cancelled
            } else {
                target
            };
            object.status = final_status;
            match final_status {
                BatchStatus::Completed => object.completed_at = Some(now),
                BatchStatus::Cancelled => object.cancelled_at = Some(now),
                BatchStatus::Expired => object.expired_at = Some(now),
                _ => {}
            }
            object.output_file_id = output_file_id.clone();
            object.error_file_id = error_file_id.clone();
            object.request_counts.failed += unrun;
            object.request_counts.not_run += unrun;
            batch.finalize_lease_until_ms = LeaseUntil::NONE;
            if let BatchFormat::TensorZero(plan) = &mut batch.format {
                // Nothing runs any more: the credentials go.
                plan.credentials.clear();
                plan.sealed_credentials = None;
            }
            Edit::Save(())
        })
        .await?;
        match edited {
            Some((_, batch)) => self.clean_up(&batch.body).await,
            None => Ok(()),
        }
    }

    async fn write_result_file(
        &self,
        stored: &StoredBatch,
        file_id: &str,
        which: &str,
        body: ByteStream,
    ) -> Result<String, BatchesError> {
        let new = NewFile {
            filename: format!("{}_{which}.jsonl", stored.batch.id),
            purpose: FilePurpose::BatchOutput,
            // `expires_at` = the file's creation + the policy's seconds, swept like any expiring file.
            expires_after: stored.output_expires_after.clone(),
        };
        let file = self
            .files
            .create_generated_file(&stored.project, &FileId::new(file_id), new, body)
            .await?;
        Ok(file.id)
    }

    /// Error lines for every request line that never ran, chunk by chunk.
    fn not_run_lines(
        &self,
        stored: &StoredBatch,
        kind: Arc<dyn LineKind>,
        chunks: Vec<StoredChunk>,
        code: &'static str,
        message: &'static str,
    ) -> ByteStream {
        let blobs = Arc::clone(&self.blobs);
        let ids: Arc<dyn IdSource> = Arc::clone(&self.ids);
        let input = stored.input_blob_key.clone();
        let input_file_id = stored.batch.input_file_id.clone();
        futures::stream::iter(chunks.into_iter().filter(|c| c.lines_done < c.range.lines))
            .then(move |chunk| {
                let blobs = Arc::clone(&blobs);
                let ids = Arc::clone(&ids);
                let kind = Arc::clone(&kind);
                let input = input.clone();
                let input_file_id = input_file_id.clone();
                async move {
                    let bytes = match blobs.get_range(&input, chunk.range.start, chunk.range.end).await {
                        Ok(bytes) => bytes,
                        // The input object is gone: its unrun lines cannot be named, only counted.
                        Err(StorageError::NotFound) => {
                            tracing::error!(blob = %input, file = %input_file_id, batch = %chunk.batch_id, chunk = chunk.index, "the batch's input object is missing; never-run lines are listed without custom_id");
                            let lines = missing_input_lines(ids.as_ref(), &input_file_id, &chunk.range, chunk.lines_done);
                            return Ok(Bytes::from(lines));
                        }
                        Err(err) => return Err(err),
                    };
                    let skip = usize::try_from(chunk.lines_done).unwrap_or(usize::MAX);
                    let mut out = Vec::new();
                    for line in crate::jsonl::line_bytes(&bytes).iter().skip(skip) {
                        let line = BatchLine::read(line);
                        out.extend_from_slice(kind.not_run(ids.as_ref(), &line, code, message).as_bytes());
                        out.push(b'\n');
                    }
                    Ok::<Bytes, StorageError>(Bytes::from(out))
                }
            })
            .boxed()
    }

    /// Remove what only a running batch needs: segment results, chunk records, the hold on the
    /// input's bytes, the active marker. Idempotent; the poller calls it again for a terminal
    /// batch whose marker is still there. A terminal batch's event is told before the marker
    /// goes: every batch that ends is told at least once (and the sink ignores repeats).
    pub(crate) async fn clean_up(&self, stored: &StoredBatch) -> Result<(), BatchesError> {
        self.blobs.delete_prefix(&stored.results_prefix()).await?;
        for record in list_all(self.state.as_ref(), CHUNK_KIND, &stored.batch.id).await? {
            self.state.delete(CHUNK_KIND, &record.id, None).await?;
        }
        for record in list_all(self.state.as_ref(), PART_KIND, &stored.batch.id).await? {
            self.state.delete(PART_KIND, &record.id, None).await?;
        }
        self.live.delete_live(&stored.batch.id).await?;
        release_input(&self.files, stored).await?;
        if self.state.get(ACTIVE_KIND, &stored.batch.id).await?.is_some() {
            self.tell_ended(stored).await?;
        }
        self.state.delete(ACTIVE_KIND, &stored.batch.id, None).await?;
        Ok(())
    }

    /// Tell the event sink that an OpenAI batch ended (`/batch_inference` batches have no events).
    async fn tell_ended(&self, stored: &StoredBatch) -> Result<(), BatchesError> {
        let batch = &stored.batch;
        if !batch.status.is_terminal() || stored.format != BatchFormat::OpenAiJsonl {
            return Ok(());
        }
        let ended_at_s = match batch.status {
            BatchStatus::Completed => batch.completed_at,
            BatchStatus::Failed => batch.failed_at,
            BatchStatus::Cancelled => batch.cancelled_at,
            BatchStatus::Expired => batch.expired_at,
            _ => None,
        };
        let at_ms = ended_at_s.map_or_else(|| self.clock.now_unix_ms(), |s| s.saturating_mul(1000));
        self.events
            .batch_ended(&stored.project, &BatchId::new(&batch.id), batch.status.as_str(), at_ms)
            .await?;
        Ok(())
    }
}
