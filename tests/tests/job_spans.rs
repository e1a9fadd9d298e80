//! Every line a job logs carries the job's kind and the id of what it works on (the worker's JSON
//! logs print the current span), so one batch's or request's lines can be filtered. Its own test
//! binary: tracing's call-site cache is process-wide, and tests without a subscriber running
//! beside this one could hide the span.

use async_trait::async_trait;
use nimbus_integration_tests::log_capture::Lines;
use nimbus_shared::adapters::embedded::MemoryQueue;
use nimbus_shared::jobs::{JobDispatcher, JobFamily, JobMessage, JobRunner};
use nimbus_shared::ports::{AsyncRequestId, JobOutcome};
use std::sync::Arc;
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

#[tokio::test]
async fn a_jobs_log_lines_carry_its_kind_and_resource_id() {
    let (lines, _guard) = Lines::capture(tracing::Level::INFO);
    let dispatcher = JobDispatcher::new(Arc::new(MemoryQueue::new()), Duration::from_secs(60))
        .with_runner(JobFamily::AsyncRequest, Arc::new(Logging));
    let job = JobMessage::AsyncRun {
        request_id: AsyncRequestId::new("areq_42"),
    };
    dispatcher
        .handle_until(&job.to_body(), Instant::now() + Duration::from_secs(60))
        .await;
    let line = lines.with_message("running");
    let text = lines.text();
    assert_eq!(line["span"]["name"], "job", "{text}");
    assert_eq!(line["span"]["kind"], "async_run");
    assert_eq!(line["span"]["resource_id"], "areq_42");
}
