//! The job queue on SQS.

use super::describe_sdk_error;
use crate::ports::{JobQueue, QueueMessage, StorageError};
use async_trait::async_trait;
use aws_sdk_sqs::types::{MessageSystemAttributeName, SendMessageBatchRequestEntry};
use std::time::Duration;

/// Job queue on the SQS queue at `queue_url`.
#[derive(Debug, Clone)]
pub struct SqsJobQueue {
    client: aws_sdk_sqs::Client,
    queue_url: String,
}

impl SqsJobQueue {
    pub fn new(sdk_config: &aws_config::SdkConfig, queue_url: impl Into<String>) -> Self {
        Self {
            client: aws_sdk_sqs::Client::new(sdk_config),
            queue_url: queue_url.into(),
        }
    }
}

fn seconds_i32(duration: Duration, max: u64) -> i32 {
    i32::try_from(duration.as_secs().min(max)).unwrap_or(0)
}

#[async_trait]
impl JobQueue for SqsJobQueue {
    async fn send(&self, body: &str, delay: Duration) -> Result<String, StorageError> {
        let output = self
            .client
            .send_message()
            .queue_url(&self.queue_url)
            .message_body(body)
            .delay_seconds(seconds_i32(delay, 900))
            .send()
            .await
            .map_err(|e| StorageError::Backend(describe_sdk_error(&e)))?;
        Ok(output.message_id().unwrap_or_default().to_owned())
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
                .queue_url(&self.queue_url)
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

    async fn receive(
        &self,
        max: usize,
        wait: Duration,
        visibility: Duration,
    ) -> Result<Vec<QueueMessage>, StorageError> {
        let output = self
            .client
            .receive_message()
            .queue_url(&self.queue_url)
            .max_number_of_messages(i32::try_from(max.clamp(1, 10)).unwrap_or(10))
            .wait_time_seconds(seconds_i32(wait, 20))
            .visibility_timeout(seconds_i32(visibility, 43_200))
            .message_system_attribute_names(MessageSystemAttributeName::ApproximateReceiveCount)
            .send()
            .await
            .map_err(|e| StorageError::Backend(describe_sdk_error(&e)))?;
        Ok(output
            .messages()
            .iter()
            .map(|m| QueueMessage {
                message_id: m.message_id().unwrap_or_default().to_owned(),
                receipt: m.receipt_handle().unwrap_or_default().to_owned(),
                body: m.body().unwrap_or_default().to_owned(),
                receive_count: m
                    .attributes()
                    .and_then(|a| a.get(&MessageSystemAttributeName::ApproximateReceiveCount))
                    .and_then(|v| v.parse().ok())
                    .unwrap_or(1),
            })
            .collect())
    }

    async fn delete(&self, receipt: &str) -> Result<(), StorageError> {
        self.client
            .delete_message()
            .queue_url(&self.queue_url)
            .receipt_handle(receipt)
            .send()
            .await
            .map_err(|e| StorageError::Backend(describe_sdk_error(&e)))?;
        Ok(())
    }

    async fn change_visibility(&self, receipt: &str, timeout: Duration) -> Result<(), StorageError> {
        self.client
            .change_message_visibility()
            .queue_url(&self.queue_url)
            .receipt_handle(receipt)
            .visibility_timeout(seconds_i32(timeout, 43_200))
            .send()
            .await
            .map_err(|e| StorageError::Backend(describe_sdk_error(&e)))?;
        Ok(())
    }
}
