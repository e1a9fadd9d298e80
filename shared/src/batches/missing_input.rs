//! A batch whose input bytes are gone (removed behind the engine's back: a batch holds its
//! input, so deleting the file does not do this). Its unread requests cannot be named or run:
//! each becomes one error line with code `input_file_missing`, so the batch ends with every request
//! accounted for instead of retrying a read that can never succeed.

use super::input_validation::ChunkRange;
use super::progress::{ChunkRun, PendingSegment};
use super::records::{Loaded, StoredChunk};
use super::{BatchService, BatchesError};
use crate::ports::{IdSource, JobOutcome};
use serde_json::json;

pub(crate) const INPUT_MISSING_CODE: &str = "input_file_missing";

/// One error line per request of `range` from request `from` (0-based within the chunk) on.
pub(crate) fn missing_input_lines(ids: &dyn IdSource, input_file_id: &str, range: &ChunkRange, from: u64) -> Vec<u8> {
    let mut out = Vec::new();
    for request in from..range.lines {
        let line = json!({
            "id": ids.prefixed("batch_req_"),
            "custom_id": null,
            "response": null,
            "error": {
                "code": INPUT_MISSING_CODE,
                "message": format!(
                    "The batch's input file {input_file_id} no longer exists: request {} of the {} starting at input line {} could not be read.",
                    request + 1,
                    range.lines,
                    range.first_line
                ),
            },
        });
        out.extend_from_slice(line.to_string().as_bytes());
        out.push(b'\n');
    }
    out
}

impl BatchService {
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
                self.finalize_quietly(&batch.batch.id).await;
            }
            Some(_) => {}
            // Lease lost or batch sealed: whoever holds it now accounts for these requests.
            None => self.release_chunk(&batch.batch.id, run.index, &run.token).await?,
        }
        Ok(JobOutcome::Done)
    }
}
