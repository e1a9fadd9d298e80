//! Every line a job logs carries the job's kind and the id of what it works on (the worker's JSON
//! logs print the current span), so one batch's or request's lines can be filtered. Its own test
//! binary: tracing's call-site cache is process-wide, and tests without a subscriber running
//! beside this one could hide the span.

use async_trait::async_trait;
use nimbus_shared::adapters::embedded::MemoryQueue;
use nimbus_shared::jobs::{JobDispatcher, JobFamily, JobMessage, JobRunner};
use nimbus_shared::ports::JobOutcome;
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::time::Instant;

struct Logging;

#[async_trait]
impl JobRunner for Logging {
    async fn run(&self, _job: &JobMessage, _deadline: Instant) -> JobOutcome {
        tracing::info!("running");
        JobOutcome::Done
    }
}

/// Log lines written to a buffer.
#[derive(Clone, Default)]
struct Lines(Arc<Mutex<Vec<u8>>>);

impl std::io::Write for Lines {
    fn write(&mut self, bytes: &[u8]) -> std::io::Result<usize> {
        self.0.lock().unwrap().extend_from_slice(bytes);
        Ok(bytes.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

#[tokio::test]
async fn a_jobs_log_lines_carry_its_kind_and_resource_id() {
    let lines = Lines::default();
    let writer = lines.clone();
    let subscriber = tracing_subscriber::fmt()
        .json()
        .with_current_span(true)
        .with_writer(move || writer.clone())
        .finish();
    let _guard = tracing::subscriber::set_default(subscriber);
    let dispatcher = JobDispatcher::new(Arc::new(MemoryQueue::new()), Duration::from_secs(60))
        .with_runner(JobFamily::AsyncRequest, Arc::new(Logging));
    let job = JobMessage::AsyncRun {
        request_id: "areq_42".into(),
    };
    dispatcher
        .handle_until(&job.to_body(), Instant::now() + Duration::from_secs(60))
        .await;
    let text = String::from_utf8(lines.0.lock().unwrap().clone()).unwrap();
    let line: serde_json::Value = text
        .lines()
        .map(|line| serde_json::from_str::<serde_json::Value>(line).unwrap())
        .find(|line| line["fields"]["message"] == "running")
        .unwrap();
    assert_eq!(line["span"]["name"], "job", "{text}");
    assert_eq!(line["span"]["kind"], "async_run");
    assert_eq!(line["span"]["resource_id"], "areq_42");
}
