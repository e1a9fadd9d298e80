//! The poller's pass over due async requests reads them in rounds of 1,000 and goes on while a
//! round was full and the pass has time: more than one round's worth is done in one pass, and a
//! pass past its deadline stops after the round under way.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use nimbus_integration_tests::async_harness::{settings, AsyncHarness};
use nimbus_shared::async_requests::AsyncDueWork;
use nimbus_shared::ports::{Clock, StateStore};
use nimbus_shared::scheduler::{DueIndex, Scheduler};
use std::sync::Arc;
use tokio::time::Instant;

const LANE: &str = "async_request";

/// `count` due entries whose requests are gone (each one looked at is cleared: one write).
async fn due_entries(h: &AsyncHarness, prefix: &str, count: usize) {
    let index = DueIndex::new(Arc::clone(&h.state) as Arc<dyn StateStore>);
    let due_at = h.now_ms() - 1;
    for i in 0..count {
        index.set(LANE, &format!("{prefix}-{i:05}"), due_at).await.unwrap();
    }
}

fn pass(h: &AsyncHarness) -> Scheduler {
    Scheduler::new(Arc::clone(&h.clock) as Arc<dyn Clock>)
        .with_task(Arc::new(AsyncDueWork::new(Arc::clone(&h.requests))))
}

async fn left(h: &AsyncHarness) -> usize {
    DueIndex::new(Arc::clone(&h.state) as Arc<dyn StateStore>)
        .due(LANE, i64::MAX, usize::MAX)
        .await
        .unwrap()
        .len()
}

#[tokio::test]
async fn one_pass_reads_round_after_round_until_the_due_work_is_done() {
    let h = AsyncHarness::embedded(settings());
    due_entries(&h, "gone", 2_345).await;
    let report = pass(&h).run_once().await;
    let task = &report.tasks["async_requests"];
    assert_eq!(
        (task["due"].as_u64(), task["rounds"].as_u64()),
        (Some(2_345), Some(3)),
        "{task}"
    );
    assert_eq!(task["errors"], 0);
    assert_eq!(left(&h).await, 0);
}

#[tokio::test]
async fn a_pass_past_its_deadline_stops_after_the_round_under_way() {
    let h = AsyncHarness::embedded(settings());
    due_entries(&h, "gone", 1_500).await;
    let report = pass(&h).run_once_until(Instant::now()).await;
    let task = &report.tasks["async_requests"];
    assert_eq!(
        (task["due"].as_u64(), task["rounds"].as_u64()),
        (Some(1_000), Some(1)),
        "{task}"
    );
    assert_eq!(left(&h).await, 500);
    // The next pass takes the rest.
    let report = pass(&h).run_once_until(Instant::now()).await;
    assert_eq!(report.tasks["async_requests"]["due"], 500);
    assert_eq!(left(&h).await, 0);
}
