//! Hands each job message to the runner of its family, and settles SQS deliveries.

use super::{JobFamily, JobMessage, JobRunner};
use crate::ports::{
    Clock, JobHandler, JobOutcome, JobQueue, MetricUnit, MetricsSink, NoMetrics, QueueMessage, SystemClock,
};
use async_trait::async_trait;
use futures::FutureExt;
use std::collections::HashMap;
use std::panic::AssertUnwindSafe;
use std::sync::Arc;
use std::time::{Duration, SystemTime};
use tokio::time::Instant;
use tracing::Instrument;

/// How long a message of a family with no runner waits before it is delivered again: a wiring
/// error, fixed by a deploy; the message is kept until then (or its dead-letter queue).
const NO_RUNNER_RETRY: Duration = Duration::from_secs(60);

/// How long a job whose runner panicked waits before it is delivered again.
const PANIC_RETRY: Duration = Duration::from_secs(30);

/// Routes job messages to the [`JobRunner`] of their [`JobFamily`].
#[derive(Clone)]
pub struct JobDispatcher {
    queue: Arc<dyn JobQueue>,
    max_run: Duration,
    runners: HashMap<JobFamily, Arc<dyn JobRunner>>,
    /// How long jobs waited is measured here.
    metrics: Arc<dyn MetricsSink>,
}

impl JobDispatcher {
    /// A dispatcher acknowledging on `queue`; a message handled without a deadline of its own
    /// ([`JobHandler::handle`]) runs at most `max_run`.
    pub fn new(queue: Arc<dyn JobQueue>, max_run: Duration) -> Self {
        Self {
            queue,
            max_run,
            runners: HashMap::new(),
            metrics: Arc::new(NoMetrics),
        }
    }

    /// Measure how long jobs waited into `metrics`.
    pub fn with_metrics(mut self, metrics: Arc<dyn MetricsSink>) -> Self {
        self.metrics = metrics;
        self
    }

    /// A message picked up for the first time after waiting since `sent_at_ms`: `queue_age`
    /// by job kind. Redeliveries are not counted (their wait is a retry delay, not a backlog).
    pub fn record_pickup(&self, body: &str, receive_count: u32, sent_at_ms: Option<i64>) {
        let (Some(sent_at_ms), 1) = (sent_at_ms, receive_count) else {
            return;
        };
        let Ok(job) = serde_json::from_str::<JobMessage>(body) else {
            return;
        };
        let waited_ms = (SystemClock.now_unix_ms() - sent_at_ms).max(0) as f64;
        self.metrics
            .record("queue_age", MetricUnit::Milliseconds, waited_ms, &[("job", job.kind())]);
    }

    /// Run the jobs of `family` on `runner` (replacing any runner registered before).
    pub fn with_runner(mut self, family: JobFamily, runner: Arc<dyn JobRunner>) -> Self {
        self.runners.insert(family, runner);
        self
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
        let family = job.family();
        // Every line the job logs carries what it works on (JSON logs: the current span's fields).
        let span = tracing::info_span!("job", kind = job.kind(), resource_id = job.resource_id());
        self.run_job(&job, family, deadline).instrument(span).await
    }

    async fn run_job(&self, job: &JobMessage, family: JobFamily, deadline: Instant) -> JobOutcome {
        match self.runners.get(&family) {
            // A runner that panics fails this job, not the worker or the Lambda invocation's
            // other messages: retried later like any failed job (its runner's own attempt
            // counts and the dead-letter queue bound the retries).
            Some(runner) => match AssertUnwindSafe(runner.run(job, deadline)).catch_unwind().await {
                Ok(outcome) => outcome,
                Err(_) => {
                    tracing::error!(?job, "the job panicked; it will be retried");
                    JobOutcome::Retry {
                        retry_after: PANIC_RETRY,
                    }
                }
            },
            None => {
                tracing::error!(
                    ?job,
                    ?family,
                    "no runner is registered for this job family (a wiring error); it will be retried"
                );
                JobOutcome::Retry {
                    retry_after: NO_RUNNER_RETRY,
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
            JobOutcome::Retry { retry_after } => {
                if let Err(err) = self.queue.change_visibility(receipt, retry_after).await {
                    tracing::warn!(error = %err, "could not set the retry delay; the visibility timeout applies");
                }
                false
            }
        }
    }
}

#[async_trait]
impl JobHandler for JobDispatcher {
    async fn handle(&self, body: &str) -> JobOutcome {
        self.handle_until(body, Instant::now() + self.max_run).await
    }

    fn picked_up(&self, message: &QueueMessage) {
        self.record_pickup(&message.body, message.receive_count, message.sent_at_ms);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::adapters::embedded::MemoryQueue;
    use crate::ports::{AsyncRequestId, BatchId, DeliveryId};
    use std::sync::Mutex;

    /// Records what it ran and answers `outcome`.
    struct Recording {
        ran: Mutex<Vec<JobMessage>>,
        outcome: JobOutcome,
    }

    impl Recording {
        fn new(outcome: JobOutcome) -> Arc<Self> {
            Arc::new(Self {
                ran: Mutex::new(Vec::new()),
                outcome,
            })
        }

        fn ran(&self) -> Vec<JobMessage> {
            self.ran.lock().unwrap().clone()
        }
    }

    #[async_trait]
    impl JobRunner for Recording {
        async fn run(&self, job: &JobMessage, _deadline: Instant) -> JobOutcome {
            self.ran.lock().unwrap().push(job.clone());
            self.outcome
        }
    }

    fn deadline() -> Instant {
        Instant::now() + Duration::from_secs(60)
    }

    #[tokio::test]
    async fn each_family_goes_to_its_runner() {
        let batch = Recording::new(JobOutcome::Done);
        let webhook = Recording::new(JobOutcome::Retry {
            retry_after: Duration::from_secs(7),
        });
        let dispatcher = JobDispatcher::new(Arc::new(MemoryQueue::new()), Duration::from_secs(60))
            .with_runner(JobFamily::Batch, batch.clone())
            .with_runner(JobFamily::Webhook, webhook.clone());
        let chunk = JobMessage::Chunk {
            batch_id: BatchId::new("b"),
            chunk: 1,
        };
        let delivery = JobMessage::WebhookDeliver {
            delivery_id: DeliveryId::new("d"),
            attempt: 0,
        };
        assert_eq!(
            dispatcher.handle_until(&chunk.to_body(), deadline()).await,
            JobOutcome::Done
        );
        assert_eq!(
            dispatcher.handle_until(&delivery.to_body(), deadline()).await,
            JobOutcome::Retry {
                retry_after: Duration::from_secs(7)
            }
        );
        assert_eq!(batch.ran(), [chunk]);
        assert_eq!(webhook.ran(), [delivery]);
    }

    struct Panics;

    #[async_trait]
    impl JobRunner for Panics {
        async fn run(&self, _job: &JobMessage, _deadline: Instant) -> JobOutcome {
            panic!("a poison job")
        }
    }

    /// #26 C7: a runner's panic is that job's failure (retried later), and the dispatcher goes
    /// on with the next message.
    #[tokio::test]
    async fn a_panicking_job_is_retried_and_the_next_one_runs() {
        let batch = Recording::new(JobOutcome::Done);
        let dispatcher = JobDispatcher::new(Arc::new(MemoryQueue::new()), Duration::from_secs(60))
            .with_runner(JobFamily::AsyncRequest, Arc::new(Panics))
            .with_runner(JobFamily::Batch, batch.clone());
        let poison = JobMessage::AsyncRun {
            request_id: AsyncRequestId::new("r"),
        };
        assert_eq!(
            dispatcher.handle_until(&poison.to_body(), deadline()).await,
            JobOutcome::Retry {
                retry_after: PANIC_RETRY
            }
        );
        let chunk = JobMessage::Chunk {
            batch_id: BatchId::new("b"),
            chunk: 1,
        };
        assert_eq!(
            dispatcher.handle_until(&chunk.to_body(), deadline()).await,
            JobOutcome::Done
        );
        assert_eq!(batch.ran(), [chunk]);
    }

    #[tokio::test]
    async fn unreadable_bodies_are_dropped_and_unwired_families_retried_later() {
        let batch = Recording::new(JobOutcome::Done);
        let dispatcher = JobDispatcher::new(Arc::new(MemoryQueue::new()), Duration::from_secs(60))
            .with_runner(JobFamily::Batch, batch.clone());
        for body in [
            "not json",
            r#"{"job":"unknown_kind"}"#,
            r#"{"job":"chunk","batch_id":"b"}"#,
        ] {
            assert_eq!(dispatcher.handle(body).await, JobOutcome::Done, "{body}");
        }
        let run = JobMessage::AsyncRun {
            request_id: AsyncRequestId::new("r"),
        };
        assert_eq!(
            dispatcher.handle(&run.to_body()).await,
            JobOutcome::Retry {
                retry_after: NO_RUNNER_RETRY
            }
        );
        assert!(batch.ran().is_empty());
    }

    #[tokio::test(start_paused = true)]
    async fn a_delivery_to_retry_is_hidden_for_the_runners_delay() {
        let queue = Arc::new(MemoryQueue::new());
        let retry = Recording::new(JobOutcome::Retry {
            retry_after: Duration::from_secs(30),
        });
        let dispatcher =
            JobDispatcher::new(queue.clone(), Duration::from_secs(60)).with_runner(JobFamily::Batch, retry);
        let body = JobMessage::Finalize {
            batch_id: BatchId::new("b"),
        }
        .to_body();
        queue.send(&body, Duration::ZERO).await.unwrap();
        let message = queue
            .receive(1, Duration::ZERO, Duration::from_secs(900))
            .await
            .unwrap()
            .remove(0);
        let deadline = SystemTime::now() + Duration::from_secs(60);
        assert!(
            !dispatcher
                .handle_delivery(&message.body, &message.receipt, deadline)
                .await
        );
        tokio::time::advance(Duration::from_secs(29)).await;
        assert!(queue
            .receive(1, Duration::ZERO, Duration::from_secs(1))
            .await
            .unwrap()
            .is_empty());
        tokio::time::advance(Duration::from_secs(2)).await;
        assert_eq!(
            queue
                .receive(1, Duration::ZERO, Duration::from_secs(1))
                .await
                .unwrap()
                .len(),
            1
        );
    }

    #[test]
    fn a_first_pickup_records_how_long_the_job_waited_and_a_redelivery_does_not() {
        let metrics = Arc::new(crate::adapters::embedded::PrometheusMetrics::new());
        let dispatcher = JobDispatcher::new(Arc::new(MemoryQueue::new()), Duration::from_secs(60))
            .with_metrics(Arc::clone(&metrics) as Arc<dyn MetricsSink>);
        let body = JobMessage::Chunk {
            batch_id: BatchId::new("b"),
            chunk: 3,
        }
        .to_body();
        let sent = SystemClock.now_unix_ms() - 1500;
        dispatcher.record_pickup(&body, 1, Some(sent));
        dispatcher.record_pickup(&body, 2, Some(sent - 60_000));
        dispatcher.record_pickup(&body, 1, None);
        dispatcher.record_pickup("not a job", 1, Some(sent));
        let text = metrics.prometheus_text().unwrap();
        assert!(
            text.contains("nimbus_queue_age_seconds_count{job=\"chunk\"} 1\n"),
            "{text}"
        );
        assert!(
            text.contains("nimbus_queue_age_seconds_bucket{job=\"chunk\",le=\"1\"} 0\n"),
            "{text}"
        );
        assert!(
            text.contains("nimbus_queue_age_seconds_bucket{job=\"chunk\",le=\"2.5\"} 1\n"),
            "{text}"
        );
    }
}
