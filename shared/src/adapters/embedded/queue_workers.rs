//! In-process worker tasks that drain a [`JobQueue`], standing in locally for the SQS-triggered
//! worker Lambda: a message is deleted only after its handler succeeds, so failures redeliver.

use crate::ports::{JobHandler, JobOutcome, JobQueue};
use futures::FutureExt;
use std::panic::AssertUnwindSafe;
use std::sync::Arc;
use std::time::Duration;
use tokio::task::JoinHandle;

/// Start `workers` tasks receiving from `queue` and handing each message to `handler`.
/// Each message stays invisible for `visibility` while it is handled.
pub fn spawn_queue_workers(
    queue: Arc<dyn JobQueue>,
    handler: Arc<dyn JobHandler>,
    workers: usize,
    visibility: Duration,
) -> Vec<JoinHandle<()>> {
    (0..workers.max(1))
        .map(|_| {
            let queue = Arc::clone(&queue);
            let handler = Arc::clone(&handler);
            tokio::spawn(async move {
                loop {
                    let messages = match queue.receive(1, Duration::from_secs(20), visibility).await {
                        Ok(messages) => messages,
                        Err(err) => {
                            tracing::warn!(error = %err, "queue receive failed");
                            tokio::time::sleep(Duration::from_secs(1)).await;
                            continue;
                        }
                    };
                    for message in messages {
                        handler.picked_up(&message);
                        // A job that panics fails that job, never the worker: the panic is caught
                        // here, logged, and the message left to come back after its visibility
                        // timeout (as SQS redelivers a message whose Lambda crashed).
                        let handled = AssertUnwindSafe(handler.handle(&message.body)).catch_unwind().await;
                        let result = match handled {
                            Ok(JobOutcome::Done) => queue.delete(&message.receipt).await,
                            Ok(JobOutcome::Retry { retry_after }) => {
                                queue.change_visibility(&message.receipt, retry_after).await
                            }
                            Err(_) => {
                                tracing::error!(message_id = %message.message_id, "a job panicked; the worker goes on");
                                Ok(())
                            }
                        };
                        if let Err(err) = result {
                            tracing::warn!(error = %err, message_id = %message.message_id, "queue acknowledgement failed");
                        }
                    }
                }
            })
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::adapters::embedded::MemoryQueue;
    use async_trait::async_trait;
    use std::sync::Mutex;

    struct FailOnce {
        seen: Mutex<Vec<String>>,
    }

    #[async_trait]
    impl JobHandler for FailOnce {
        async fn handle(&self, body: &str) -> JobOutcome {
            let mut seen = self.seen.lock().unwrap();
            let first_time = !seen.iter().any(|b| b == body);
            seen.push(body.to_owned());
            if first_time {
                JobOutcome::Retry {
                    retry_after: Duration::ZERO,
                }
            } else {
                JobOutcome::Done
            }
        }
    }

    /// Panics on `"boom"`, finishes everything else.
    struct PanicsOnBoom {
        done: Mutex<Vec<String>>,
    }

    #[async_trait]
    impl JobHandler for PanicsOnBoom {
        async fn handle(&self, body: &str) -> JobOutcome {
            if body == "boom" {
                panic!("a poison job");
            }
            self.done.lock().unwrap().push(body.to_owned());
            JobOutcome::Done
        }
    }

    /// #26 C7: a job that panics must not take its worker with it.
    #[tokio::test]
    async fn a_panicking_job_does_not_kill_the_worker() {
        let queue = MemoryQueue::new();
        let handler = Arc::new(PanicsOnBoom {
            done: Mutex::new(Vec::new()),
        });
        // One worker: the jobs after the poison one need that very worker.
        let tasks = spawn_queue_workers(Arc::new(queue.clone()), handler.clone(), 1, Duration::from_secs(30));
        queue.send("boom", Duration::ZERO).await.unwrap();
        for body in ["a", "b"] {
            queue.send(body, Duration::from_millis(50)).await.unwrap();
        }
        for _ in 0..200 {
            if handler.done.lock().unwrap().len() == 2 {
                break;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        let finished = tasks.iter().all(|task| task.is_finished());
        for task in tasks {
            task.abort();
        }
        assert!(!finished, "the worker task died");
        assert_eq!(*handler.done.lock().unwrap(), vec!["a", "b"]);
    }

    #[tokio::test]
    async fn failed_jobs_are_redelivered_and_done_jobs_deleted() {
        let queue = MemoryQueue::new();
        let handler = Arc::new(FailOnce {
            seen: Mutex::new(Vec::new()),
        });
        for body in ["a", "b"] {
            queue.send(body, Duration::ZERO).await.unwrap();
        }
        let tasks = spawn_queue_workers(Arc::new(queue.clone()), handler.clone(), 2, Duration::from_secs(30));
        for _ in 0..200 {
            if queue.is_empty() {
                break;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        for task in tasks {
            task.abort();
        }
        assert!(queue.is_empty());
        let mut seen = handler.seen.lock().unwrap().clone();
        seen.sort();
        assert_eq!(seen, vec!["a", "a", "b", "b"]);
    }
}
