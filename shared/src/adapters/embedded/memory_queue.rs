//! An in-process queue with SQS semantics: delays, visibility timeouts and redelivery; and strict
//! priority between its lanes: a receive takes the visible messages of P0 first, then those of P1
//! and the batch lane (in send order), then those of P2.

use crate::ports::{JobQueue, Priority, QueueMessage, StorageError};
use async_trait::async_trait;
use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::sync::Notify;
use tokio::time::Instant;

/// The order lanes are served in: lower first.
type Rank = u8;

const BATCH_LANE_RANK: Rank = 1;

fn rank_of(priority: Priority) -> Rank {
    match priority {
        Priority::P0 => 0,
        // The batch lane shares P1's rank.
        Priority::P1 => BATCH_LANE_RANK,
        Priority::P2 => 2,
    }
}

#[derive(Debug, Clone)]
struct StoredMessage {
    id: String,
    rank: Rank,
    body: String,
    visible_at: Instant,
    receive_count: u32,
    /// When it was sent (unix ms).
    sent_at_ms: i64,
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
        // Best lane first; within a rank, send order (the sort is stable).
        let mut order: Vec<usize> = (0..inner.messages.len()).collect();
        order.sort_by_key(|&index| inner.messages[index].rank);
        for index in order {
            if taken.len() >= max {
                break;
            }
            let message = &mut inner.messages[index];
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
                sent_at_ms: Some(message.sent_at_ms),
            });
        }
        for (receipt, id) in receipts {
            inner.by_receipt.insert(receipt, id);
        }
        Ok((taken, next_visible))
    }

    fn push(&self, body: &str, rank: Rank, delay: Duration) -> Result<String, StorageError> {
        let id = uuid::Uuid::now_v7().to_string();
        self.lock()?.messages.push(StoredMessage {
            id: id.clone(),
            rank,
            body: body.to_owned(),
            visible_at: Instant::now() + delay,
            receive_count: 0,
            sent_at_ms: crate::ports::Clock::now_unix_ms(&crate::ports::SystemClock),
            receipt: None,
        });
        self.notify.notify_waiters();
        Ok(id)
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
        self.push(body, BATCH_LANE_RANK, delay)
    }

    async fn send_priority(&self, body: &str, priority: Priority, delay: Duration) -> Result<String, StorageError> {
        self.push(body, rank_of(priority), delay)
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

    async fn bodies(queue: &MemoryQueue, max: usize) -> Vec<String> {
        queue
            .receive(max, NO_WAIT, Duration::from_secs(300))
            .await
            .unwrap()
            .into_iter()
            .map(|m| m.body)
            .collect()
    }

    #[tokio::test(start_paused = true)]
    async fn receive_serves_p0_then_p1_then_p2_whatever_the_send_order() {
        let queue = MemoryQueue::new();
        queue.send_priority("p2-a", Priority::P2, NO_WAIT).await.unwrap();
        queue.send_priority("p1-a", Priority::P1, NO_WAIT).await.unwrap();
        queue.send_priority("p0-a", Priority::P0, NO_WAIT).await.unwrap();
        queue.send_priority("p2-b", Priority::P2, NO_WAIT).await.unwrap();
        queue.send_priority("p0-b", Priority::P0, NO_WAIT).await.unwrap();
        queue.send_priority("p1-b", Priority::P1, NO_WAIT).await.unwrap();
        // One at a time, as the worker tasks receive.
        let mut order = Vec::new();
        for _ in 0..6 {
            order.extend(bodies(&queue, 1).await);
        }
        assert_eq!(order, ["p0-a", "p0-b", "p1-a", "p1-b", "p2-a", "p2-b"]);
        // Several at once: the same order.
        for (body, priority) in [("p2", Priority::P2), ("p1", Priority::P1), ("p0", Priority::P0)] {
            queue.send_priority(body, priority, NO_WAIT).await.unwrap();
        }
        assert_eq!(bodies(&queue, 10).await, ["p0", "p1", "p2"]);
    }

    #[tokio::test(start_paused = true)]
    async fn the_batch_lane_shares_p1s_turn_in_send_order() {
        let queue = MemoryQueue::new();
        queue.send_priority("p2", Priority::P2, NO_WAIT).await.unwrap();
        queue.send("batch-a", NO_WAIT).await.unwrap();
        queue.send_priority("p1", Priority::P1, NO_WAIT).await.unwrap();
        queue.send("batch-b", NO_WAIT).await.unwrap();
        queue.send_priority("p0", Priority::P0, NO_WAIT).await.unwrap();
        assert_eq!(bodies(&queue, 10).await, ["p0", "batch-a", "p1", "batch-b", "p2"]);
    }

    #[tokio::test(start_paused = true)]
    async fn a_delayed_p0_waits_its_delay_and_then_goes_first() {
        let queue = MemoryQueue::new();
        queue
            .send_priority("p0-later", Priority::P0, Duration::from_secs(10))
            .await
            .unwrap();
        queue.send_priority("p2-now", Priority::P2, NO_WAIT).await.unwrap();
        queue.send_priority("p1-now", Priority::P1, NO_WAIT).await.unwrap();
        assert_eq!(
            bodies(&queue, 1).await,
            ["p1-now"],
            "the hidden P0 does not block the others"
        );
        tokio::time::advance(Duration::from_secs(10)).await;
        assert_eq!(bodies(&queue, 10).await, ["p0-later", "p2-now"]);
        // A waiting receive wakes when the delay runs out.
        queue
            .send_priority("p1-later", Priority::P1, Duration::from_secs(5))
            .await
            .unwrap();
        let got = queue
            .receive(1, Duration::from_secs(20), Duration::from_secs(1))
            .await
            .unwrap();
        assert_eq!(got[0].body, "p1-later");
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
