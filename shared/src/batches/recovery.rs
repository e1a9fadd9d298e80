//! Batch recovery, a scheduled task (`batches` in the scheduler's report): every unfinished batch —
//! finalize what is ready or overdue, enqueue again what is stuck (a worker died, a message was
//! lost or went to the dead-letter queue), tidy up what ended. Every step is idempotent, so two
//! passes at once, or one that crashed half-way, are harmless.

use super::finalize::Finalizer;
use super::native::NativeParts;
use super::stored::StoredChunk;
use super::stored::{list_all, Loaded, StoredBatch, ACTIVE_KIND, ACTIVE_OWNER, BATCH_KIND, CHUNK_KIND};
use super::{enqueue, BatchSettings, BatchesError, JobMessage};
use crate::openai::batches::BatchStatus;
use crate::ports::state::earliest_created_at;
use crate::ports::{BatchId, Clock, JobQueue, StateStore, StorageError};
use crate::scheduler::{ScheduleError, ScheduledTask};
use async_trait::async_trait;
use serde::{Deserialize, Serialize};
use std::sync::Arc;

/// What one recovery pass did. `errors` counts batches it could not recover (each retried next pass).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct RecoveryReport {
    pub active_batches: u64,
    pub finalized: u64,
    pub validations_requeued: u64,
    pub chunks_requeued: u64,
    /// Provider-native batches polled.
    #[serde(default)]
    pub provider_batches_polled: u64,
    pub errors: u64,
}

/// Walks the active batches; the scheduled task of the batch engine.
#[derive(Clone)]
pub struct BatchRecovery {
    pub(super) state: Arc<dyn StateStore>,
    pub(super) queue: Arc<dyn JobQueue>,
    pub(super) clock: Arc<dyn Clock>,
    pub(super) settings: Arc<BatchSettings>,
    pub(super) finalizer: Arc<Finalizer>,
    /// Polls submitted provider batches.
    pub(super) native: Arc<NativeParts>,
}

impl BatchRecovery {
    /// One pass over every active batch (times from its clock).
    pub(crate) async fn run_pass(&self) -> Result<RecoveryReport, BatchesError> {
        let mut report = RecoveryReport::default();
        let markers = list_all(self.state.as_ref(), ACTIVE_KIND, ACTIVE_OWNER).await?;
        report.active_batches = markers.len() as u64;
        for marker in markers {
            if let Err(err) = self.recover(&marker.id, &mut report).await {
                tracing::warn!(batch = %marker.id, error = %err, "could not recover a batch");
                report.errors += 1;
            }
        }
        Ok(report)
    }
}

#[async_trait]
impl ScheduledTask for BatchRecovery {
    fn name(&self) -> &'static str {
        "batches"
    }

    async fn run(&self, _now_ms: i64) -> Result<serde_json::Value, ScheduleError> {
        let report = self.run_pass().await.map_err(|err| match err {
            BatchesError::Storage(err) => ScheduleError::Storage(err),
            other => ScheduleError::Task(other.to_string()),
        })?;
        serde_json::to_value(report).map_err(|e| ScheduleError::Task(e.to_string()))
    }

    /// An unfinished batch is work every pass (its marker's time, in the past: at once).
    async fn next_due(&self) -> Result<Option<i64>, ScheduleError> {
        Ok(earliest_created_at(self.state.as_ref(), ACTIVE_KIND, ACTIVE_OWNER).await?)
    }
}

/// Whether a chunk of a running batch may have been enqueued longer than `requeue_ms` ago. Its
/// chunks were enqueued when validation moved it to `in_progress` (or later, when enqueued
/// again), so until `requeue_after` past that none can be: the pass does not read the chunk
/// records, and a batch's passes cost a read of its record, not of every chunk, each minute
/// (#26 E16). A requeue can come at most one pass later than a scan of every pass would find it.
fn chunks_may_be_stuck(batch: &StoredBatch, now_ms: i64, requeue_ms: i64) -> bool {
    batch
        .batch
        .in_progress_at
        .is_none_or(|at_s| at_s.saturating_mul(1000).saturating_add(requeue_ms) <= now_ms)
}

impl BatchRecovery {
    async fn recover(&self, batch_id: &str, report: &mut RecoveryReport) -> Result<(), BatchesError> {
        let Some(mut batch) = Loaded::<StoredBatch>::get(self.state.as_ref(), BATCH_KIND, batch_id).await? else {
            self.state.delete(ACTIVE_KIND, batch_id, None).await?;
            return Ok(());
        };
        let now_ms = self.clock.now_unix_ms();
        let requeue_ms = i64::try_from(self.settings.requeue_after.as_millis()).unwrap_or(i64::MAX);
        match batch.body.batch.status {
            BatchStatus::Validating => {
                if batch.body.enqueued_at_ms + requeue_ms <= now_ms {
                    batch.body.enqueued_at_ms = now_ms;
                    match batch.save(self.state.as_ref()).await {
                        Ok(()) => {
                            enqueue(
                                self.queue.as_ref(),
                                &JobMessage::Validate {
                                    batch_id: BatchId::new(batch_id),
                                },
                            )
                            .await?;
                            report.validations_requeued += 1;
                        }
                        Err(StorageError::Conflict) => {}
                        Err(err) => return Err(err.into()),
                    }
                }
            }
            BatchStatus::InProgress | BatchStatus::Cancelling if batch.body.native.awaiting_provider() => {
                report.provider_batches_polled += self.native.poll_native(&batch.body).await?;
            }
            BatchStatus::InProgress => {
                let all_done = batch.body.all_chunks_done();
                if all_done || batch.body.is_overdue(self.clock.as_ref()) {
                    if self.finalizer.try_finalize(batch_id).await? {
                        report.finalized += 1;
                    }
                } else if chunks_may_be_stuck(&batch.body, now_ms, requeue_ms) {
                    report.chunks_requeued += self.requeue_stuck_chunks(batch_id, now_ms, requeue_ms).await?;
                }
            }
            BatchStatus::Finalizing | BatchStatus::Cancelling => {
                if self.finalizer.try_finalize(batch_id).await? {
                    report.finalized += 1;
                }
            }
            BatchStatus::Completed | BatchStatus::Failed | BatchStatus::Expired | BatchStatus::Cancelled => {
                self.finalizer.clean_up(&batch.body).await?;
            }
        }
        Ok(())
    }

    /// Enqueue again every unfinished chunk that no run holds and that was enqueued long ago.
    async fn requeue_stuck_chunks(&self, batch_id: &str, now_ms: i64, requeue_ms: i64) -> Result<u64, BatchesError> {
        let mut requeued = 0;
        for record in list_all(self.state.as_ref(), CHUNK_KIND, batch_id).await? {
            let mut loaded = Loaded::<StoredChunk> {
                body: super::stored::decode(&record)?,
                record,
            };
            let chunk = &loaded.body;
            if chunk.done || chunk.held_until(now_ms).is_some() || chunk.enqueued_at_ms + requeue_ms > now_ms {
                continue;
            }
            let index = chunk.index;
            loaded.body.enqueued_at_ms = now_ms;
            match loaded.save(self.state.as_ref()).await {
                // Whoever wins the write enqueues; a second poller sees the fresh time and skips.
                Ok(()) => {
                    enqueue(
                        self.queue.as_ref(),
                        &JobMessage::Chunk {
                            batch_id: BatchId::new(batch_id),
                            chunk: index,
                        },
                    )
                    .await?;
                    requeued += 1;
                }
                Err(StorageError::Conflict) => {}
                Err(err) => return Err(err.into()),
            }
        }
        Ok(requeued)
    }
}
