//! Jobs on the queue: what a message says ([`JobMessage`]), which family of work it belongs to
//! ([`JobFamily`]), and the [`JobDispatcher`] a queue consumer (the SQS-triggered worker Lambda,
//! the local server's worker tasks) hands each message to; it runs the message on the
//! [`JobRunner`] registered for its family (`app::job_dispatcher` registers them).

mod dispatcher;

pub use dispatcher::JobDispatcher;

use crate::ports::{AsyncRequestId, BatchId, DeliveryId, JobOutcome};
use async_trait::async_trait;
use serde::{Deserialize, Serialize};
use tokio::time::Instant;

/// A job on the queue. The wire format is `{"job": "<kind>", …fields}`; each id is the plain
/// string on the wire.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "job", rename_all = "snake_case")]
pub enum JobMessage {
    /// Validate a batch's input file and plan its chunks.
    Validate { batch_id: BatchId },
    /// Run one chunk of a batch.
    Chunk { batch_id: BatchId, chunk: u32 },
    /// Finish a batch that is ready (e.g. just cancelled).
    Finalize { batch_id: BatchId },
    /// Move a batch's provider-native parts on (upload, create, cancel, collect).
    Native { batch_id: BatchId },
    /// Run an async inference request.
    AsyncRun { request_id: AsyncRequestId },
    /// Deliver an async request's result to its webhook.
    AsyncDeliver { request_id: AsyncRequestId, attempt: u32 },
    /// One attempt of a standalone webhook delivery.
    WebhookDeliver { delivery_id: DeliveryId, attempt: u32 },
}

/// The families of work, each run by its own [`JobRunner`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum JobFamily {
    Batch,
    AsyncRequest,
    Webhook,
}

impl JobMessage {
    /// The job's kind, as its wire format names it.
    pub fn kind(&self) -> &'static str {
        match self {
            JobMessage::Validate { .. } => "validate",
            JobMessage::Chunk { .. } => "chunk",
            JobMessage::Finalize { .. } => "finalize",
            JobMessage::Native { .. } => "native",
            JobMessage::AsyncRun { .. } => "async_run",
            JobMessage::AsyncDeliver { .. } => "async_deliver",
            JobMessage::WebhookDeliver { .. } => "webhook_deliver",
        }
    }

    /// The id of what the job works on (a batch, an async request, a webhook delivery): the
    /// `resource_id` of its tracing span, so one batch's or request's log lines can be filtered.
    pub fn resource_id(&self) -> &str {
        match self {
            JobMessage::Validate { batch_id }
            | JobMessage::Chunk { batch_id, .. }
            | JobMessage::Finalize { batch_id }
            | JobMessage::Native { batch_id } => batch_id.as_str(),
            JobMessage::AsyncRun { request_id } | JobMessage::AsyncDeliver { request_id, .. } => request_id.as_str(),
            JobMessage::WebhookDeliver { delivery_id, .. } => delivery_id.as_str(),
        }
    }

    pub fn family(&self) -> JobFamily {
        match self {
            JobMessage::Validate { .. }
            | JobMessage::Chunk { .. }
            | JobMessage::Finalize { .. }
            | JobMessage::Native { .. } => JobFamily::Batch,
            JobMessage::AsyncRun { .. } | JobMessage::AsyncDeliver { .. } => JobFamily::AsyncRequest,
            JobMessage::WebhookDeliver { .. } => JobFamily::Webhook,
        }
    }

    /// The message body as it goes on the queue.
    pub fn to_body(&self) -> String {
        // A tagged enum of strings and integers always serializes.
        serde_json::to_string(self).unwrap_or_default()
    }
}

/// Runs the jobs of one family.
#[async_trait]
pub trait JobRunner: Send + Sync {
    /// Run `job`, stopping in time for `deadline`.
    async fn run(&self, job: &JobMessage, deadline: Instant) -> JobOutcome;
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn messages_keep_their_wire_format() {
        let cases = [
            (
                JobMessage::Validate {
                    batch_id: BatchId::new("batch_1"),
                },
                json!({"job": "validate", "batch_id": "batch_1"}),
                JobFamily::Batch,
            ),
            (
                JobMessage::Chunk {
                    batch_id: BatchId::new("batch_1"),
                    chunk: 3,
                },
                json!({"job": "chunk", "batch_id": "batch_1", "chunk": 3}),
                JobFamily::Batch,
            ),
            (
                JobMessage::Finalize {
                    batch_id: BatchId::new("batch_1"),
                },
                json!({"job": "finalize", "batch_id": "batch_1"}),
                JobFamily::Batch,
            ),
            (
                JobMessage::AsyncRun {
                    request_id: AsyncRequestId::new("r1"),
                },
                json!({"job": "async_run", "request_id": "r1"}),
                JobFamily::AsyncRequest,
            ),
            (
                JobMessage::AsyncDeliver {
                    request_id: AsyncRequestId::new("r1"),
                    attempt: 2,
                },
                json!({"job": "async_deliver", "request_id": "r1", "attempt": 2}),
                JobFamily::AsyncRequest,
            ),
            (
                JobMessage::WebhookDeliver {
                    delivery_id: DeliveryId::new("d1"),
                    attempt: 0,
                },
                json!({"job": "webhook_deliver", "delivery_id": "d1", "attempt": 0}),
                JobFamily::Webhook,
            ),
        ];
        for (job, wire, family) in cases {
            let body = job.to_body();
            assert_eq!(serde_json::from_str::<serde_json::Value>(&body).unwrap(), wire);
            assert_eq!(serde_json::from_str::<JobMessage>(&body).unwrap(), job);
            assert_eq!(job.family(), family);
        }
    }
}
