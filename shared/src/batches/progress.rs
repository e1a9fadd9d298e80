//! Chunk leases and saved progress. A segment's results are written to the blob store first
//! (under a key no other run uses), then the chunk record and the batch's counters move together
//! in one conditional write: a segment is counted exactly once, or not at all and run again.

use super::chunk_run::{ChunkRun, ChunkRunner, LeaseOutcome};
use super::segment::{put_results, PendingSegment};
use super::stored::{
    chunk_id, edit, Edit, Lease, LeaseUntil, Loaded, Segment, StagedBlob, StoredBatch, StoredChunk, BATCH_KIND,
    CHUNK_KIND,
};
use super::{count_lines, BatchesError};
use crate::ports::credential_sealer::seal_json;
use crate::ports::StorageError;
use bytes::Bytes;

use std::time::Duration;

/// After a segment's write lost on the batch at `tried`: whether the batch now at `version`
/// explains it (the chunk as this run holds it is then kept). From the 10th attempt on the chunk
/// is read again anyway, so a run whose chunk was also taken over finds out.
fn batch_moved_since(tried: u64, version: u64, attempt: u32) -> bool {
    version != tried && attempt < 10
}

impl ChunkRunner {
    /// Take the chunk for a run with `token` until `until_ms`.
    pub(crate) async fn lease_chunk(
        &self,
        batch_id: &str,
        index: u32,
        token: &str,
        until_ms: i64,
    ) -> Result<LeaseOutcome, BatchesError> {
        let now_ms = self.clock.now_unix_ms();
        let edited = edit(
            self.state.as_ref(),
            CHUNK_KIND,
            &chunk_id(batch_id, index),
            |chunk: &mut StoredChunk| {
                if chunk.done {
                    return Edit::Keep(Some(LeaseOutcome::Done));
                }
                if let Some(until_ms) = chunk.held_until(now_ms) {
                    return Edit::Keep(Some(LeaseOutcome::HeldUntil(until_ms)));
                }
                chunk.lease = Some(Lease {
                    token: token.to_owned(),
                    until_ms: LeaseUntil::until(until_ms),
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
        let mut pending = pending;
        let mut segment = put_results(self.blobs.as_ref(), &prefix, &mut pending).await?;
        let batch_id = &batch.batch.id;
        let mut staged_lines = 0;
        for (number, (group, staged)) in std::mem::take(&mut pending.native).into_iter().enumerate() {
            let key = format!("{prefix}.native-{number:03}.jsonl");
            let bytes = staged.jsonl.len() as u64;
            self.blobs.put(&key, Bytes::from(staged.jsonl)).await?;
            let sealed_credentials = if staged.credentials.is_empty() {
                None
            } else {
                Some(
                    seal_json(self.sealer.as_ref(), batch_id, &staged.credentials)
                        .await
                        .map_err(StorageError::from)?,
                )
            };
            staged_lines += staged.lines;
            segment.staged.push(StagedBlob {
                group,
                key,
                lines: staged.lines,
                bytes,
                sealed_credentials,
            });
        }
        let mut delay_ms = 5;
        // The batch this run tried to write last, if that write lost to another.
        let mut lost_to: Option<u64> = None;
        for attempt in 0..50 {
            let Some(mut current) = Loaded::<StoredBatch>::get(self.state.as_ref(), BATCH_KIND, batch_id).await? else {
                return Ok(self.discard_segment(&segment).await);
            };
            if lost_to
                .take()
                .is_some_and(|tried| !batch_moved_since(tried, current.record.version, attempt))
            {
                // The batch does not explain the lost write: the chunk may; read it again.
                *known_chunk = None;
            }
            // The chunk as this run last wrote it saves a read; if anyone wrote it since, the
            // conditional write fails and the chunk is read afresh.
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
            if current.body.sealed || (staged_lines > 0 && current.body.native.closed) {
                // The finalizer has read the results already (or the staged lines were packed
                // into provider batches): these lines count as never run.
                return Ok(self.discard_segment(&segment).await);
            }
            let unsaved_chunk = chunk.clone();
            chunk.body.lines_done += segment.lines;
            chunk.body.segments.push(segment.clone());
            chunk.body.done = chunk_finished;
            if let Some(lease) = chunk.body.lease.as_mut() {
                lease.until_ms = LeaseUntil::until(lease_until_ms);
            }
            let counts = &mut current.body.batch.request_counts;
            counts.completed += segment.completed;
            counts.failed += segment.failed;
            current.body.batch.usage.add_usage(&segment.usage);
            current.body.native.staged += staged_lines;
            if chunk_finished {
                current.body.chunks_done += 1;
            }
            let (chunk_record, chunk_version) = chunk.next()?;
            let mut writes = vec![(chunk_record.clone(), chunk_version), current.next()?];
            // What the run published of these lines goes to zero as they are counted.
            let live_reset = run.live.reset(self.clock.now_unix_ms())?;
            writes.extend(live_reset.clone());
            match self.state.update_all(&writes).await {
                Ok(()) => {
                    run.live.was_reset(live_reset.map(|(record, _)| record));
                    count_lines(
                        self.metrics.as_ref(),
                        "workers",
                        segment.completed,
                        segment.failed,
                        staged_lines,
                    );
                    chunk.record = chunk_record;
                    *known_chunk = Some(chunk);
                    return Ok(Some(current.body));
                }
                Err(StorageError::Conflict) => {
                    // Mostly another chunk moved the batch's counters: read the batch again, and
                    // the chunk only if the batch did not move (#26 E16: chunks of a batch often
                    // save at once, and each lost write cost a read of both).
                    lost_to = Some(current.record.version);
                    *known_chunk = Some(unsaved_chunk);
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
        let staged = segment.staged.iter().map(|blob| &blob.key);
        for key in [&segment.output_key, &segment.error_key]
            .into_iter()
            .flatten()
            .chain(staged)
        {
            if let Err(err) = self.blobs.delete(key).await {
                tracing::warn!(blob = %key, error = %err, "could not delete an uncounted segment");
            }
        }
        None
    }
}
