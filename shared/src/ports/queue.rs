//! A job queue with at-least-once delivery (SQS, or an in-process queue).

use super::StorageError;
use async_trait::async_trait;
use std::time::Duration;

/// A received message. `receipt` identifies this delivery for delete and visibility changes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct QueueMessage {
    pub message_id: String,
    pub receipt: String,
    pub body: String,
    /// How many times the message has been delivered, this delivery included.
    pub receive_count: u32,
}

/// A queue of job messages. Messages not deleted before their visibility timeout are delivered again.
#[async_trait]
pub trait JobQueue: Send + Sync {
    /// Enqueue `body`, visible after `delay`. Returns the message id.
    async fn send(&self, body: &str, delay: Duration) -> Result<String, StorageError>;

    /// Enqueue several bodies, visible at once. Queues that take them in batches (SQS: ten per
    /// request) override this; the default sends them one by one.
    async fn send_all(&self, bodies: &[String]) -> Result<(), StorageError> {
        for body in bodies {
            self.send(body, Duration::ZERO).await?;
        }
        Ok(())
    }

    /// Up to `max` messages, waiting at most `wait` for the first; each stays hidden for `visibility`.
    async fn receive(
        &self,
        max: usize,
        wait: Duration,
        visibility: Duration,
    ) -> Result<Vec<QueueMessage>, StorageError>;

    /// Acknowledge a delivery: the message is gone.
    async fn delete(&self, receipt: &str) -> Result<(), StorageError>;

    /// Hide a delivered message for `timeout` from now (zero makes it visible at once).
    async fn change_visibility(&self, receipt: &str, timeout: Duration) -> Result<(), StorageError>;
}
