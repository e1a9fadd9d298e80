//! The job queue on SQS: one queue per lane. The batch lane ([`JobQueue::send`]) is the jobs
//! queue; each [`Priority`] has a queue of its own when configured. Lambda's SQS event sources
//! deliver from all of them to the worker.
//!
//! A receipt handle is only valid on the queue that issued it, so the receipts this adapter hands
//! out name their queue: `"{queue name}|{handle}"` ([`delivered_receipt`] builds the same from an
//! SQS event record's `eventSourceARN`). A bare handle means the jobs queue.

use super::describe_sdk_error;
use crate::ports::{JobQueue, Priority, QueueMessage, StorageError};
use async_trait::async_trait;
use aws_sdk_sqs::types::{MessageSystemAttributeName, SendMessageBatchRequestEntry};
use std::time::Duration;
use tokio::time::Instant;

/// SQS's longest message delay.
const MAX_DELAY_S: u64 = 900;
/// SQS's longest visibility timeout (12 hours).
const MAX_VISIBILITY_S: u64 = 43_200;
/// How long a receive over several queues waits between rounds that found nothing.
const RECEIVE_ROUND_PAUSE: Duration = Duration::from_millis(500);

/// One SQS queue: its URL and its name (the URL's last segment, the ARN's last field).
#[derive(Debug, Clone, PartialEq, Eq)]
struct LaneQueue {
    url: String,
    name: String,
}

impl LaneQueue {
    fn new(url: String) -> Self {
        let name = url
            .trim_end_matches('/')
            .rsplit('/')
            .next()
            .unwrap_or_default()
            .to_owned();
        Self { url, name }
    }
}

/// Job queue on the SQS queue at `queue_url` (the batch lane), plus a queue per priority.
#[derive(Debug, Clone)]
pub struct SqsJobQueue {
    client: aws_sdk_sqs::Client,
    jobs: LaneQueue,
    /// Indexed by [`Priority::level`].
    priorities: [Option<LaneQueue>; 3],
}

/// The receipt to hand [`SqsJobQueue`] for a message an SQS event source delivered: the record's
/// `receiptHandle` qualified with the queue named by its `eventSourceARN`.
pub fn delivered_receipt(event_source_arn: Option<&str>, receipt_handle: &str) -> String {
    match event_source_arn
        .and_then(|arn| arn.rsplit(':').next())
        .filter(|name| !name.is_empty())
    {
        Some(queue_name) => format!("{queue_name}|{receipt_handle}"),
        None => receipt_handle.to_owned(),
    }
}

impl SqsJobQueue {
    /// The batch lane on `queue_url`; no priority queues.
    pub fn new(sdk_config: &aws_config::SdkConfig, queue_url: impl Into<String>) -> Self {
        Self {
            client: aws_sdk_sqs::Client::new(sdk_config),
            jobs: LaneQueue::new(queue_url.into()),
            priorities: [None, None, None],
        }
    }

    /// Send messages of `priority` to the queue at `queue_url`.
    pub fn with_priority_queue(mut self, priority: Priority, queue_url: impl Into<String>) -> Self {
        self.priorities[usize::from(priority.level())] = Some(LaneQueue::new(queue_url.into()));
        self
    }

    fn priority_queue(&self, priority: Priority) -> Result<&LaneQueue, StorageError> {
        self.priorities[usize::from(priority.level())].as_ref().ok_or_else(|| {
            let level = priority.level();
            StorageError::Backend(format!(
                "no SQS queue is configured for priority {level} (environment variable NIMBUS_ASYNC_QUEUE_URL_P{level})"
            ))
        })
    }

    /// The queues a receive tries, in order: P0, P1, the jobs queue, P2 (those configured).
    fn receive_order(&self) -> Vec<&LaneQueue> {
        let [p0, p1, p2] = &self.priorities;
        [p0.as_ref(), p1.as_ref(), Some(&self.jobs), p2.as_ref()]
            .into_iter()
            .flatten()
            .collect()
    }

    /// The queue a receipt belongs to, and the bare handle.
    fn resolve<'a>(&'a self, receipt: &'a str) -> (&'a LaneQueue, &'a str) {
        if let Some((name, handle)) = receipt.split_once('|') {
            let known = self.receive_order().into_iter().find(|queue| queue.name == name);
            if let Some(queue) = known {
                return (queue, handle);
            }
        }
        (&self.jobs, receipt)
    }

    async fn send_to(&self, queue: &LaneQueue, body: &str, delay: Duration) -> Result<String, StorageError> {
        let output = self
            .client
            .send_message()
            .queue_url(&queue.url)
            .message_body(body)
            .delay_seconds(seconds_i32(delay, MAX_DELAY_S))
            .send()
            .await
            .map_err(|e| StorageError::Backend(describe_sdk_error(&e)))?;
        Ok(output.message_id().unwrap_or_default().to_owned())
    }

    async fn receive_from(
        &self,
        queue: &LaneQueue,
        max: usize,
        wait: Duration,
        visibility: Duration,
    ) -> Result<Vec<QueueMessage>, StorageError> {
        let output = self
            .client
            .receive_message()
            .queue_url(&queue.url)
            .max_number_of_messages(i32::try_from(max.clamp(1, 10)).unwrap_or(10))
            .wait_time_seconds(seconds_i32(wait, 20))
            .visibility_timeout(seconds_i32(visibility, MAX_VISIBILITY_S))
            .message_system_attribute_names(MessageSystemAttributeName::ApproximateReceiveCount)
            .message_system_attribute_names(MessageSystemAttributeName::SentTimestamp)
            .send()
            .await
            .map_err(|e| StorageError::Backend(describe_sdk_error(&e)))?;
        Ok(output
            .messages()
            .iter()
            .map(|m| QueueMessage {
                message_id: m.message_id().unwrap_or_default().to_owned(),
                receipt: format!("{}|{}", queue.name, m.receipt_handle().unwrap_or_default()),
                body: m.body().unwrap_or_default().to_owned(),
                receive_count: m
                    .attributes()
                    .and_then(|a| a.get(&MessageSystemAttributeName::ApproximateReceiveCount))
                    .and_then(|v| v.parse().ok())
                    .unwrap_or(1),
                sent_at_ms: m
                    .attributes()
                    .and_then(|a| a.get(&MessageSystemAttributeName::SentTimestamp))
                    .and_then(|v| v.parse().ok()),
            })
            .collect())
    }
}

fn seconds_i32(duration: Duration, max: u64) -> i32 {
    i32::try_from(duration.as_secs().min(max)).unwrap_or(0)
}

#[async_trait]
impl JobQueue for SqsJobQueue {
    async fn send(&self, body: &str, delay: Duration) -> Result<String, StorageError> {
        self.send_to(&self.jobs, body, delay).await
    }

    async fn send_priority(&self, body: &str, priority: Priority, delay: Duration) -> Result<String, StorageError> {
        self.send_to(self.priority_queue(priority)?, body, delay).await
    }

    async fn send_all(&self, bodies: &[String]) -> Result<(), StorageError> {
        for group in bodies.chunks(10) {
            let mut entries = Vec::with_capacity(group.len());
            for (index, body) in group.iter().enumerate() {
                entries.push(
                    SendMessageBatchRequestEntry::builder()
                        .id(index.to_string())
                        .message_body(body)
                        .build()
                        .map_err(|e| StorageError::Invalid(e.to_string()))?,
                );
            }
            let output = self
                .client
                .send_message_batch()
                .queue_url(&self.jobs.url)
                .set_entries(Some(entries))
                .send()
                .await
                .map_err(|e| StorageError::Backend(describe_sdk_error(&e)))?;
            // Entries SQS refused (throttling, a transient fault) go one by one.
            for failed in output.failed() {
                let body = failed
                    .id()
                    .parse::<usize>()
                    .ok()
                    .and_then(|index| group.get(index))
                    .ok_or_else(|| StorageError::Backend(format!("SQS refused an unknown entry: {failed:?}")))?;
                self.send(body, Duration::ZERO).await?;
            }
        }
        Ok(())
    }

    /// For tests and the CLI (Lambda's event sources receive in production): the queues in the
    /// order P0, P1, jobs, P2, each asked without waiting, in rounds until something is found or
    /// `wait` is over. With the jobs queue alone, one long poll.
    async fn receive(
        &self,
        max: usize,
        wait: Duration,
        visibility: Duration,
    ) -> Result<Vec<QueueMessage>, StorageError> {
        let queues = self.receive_order();
        if let [only] = queues.as_slice() {
            return self.receive_from(only, max, wait, visibility).await;
        }
        let max = max.clamp(1, 10);
        let deadline = Instant::now() + wait;
        loop {
            let mut taken = Vec::new();
            for queue in &queues {
                if taken.len() >= max {
                    break;
                }
                taken.extend(
                    self.receive_from(queue, max - taken.len(), Duration::ZERO, visibility)
                        .await?,
                );
            }
            let now = Instant::now();
            if !taken.is_empty() || now >= deadline {
                return Ok(taken);
            }
            tokio::time::sleep(RECEIVE_ROUND_PAUSE.min(deadline - now)).await;
        }
    }

    async fn delete(&self, receipt: &str) -> Result<(), StorageError> {
        let (queue, handle) = self.resolve(receipt);
        self.client
            .delete_message()
            .queue_url(&queue.url)
            .receipt_handle(handle)
            .send()
            .await
            .map_err(|e| StorageError::Backend(describe_sdk_error(&e)))?;
        Ok(())
    }

    async fn change_visibility(&self, receipt: &str, timeout: Duration) -> Result<(), StorageError> {
        let (queue, handle) = self.resolve(receipt);
        self.client
            .change_message_visibility()
            .queue_url(&queue.url)
            .receipt_handle(handle)
            .visibility_timeout(seconds_i32(timeout, MAX_VISIBILITY_S))
            .send()
            .await
            .map_err(|e| StorageError::Backend(describe_sdk_error(&e)))?;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn queue() -> SqsJobQueue {
        let config = aws_config::SdkConfig::builder()
            .behavior_version(aws_config::BehaviorVersion::latest())
            .build();
        SqsJobQueue::new(
            &config,
            "https://sqs.us-east-1.amazonaws.com/123456789012/stack-Jobs-A1",
        )
        .with_priority_queue(
            Priority::P0,
            "https://sqs.us-east-1.amazonaws.com/123456789012/stack-AsyncQueueP0-B2",
        )
        .with_priority_queue(
            Priority::P2,
            "https://sqs.us-east-1.amazonaws.com/123456789012/stack-AsyncQueueP2-C3",
        )
    }

    #[test]
    fn a_delivered_receipt_goes_back_to_the_queue_that_delivered_it() {
        let queue = queue();
        let arn = "arn:aws:sqs:us-east-1:123456789012:stack-AsyncQueueP0-B2";
        let receipt = delivered_receipt(Some(arn), "AQEBhandle+/=");
        let (lane, handle) = queue.resolve(&receipt);
        assert_eq!((lane.name.as_str(), handle), ("stack-AsyncQueueP0-B2", "AQEBhandle+/="));

        let jobs_arn = "arn:aws:sqs:us-east-1:123456789012:stack-Jobs-A1";
        let receipt = delivered_receipt(Some(jobs_arn), "h");
        let (lane, handle) = queue.resolve(&receipt);
        assert_eq!((lane.name.as_str(), handle), ("stack-Jobs-A1", "h"));
        // A bare handle, or one naming a queue this adapter does not know, is the jobs queue's.
        for receipt in ["bare", "other-queue|h"] {
            let (lane, handle) = queue.resolve(receipt);
            assert_eq!((lane.name.as_str(), handle), ("stack-Jobs-A1", receipt));
        }
        assert_eq!(delivered_receipt(None, "h"), "h");
    }

    #[test]
    fn receives_try_p0_p1_jobs_p2_and_a_missing_priority_queue_is_named() {
        let queue = queue();
        let names: Vec<&str> = queue.receive_order().iter().map(|q| q.name.as_str()).collect();
        assert_eq!(
            names,
            ["stack-AsyncQueueP0-B2", "stack-Jobs-A1", "stack-AsyncQueueP2-C3"]
        );
        let err = queue.priority_queue(Priority::P1).unwrap_err();
        assert!(err.to_string().contains("NIMBUS_ASYNC_QUEUE_URL_P1"), "{err}");
    }
}
