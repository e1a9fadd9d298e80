//! Taking over at start-up, for the local server only. It is the only worker of its data
//! directory (it holds the directory's lock), so every lease found at start-up belongs to a
//! process that is gone: chunk leases, finalize leases, provider-native part leases and model
//! slots are broken at once and
//! every unfinished job is enqueued again (the in-process queue died with that process), instead
//! of waiting minutes for leases to expire and for the poller's requeue delay. Saved progress
//! stays, so nothing is lost or run twice. Lambda never does this: there many workers share the
//! storage and a lease may belong to a live one.

use super::native::stored::{StoredPart, PART_KIND};
use super::stored::{
    decode, edit, list_all, Edit, LeaseUntil, StoredBatch, StoredChunk, ACTIVE_KIND, ACTIVE_OWNER, BATCH_KIND,
    CHUNK_KIND,
};
use super::{BatchRecovery, BatchesError, JobMessage};
use crate::openai::batches::BatchStatus;
use crate::ports::{BatchId, SoleWorkerGuard};
use serde::Serialize;

/// What a takeover found and did.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct TakeoverReport {
    /// Unfinished batches taken over.
    pub batches: u64,
    pub chunk_leases_broken: u64,
    pub finalize_leases_broken: u64,
    /// Provider-native parts a dead process was working on.
    pub part_leases_broken: u64,
    pub slot_leases_broken: u64,
    pub jobs_enqueued: u64,
}

impl BatchRecovery {
    /// Take over every unfinished batch of the storage. `_guard` proves this process is its only
    /// worker; run it before this process starts any job.
    pub async fn take_over(&self, _guard: &dyn SoleWorkerGuard) -> Result<TakeoverReport, BatchesError> {
        let mut report = TakeoverReport {
            slot_leases_broken: crate::model_slots::clear_all(self.state.as_ref()).await?,
            ..TakeoverReport::default()
        };
        for marker in list_all(self.state.as_ref(), ACTIVE_KIND, ACTIVE_OWNER).await? {
            self.take_over_batch(&marker.id, &mut report).await?;
        }
        Ok(report)
    }

    async fn take_over_batch(&self, batch_id: &str, report: &mut TakeoverReport) -> Result<(), BatchesError> {
        let now_ms = self.clock.now_unix_ms();
        let mut broke_finalize_lease = false;
        let edited = edit(self.state.as_ref(), BATCH_KIND, batch_id, |batch: &mut StoredBatch| {
            if batch.batch.status.is_terminal() {
                // Finished: the poller tidies it up.
                return Edit::Keep(None);
            }
            broke_finalize_lease = batch.finalize_lease_until_ms.held_at(now_ms);
            batch.finalize_lease_until_ms = LeaseUntil::NONE;
            batch.enqueued_at_ms = now_ms;
            Edit::Save(Some(batch.batch.status))
        })
        .await?;
        let Some((Some(status), batch)) = edited else {
            return Ok(());
        };
        report.batches += 1;
        report.finalize_leases_broken += u64::from(broke_finalize_lease);
        let batch = batch.body;

        let mut jobs = Vec::new();
        for record in list_all(self.state.as_ref(), CHUNK_KIND, batch_id).await? {
            let chunk: StoredChunk = decode(&record)?;
            if chunk.done {
                continue;
            }
            let mut broke_lease = false;
            edit(
                self.state.as_ref(),
                CHUNK_KIND,
                &record.id,
                |chunk: &mut StoredChunk| {
                    broke_lease = chunk.held_until(now_ms).is_some();
                    chunk.lease = None;
                    chunk.enqueued_at_ms = now_ms;
                    Edit::Save(())
                },
            )
            .await?;
            report.chunk_leases_broken += u64::from(broke_lease);
            if status == BatchStatus::InProgress && chunk.index < batch.chunks {
                jobs.push(JobMessage::Chunk {
                    batch_id: BatchId::new(batch_id),
                    chunk: chunk.index,
                });
            }
        }
        let awaiting_provider = batch.native.awaiting_provider();
        if awaiting_provider {
            report.part_leases_broken += self.break_part_leases(batch_id, now_ms).await?;
            jobs.push(JobMessage::Native {
                batch_id: BatchId::new(batch_id),
            });
        }
        let finalize = JobMessage::Finalize {
            batch_id: BatchId::new(batch_id),
        };
        match status {
            BatchStatus::Validating => jobs.push(JobMessage::Validate {
                batch_id: BatchId::new(batch_id),
            }),
            BatchStatus::InProgress if awaiting_provider => {}
            BatchStatus::InProgress if batch.all_chunks_done() || batch.is_overdue(self.clock.as_ref()) => {
                jobs.push(finalize)
            }
            BatchStatus::Cancelling | BatchStatus::Finalizing => jobs.push(finalize),
            _ => {}
        }
        let bodies: Vec<String> = jobs.iter().map(JobMessage::to_body).collect();
        self.queue.send_all(&bodies).await?;
        report.jobs_enqueued += bodies.len() as u64;
        tracing::info!(batch = %batch_id, status = status.as_str(), jobs = bodies.len(), "took over an unfinished batch");
        Ok(())
    }

    /// Let go of every part lease of a batch (their holder is gone); how many were held.
    async fn break_part_leases(&self, batch_id: &str, now_ms: i64) -> Result<u64, BatchesError> {
        let mut broken = 0;
        for part in super::native::parts_of(self.state.as_ref(), batch_id).await? {
            if !part.body.lease_until_ms.held_at(now_ms) {
                continue;
            }
            edit(self.state.as_ref(), PART_KIND, &part.record.id, |p: &mut StoredPart| {
                p.lease_until_ms = LeaseUntil::NONE;
                Edit::Save(())
            })
            .await?;
            broken += 1;
        }
        Ok(broken)
    }
}
