//! An in-process queue with SQS semantics: delays, visibility timeouts and redelivery.

use crate::ports::{JobQueue, QueueMessage, StorageError};
use async_trait::async_trait;
use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::sync::Notify;
use tokio::time::Instant;

#[derive(Debug, Clone)]
struct StoredMessage {
    id: String,
    body: String,
    visible_at: Instant,
    receive_count: u32,
    /// The receipt of the latest delivery; older receipts no longer delete it.
    receipt: Option<String>,
}

#[derive(Debug, Default)]
struct Inner {
    /// Messages in send order.
    messages: Vec<StoredMessage>,
    by_receipt: HashMap<String, String>,
}

/// In-process job queue. Messages live in memory; the state they point at is durable elsewhere, and
/// the poller re-enqueues unfinished work after a restart.
#[derive(Debug, Clone, Default)]
pub struct MemoryQueue {
    inner: Arc<Mutex<Inner>>,
    notify: Arc<Notify>,
}

impl MemoryQueue {
    pub fn new() -> Self {
        Self::default()
    }

    fn lock(&self) -> Result<std::sync::MutexGuard<'_, Inner>, StorageError> {
        self.inner
            .lock()
            .map_err(|_| StorageError::Backend("queue lock poisoned".into()))
    }

    /// Messages in the queue, visible or not.
    pub fn len(&self) -> usize {
        self.inner.lock().map(|inner| inner.messages.len()).unwrap_or(0)
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    fn take_visible(
        &self,
        max: usize,
        visibility: Duration,
    ) -> Result<(Vec<QueueMessage>, Option<Instant>), StorageError> {
        let now = Instant::now();
        let mut inner = self.lock()?;
        let mut taken = Vec::new();
        let mut next_visible: Option<Instant> = None;
        let mut receipts = Vec::new();
        for message in inner.messages.iter_mut() {
            if taken.len() >= max {
                break;
            }
            if message.visible_at > now {
                next_visible = Some(next_visible.map_or(message.visible_at, |t| t.min(message.visible_at)));
                continue;
            }
            let receipt = uuid::Uuid::now_v7().simple().to_string();
            message.receive_count += 1;
            message.visible_at = now + visibility;
            message.receipt = Some(receipt.clone());
            receipts.push((receipt.clone(), message.id.clone()));
            taken.push(QueueMessage {
                message_id: message.id.clone(),
                receipt,
                body: message.body.clone(),
                receive_count: message.receive_count,
            });
        }
        for (receipt, id) in receipts {
            inner.by_receipt.insert(receipt, id);
        }
        Ok((taken, next_visible))
    }

    fn find_by_receipt<'a>(inner: &'a mut Inner, receipt: &str) -> Option<&'a mut StoredMessage> {
        let id = inner.by_receipt.get(receipt)?.clone();
        inner
            .messages
            .iter_mut()
            .find(|m| m.id == id && m.receipt.as_deref() == Some(receipt))
    }
}

#[async_trait]
impl JobQueue for MemoryQueue {
    async fn send(&self, body: &str, delay: Duration) -> Result<String, StorageError> {
        let id = uuid::Uuid::now_v7().to_string();
        self.lock()?.messages.push(StoredMessage {
            id: id.clone(),
            body: body.to_owned(),
            visible_at: Instant::now() + delay,
            receive_count: 0,
            receipt: None,
        });
        self.notify.notify_waiters();
        Ok(id)
    }

    async fn receive(
        &self,
        max: usize,
        wait: Duration,
        visibility: Duration,
    ) -> Result<Vec<QueueMessage>, StorageError> {
        let deadline = Instant::now() + wait;
        loop {
            let notified = self.notify.notified();
            let (taken, next_visible) = self.take_visible(max.max(1), visibility)?;
            if !taken.is_empty() || Instant::now() >= deadline {
                return Ok(taken);
            }
            let wake_at = next_visible.map_or(deadline, |t| t.min(deadline));
            tokio::select! {
                _ = notified => {}
                _ = tokio::time::sleep_until(wake_at) => {}
            }
        }
    }

    async fn delete(&self, receipt: &str) -> Result<(), StorageError> {
        let mut inner = self.lock()?;
        if let Some(id) = inner.by_receipt.remove(receipt) {
            inner
                .messages
                .retain(|m| !(m.id == id && m.receipt.as_deref() == Some(receipt)));
        }
        Ok(())
    }

    async fn change_visibility(&self, receipt: &str, timeout: Duration) -> Result<(), StorageError> {
        let mut inner = self.lock()?;
        match Self::find_by_receipt(&mut inner, receipt) {
            Some(message) => {
                message.visible_at = Instant::now() + timeout;
                drop(inner);
                self.notify.notify_waiters();
                Ok(())
            }
            None => Err(StorageError::NotFound),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const NO_WAIT: Duration = Duration::ZERO;

    #[tokio::test(start_paused = true)]
    async fn unacknowledged_messages_come_back_after_visibility_timeout() {
        let queue = MemoryQueue::new();
        queue.send("job-1", NO_WAIT).await.unwrap();
        let first = queue.receive(10, NO_WAIT, Duration::from_secs(30)).await.unwrap();
        assert_eq!(first.len(), 1);
        assert_eq!(first[0].receive_count, 1);
        assert!(queue
            .receive(10, NO_WAIT, Duration::from_secs(30))
            .await
            .unwrap()
            .is_empty());
        tokio::time::advance(Duration::from_secs(31)).await;
        let again = queue.receive(10, NO_WAIT, Duration::from_secs(30)).await.unwrap();
        assert_eq!(again[0].body, "job-1");
        assert_eq!(again[0].receive_count, 2);
        // The stale receipt no longer deletes the message; the fresh one does.
        queue.delete(&first[0].receipt).await.unwrap();
        assert_eq!(queue.len(), 1);
        queue.delete(&again[0].receipt).await.unwrap();
        assert!(queue.is_empty());
    }

    #[tokio::test(start_paused = true)]
    async fn delayed_messages_wait_and_receive_wakes_on_send() {
        let queue = MemoryQueue::new();
        queue.send("later", Duration::from_secs(5)).await.unwrap();
        assert!(queue
            .receive(1, NO_WAIT, Duration::from_secs(1))
            .await
            .unwrap()
            .is_empty());
        let got = queue
            .receive(1, Duration::from_secs(20), Duration::from_secs(1))
            .await
            .unwrap();
        assert_eq!(got[0].body, "later");

        let waiter = {
            let queue = queue.clone();
            tokio::spawn(async move { queue.receive(1, Duration::from_secs(60), Duration::from_secs(1)).await })
        };
        tokio::task::yield_now().await;
        queue.send("now", NO_WAIT).await.unwrap();
        let got = waiter.await.unwrap().unwrap();
        assert_eq!(got[0].body, "now");
    }

    #[tokio::test(start_paused = true)]
    async fn change_visibility_makes_a_message_visible_again() {
        let queue = MemoryQueue::new();
        queue.send("m", NO_WAIT).await.unwrap();
        let got = queue.receive(1, NO_WAIT, Duration::from_secs(300)).await.unwrap();
        queue.change_visibility(&got[0].receipt, Duration::ZERO).await.unwrap();
        assert_eq!(
            queue.receive(1, NO_WAIT, Duration::from_secs(1)).await.unwrap().len(),
            1
        );
        assert_eq!(
            queue.change_visibility("unknown", Duration::ZERO).await,
            Err(StorageError::NotFound)
        );
    }
}
