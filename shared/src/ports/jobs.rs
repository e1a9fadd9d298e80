//! Handling job messages: what a queue consumer (the SQS-triggered worker Lambda, the local
//! server's worker tasks) hands each message body to, and what it does with the message after.

use async_trait::async_trait;
use std::time::Duration;

/// What became of one job message.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum JobOutcome {
    /// Done: acknowledge (delete) the message.
    Done,
    /// Not done: leave it to be delivered again after `retry_after`.
    Retry { retry_after: Duration },
}

/// Handles one job message body.
#[async_trait]
pub trait JobHandler: Send + Sync {
    async fn handle(&self, body: &str) -> JobOutcome;

    /// A message was received, about to be handled (how long it waited is measured here).
    fn picked_up(&self, _message: &super::QueueMessage) {}
}

/// Held by a process that is the only worker of its storage (the local server's data-directory
/// lock), so that every lease found in the storage belongs to a process that is gone.
pub trait SoleWorkerGuard: Send + Sync {}
