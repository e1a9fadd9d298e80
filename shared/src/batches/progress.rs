//! Chunk leases and saved progress. A segment's results are written to the blob store first
//! (under a key no other run uses), then the chunk record and the batch's counters move together
//! in one conditional write: a segment is counted exactly once, or not at all and run again.

use super::records::{chunk_id, edit, Edit, Lease, Loaded, Segment, StoredBatch, StoredChunk, BATCH_KIND, CHUNK_KIND};
use super::{BatchService, BatchesError};
use crate::openai::batches::BatchUsage;
use crate::ports::StorageError;
use bytes::Bytes;
use std::time::Duration;

/// Results of consecutive lines, not yet saved.
#[derive(Debug, Default)]
pub(crate) struct PendingSegment {
    pub lines: u64,
    pub completed: u64,
    pub failed: u64,
    pub output: Vec<u8>,
    pub errors: Vec<u8>,
    pub usage: BatchUsage,
}

impl PendingSegment {
    pub fn push(&mut self, result: super::lines::LineResult) {
        self.lines += 1;
        let target = if result.ok {
            self.completed += 1;
            &mut self.output
        } else {
            self.failed += 1;
            &mut self.errors
        };
        target.extend_from_slice(result.line.as_bytes());
        target.push(b'\n');
        self.usage.add_usage(&result.usage);
    }

    pub fn is_empty(&self) -> bool {
        self.lines == 0
    }
}

/// One run of one chunk: who it is (`token`), until when it holds the chunk, and what its lines are.
pub(crate) struct ChunkRun<'a> {
    pub batch: &'a StoredBatch,
    pub lines: std::sync::Arc<dyn super::lines::LineKind>,
    pub index: u32,
    pub token: String,
    pub lease_until_ms: i64,
}

/// Whether a chunk could be taken.
pub(crate) enum LeaseOutcome {
    /// Taken: the chunk as this run wrote it.
    Taken(Box<Loaded<StoredChunk>>),
    /// Finished already.
    Done,
    /// Another run holds it until then.
    HeldUntil(i64),
    Missing,
}

impl BatchService {
    /// Take the chunk for a run with `token` until `until_ms`.
    pub(crate) async fn lease_chunk(
        &self,
        batch_id: &str,
        index: u32,
        token: &str,
        until_ms: i64,
    ) -> Result<LeaseOutcome, BatchesError> {
        let now_ms = self.now_ms();
        let edited = edit(
            self.state.as_ref(),
            CHUNK_KIND,
            &chunk_id(batch_id, index),
            |chunk: &mut StoredChunk| {
                if chunk.done {
                    return Edit::Keep(Some(LeaseOutcome::Done));
                }
                if let Some(lease) = chunk.leased_at(now_ms) {
                    return Edit::Keep(Some(LeaseOutcome::HeldUntil(lease.until_ms)));
                }
                chunk.lease = Some(Lease {
                    token: token.to_owned(),
                    until_ms,
                });
                Edit::Save(None)
            },
        )
        .await?;
        Ok(match edited {
            None => LeaseOutcome::Missing,
            Some((Some(outcome), _)) => outcome,
            Some((None, chunk)) => LeaseOutcome::Taken(Box::new(chunk)),
        })
    }

    /// Give the chunk up (its saved progress stays).
    pub(crate) async fn release_chunk(&self, batch_id: &str, index: u32, token: &str) -> Result<(), BatchesError> {
        edit(
            self.state.as_ref(),
            CHUNK_KIND,
            &chunk_id(batch_id, index),
            |chunk: &mut StoredChunk| {
                if chunk.lease.as_ref().is_none_or(|lease| lease.token != token) {
                    return Edit::Keep(());
                }
                chunk.lease = None;
                Edit::Save(())
            },
        )
        .await?;
        Ok(())
    }

    /// Save a segment: its result blobs, then chunk progress and batch counters in one write.
    /// Returns the batch as it stands after the write, or `None` if the lease was lost (another
    /// run took the chunk over; nothing was counted).
    pub(crate) async fn save_segment(
        &self,
        run: &ChunkRun<'_>,
        known_chunk: &mut Option<Loaded<StoredChunk>>,
        segment_number: usize,
        pending: PendingSegment,
        chunk_finished: bool,
    ) -> Result<Option<StoredBatch>, BatchesError> {
        let ChunkRun {
            batch,
            index,
            token,
            lease_until_ms,
            ..
        } = run;
        let (index, lease_until_ms) = (*index, *lease_until_ms);
        let prefix = format!(
            "{}/results/{index:05}-{segment_number:05}-{token}",
            batch.results_prefix()
        );
        let mut segment = Segment {
            lines: pending.lines,
            completed: pending.completed,
            failed: pending.failed,
            output_key: None,
            error_key: None,
            usage: pending.usage,
        };
        if !pending.output.is_empty() {
            let key = format!("{prefix}.out.jsonl");
            self.blobs.put(&key, Bytes::from(pending.output)).await?;
            segment.output_key = Some(key);
        }
        if !pending.errors.is_empty() {
            let key = format!("{prefix}.err.jsonl");
            self.blobs.put(&key, Bytes::from(pending.errors)).await?;
            segment.error_key = Some(key);
        }
        let batch_id = &batch.batch.id;
        let mut delay_ms = 5;
        for _ in 0..50 {
            // The chunk as this run last wrote it saves a read; if anyone wrote it since, the
            // conditional write fails and the next attempt reads it afresh.
            let mut chunk = match known_chunk.take() {
                Some(chunk) => chunk,
                None => match Loaded::<StoredChunk>::get(self.state.as_ref(), CHUNK_KIND, &chunk_id(batch_id, index))
                    .await?
                {
                    Some(chunk) => chunk,
                    None => return Ok(self.discard_segment(&segment).await),
                },
            };
            if chunk.body.lease.as_ref().is_none_or(|lease| &lease.token != token) || chunk.body.done {
                return Ok(self.discard_segment(&segment).await);
            }
            let Some(mut current) = Loaded::<StoredBatch>::get(self.state.as_ref(), BATCH_KIND, batch_id).await? else {
                return Ok(self.discard_segment(&segment).await);
            };
            if current.body.sealed {
                // The finalizer has read the results already: these lines count as never run.
                return Ok(self.discard_segment(&segment).await);
            }
            chunk.body.lines_done += segment.lines;
            chunk.body.segments.push(segment.clone());
            chunk.body.done = chunk_finished;
            if let Some(lease) = chunk.body.lease.as_mut() {
                lease.until_ms = lease_until_ms;
            }
            let counts = &mut current.body.batch.request_counts;
            counts.completed += segment.completed;
            counts.failed += segment.failed;
            current.body.batch.usage.add_usage(&segment.usage);
            if chunk_finished {
                current.body.chunks_done += 1;
            }
            let (chunk_record, chunk_version) = chunk.next()?;
            match self
                .state
                .update_all(&[(chunk_record.clone(), chunk_version), current.next()?])
                .await
            {
                Ok(()) => {
                    chunk.record = chunk_record;
                    *known_chunk = Some(chunk);
                    return Ok(Some(current.body));
                }
                Err(StorageError::Conflict) => {
                    // Another chunk moved the batch's counters: read both again.
                    let jitter = rand::random::<u64>() % delay_ms;
                    tokio::time::sleep(Duration::from_millis(delay_ms + jitter)).await;
                    delay_ms = (delay_ms * 2).min(200);
                }
                Err(err) => return Err(err.into()),
            }
        }
        Err(StorageError::Conflict.into())
    }

    /// A segment that was not counted (the run lost its lease, or the batch was sealed or is
    /// gone): its result blobs go, so nothing is left under a finished batch. Always `None`.
    async fn discard_segment(&self, segment: &Segment) -> Option<StoredBatch> {
        for key in [&segment.output_key, &segment.error_key].into_iter().flatten() {
            if let Err(err) = self.blobs.delete(key).await {
                tracing::warn!(blob = %key, error = %err, "could not delete an uncounted segment");
            }
        }
        None
    }
}
