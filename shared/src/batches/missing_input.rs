//! A batch whose input bytes are gone (removed behind the engine's back: a batch holds its
//! input, so deleting the file does not do this). Its unread requests cannot be named or run:
//! each becomes one error line with code `input_file_missing`, so the batch ends with every request
//! accounted for instead of retrying a read that can never succeed.

use super::chunk_run::ChunkRun;
use super::chunk_run::ChunkRunner;
use super::lines::{missing_input_lines, INPUT_MISSING_CODE};
use super::segment::PendingSegment;
use super::stored::{Loaded, StoredChunk};
use super::BatchesError;
use crate::ports::JobOutcome;

impl ChunkRunner {
    /// The chunk's input could not be read because the object is gone: save its unrun requests as
    /// failed (`input_file_missing`) and finish the chunk.
    pub(crate) async fn fail_chunk_for_missing_input(
        &self,
        run: &ChunkRun<'_>,
        chunk: Loaded<StoredChunk>,
    ) -> Result<JobOutcome, BatchesError> {
        let batch = &run.batch;
        let range = chunk.body.range;
        let unrun = range.lines.saturating_sub(chunk.body.lines_done);
        tracing::error!(
            batch = %batch.batch.id,
            file = %batch.batch.input_file_id,
            blob = %batch.input_blob_key,
            chunk = run.index,
            requests = unrun,
            "the batch's input object is missing; its unread requests fail with {INPUT_MISSING_CODE}"
        );
        let segment = PendingSegment {
            lines: unrun,
            failed: unrun,
            errors: missing_input_lines(
                self.ids.as_ref(),
                &batch.batch.input_file_id,
                &range,
                chunk.body.lines_done,
            ),
            ..PendingSegment::default()
        };
        let segment_number = chunk.body.segments.len();
        let mut known = Some(chunk);
        let saved = self
            .save_segment(run, &mut known, segment_number, segment, true)
            .await?;
        match saved {
            Some(after) if after.all_chunks_done() => {
                self.finalizer.finalize_quietly(&batch.batch.id).await;
            }
            Some(_) => {}
            // Lease lost or batch sealed: whoever holds it now accounts for these requests.
            None => self.release_chunk(&batch.batch.id, run.index, &run.token).await?,
        }
        Ok(JobOutcome::Done)
    }
}
