//! The batch jobs' runner: `validate`, `chunk` and `finalize` messages, handed over by the
//! [`crate::jobs::JobDispatcher`] (in the SQS-triggered worker Lambda, or the local server's
//! in-process worker tasks).

use super::{BatchService, JobMessage};
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
#[derive(Clone)]
pub struct BatchWorker {
    service: Arc<BatchService>,
}

impl BatchWorker {
    pub fn new(service: Arc<BatchService>) -> Self {
        Self { service }
    }
}

#[async_trait]
impl JobRunner for BatchWorker {
    async fn run(&self, job: &JobMessage, deadline: Instant) -> JobOutcome {
        let result = match job {
            JobMessage::Validate { batch_id } => self.service.run_validation(batch_id).await.map(|()| JobOutcome::Done),
            JobMessage::Chunk { batch_id, chunk } => self.service.run_chunk(batch_id, *chunk, deadline).await,
            JobMessage::Finalize { batch_id } => self.service.finalize_job(batch_id).await,
            JobMessage::Native { batch_id } => self.service.native_job(batch_id, deadline).await,
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
