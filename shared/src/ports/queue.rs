//! A job queue with at-least-once delivery (SQS, or an in-process queue).

use super::StorageError;
use async_trait::async_trait;
use serde::{Deserialize, Serialize};
use std::time::Duration;

/// Baseten's async priority: 0 is served first.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(try_from = "u8", into = "u8")]
pub enum Priority {
    P0,
    P1,
    P2,
}

impl Priority {
    /// Every priority, the most urgent first.
    pub const ALL: [Priority; 3] = [Priority::P0, Priority::P1, Priority::P2];

    /// The number clients send: 0, 1 or 2.
    pub fn level(self) -> u8 {
        match self {
            Priority::P0 => 0,
            Priority::P1 => 1,
            Priority::P2 => 2,
        }
    }

    pub(crate) fn from_level(level: u8) -> Option<Self> {
        Self::ALL.into_iter().find(|priority| priority.level() == level)
    }
}

/// A priority level other than 0, 1 or 2.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("priority must be 0, 1 or 2, not {0}")]
pub struct UnknownPriority(pub u8);

impl TryFrom<u8> for Priority {
    type Error = UnknownPriority;

    fn try_from(level: u8) -> Result<Self, Self::Error> {
        Self::from_level(level).ok_or(UnknownPriority(level))
    }
}

impl From<Priority> for u8 {
    fn from(priority: Priority) -> Self {
        priority.level()
    }
}

/// A received message. `receipt` identifies this delivery for delete and visibility changes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct QueueMessage {
    pub message_id: String,
    pub receipt: String,
    pub body: String,
    /// How many times the message has been delivered, this delivery included.
    pub receive_count: u32,
    /// When it was sent (unix ms), when the queue says.
    pub sent_at_ms: Option<i64>,
}

/// A queue of job messages. Messages not deleted before their visibility timeout are delivered again.
///
/// It has four lanes: the batch lane ([`JobQueue::send`]) and one per [`Priority`]
/// ([`JobQueue::send_priority`]). How strictly the lanes are ordered is the adapter's: the
/// in-process queue always delivers P0 first, then P1 and the batch lane in send order, then P2;
/// on SQS each lane is its own queue and Lambda's event sources share the workers among them.
#[async_trait]
pub trait JobQueue: Send + Sync {
    /// Enqueue `body` on the batch lane, visible after `delay`. Returns the message id.
    async fn send(&self, body: &str, delay: Duration) -> Result<String, StorageError>;

    /// Enqueue `body` on the lane of `priority`, visible after `delay` (SQS: at most 15 minutes).
    /// Returns the message id.
    async fn send_priority(&self, body: &str, priority: Priority, delay: Duration) -> Result<String, StorageError>;

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

/// The queue of a host that sends and receives no jobs (a Lambda function whose role reaches no
/// queue): every call fails naming that.
#[cfg(feature = "aws")]
pub(crate) struct NoJobQueue;

#[cfg(feature = "aws")]
fn no_queue() -> StorageError {
    StorageError::Backend("this host has no job queue (its role reaches none)".into())
}

#[async_trait]
#[cfg(feature = "aws")]
impl JobQueue for NoJobQueue {
    async fn send(&self, _body: &str, _delay: Duration) -> Result<String, StorageError> {
        Err(no_queue())
    }

    async fn send_priority(&self, _body: &str, _priority: Priority, _delay: Duration) -> Result<String, StorageError> {
        Err(no_queue())
    }

    async fn receive(
        &self,
        _max: usize,
        _wait: Duration,
        _visibility: Duration,
    ) -> Result<Vec<QueueMessage>, StorageError> {
        Err(no_queue())
    }

    async fn delete(&self, _receipt: &str) -> Result<(), StorageError> {
        Err(no_queue())
    }

    async fn change_visibility(&self, _receipt: &str, _timeout: Duration) -> Result<(), StorageError> {
        Err(no_queue())
    }
}

#[cfg(test)]
mod tests {
    use super::Priority;

    #[test]
    fn priorities_are_the_levels_zero_to_two_in_json() {
        for priority in Priority::ALL {
            let json = serde_json::to_string(&priority).unwrap();
            assert_eq!(json, priority.level().to_string());
            assert_eq!(serde_json::from_str::<Priority>(&json).unwrap(), priority);
        }
        assert_eq!(Priority::from_level(3), None);
        let err = serde_json::from_str::<Priority>("3").unwrap_err();
        assert!(err.to_string().contains("priority must be 0, 1 or 2"), "{err}");
        assert!(Priority::P0 < Priority::P1 && Priority::P1 < Priority::P2);
    }
}
