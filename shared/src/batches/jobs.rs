//! The batch jobs' runner: `validate`, `chunk` and `finalize` messages, handed over by the
//! [`crate::jobs::JobDispatcher`] (in the SQS-triggered worker Lambda, or the local server's
//! in-process worker tasks).

use super::chunk_run::ChunkRunner;
use super::finalize::Finalizer;
use super::native::NativeParts;
use super::validate_job::Planner;
use super::JobMessage;
use crate::jobs::JobRunner;
use crate::ports::JobOutcome;
use async_trait::async_trait;
use std::sync::Arc;
use std::time::Duration;
use tokio::time::Instant;

/// How long a batch job that failed (storage, a provider outage) waits before its retry.
const FAILED_JOB_RETRY: Duration = Duration::from_secs(5);
/// How long a job of another family, handed here by mistake, waits (a wiring error).
const FOREIGN_JOB_RETRY: Duration = Duration::from_secs(60);

/// Runs `validate`, `chunk` and `finalize` jobs: the [`JobRunner`] of [`crate::jobs::JobFamily::Batch`].
/// Each job goes to the role that runs it (see `engine.rs`).
pub struct BatchJobs {
    pub(super) planner: Planner,
    pub(super) chunks: ChunkRunner,
    pub(super) finalizer: Arc<Finalizer>,
    pub(super) native: Arc<NativeParts>,
}

#[async_trait]
impl JobRunner for BatchJobs {
    async fn run(&self, job: &JobMessage, deadline: Instant) -> JobOutcome {
        let result = match job {
            JobMessage::Validate { batch_id } => self
                .planner
                .run_validation(batch_id.as_str())
                .await
                .map(|()| JobOutcome::Done),
            JobMessage::Chunk { batch_id, chunk } => self.chunks.run_chunk(batch_id.as_str(), *chunk, deadline).await,
            JobMessage::Finalize { batch_id } => self.finalizer.finalize_job(batch_id.as_str()).await,
            JobMessage::Native { batch_id } => self.native.native_job(batch_id.as_str(), deadline).await,
            JobMessage::AsyncRun { .. } | JobMessage::AsyncDeliver { .. } | JobMessage::WebhookDeliver { .. } => {
                tracing::error!(
                    ?job,
                    "the batch runner was handed another family's job (a wiring error)"
                );
                return JobOutcome::Retry {
                    retry_after: FOREIGN_JOB_RETRY,
                };
            }
        };
        match result {
            Ok(result) => result,
            Err(err) => {
                tracing::warn!(?job, error = %err, "job failed; it will be retried");
                JobOutcome::Retry {
                    retry_after: FAILED_JOB_RETRY,
                }
            }
        }
    }
}
