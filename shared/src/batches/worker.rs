//! The queue worker: one job message at a time (the SQS-triggered Lambda, or the local server's
//! in-process worker tasks).

use super::{BatchService, JobMessage};
use crate::ports::{JobHandler, JobOutcome};
use async_trait::async_trait;
use std::sync::Arc;
use std::time::{Duration, SystemTime};
use tokio::time::Instant;

/// Runs `validate` and `chunk` jobs.
#[derive(Clone)]
pub struct BatchWorker {
    service: Arc<BatchService>,
}

impl BatchWorker {
    pub fn new(service: Arc<BatchService>) -> Self {
        Self { service }
    }

    /// Handle one message body; work stops in time for `deadline`.
    pub async fn handle_until(&self, body: &str, deadline: Instant) -> JobOutcome {
        let job: JobMessage = match serde_json::from_str(body) {
            Ok(job) => job,
            Err(err) => {
                // Redelivering a message nobody can read would only fill the dead-letter queue.
                tracing::error!(error = %err, body, "dropping an unreadable job message");
                return JobOutcome::Done;
            }
        };
        let result = match &job {
            JobMessage::Validate { batch_id } => self.service.run_validation(batch_id).await.map(|()| JobOutcome::Done),
            JobMessage::Chunk { batch_id, chunk } => self.service.run_chunk(batch_id, *chunk, deadline).await,
            JobMessage::Finalize { batch_id } => self.service.finalize_job(batch_id).await,
        };
        match result {
            Ok(result) => result,
            Err(err) => {
                tracing::warn!(?job, error = %err, "job failed; it will be retried");
                JobOutcome::Retry {
                    retry_after: Duration::from_secs(5),
                }
            }
        }
    }

    /// Handle one SQS delivery before the Lambda `deadline`. Returns whether the message is done;
    /// otherwise its visibility is already set for the retry and it must be reported as a batch
    /// item failure.
    pub async fn handle_delivery(&self, body: &str, receipt: &str, deadline: SystemTime) -> bool {
        let left = deadline.duration_since(SystemTime::now()).unwrap_or(Duration::ZERO);
        match self.handle_until(body, Instant::now() + left).await {
            JobOutcome::Done => true,
            JobOutcome::Retry { retry_after: wait } => {
                if let Err(err) = self.service.queue.change_visibility(receipt, wait).await {
                    tracing::warn!(error = %err, "could not set the retry delay; the visibility timeout applies");
                }
                false
            }
        }
    }
}

#[async_trait]
impl JobHandler for BatchWorker {
    async fn handle(&self, body: &str) -> JobOutcome {
        self.handle_until(body, Instant::now() + self.service.settings.max_run)
            .await
    }
}
