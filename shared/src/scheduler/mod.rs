//! The scheduler of due work: the poller Lambda (every minute) and the local server's timer run
//! one [`Scheduler::run_once`] pass over the registered [`ScheduledTask`]s (the files sweep, batch
//! recovery, …; `app::scheduler` registers them). Tasks find their work through a [`DueIndex`]
//! (or their own markers) and every step is idempotent, so two passes at once, or one that
//! crashed half-way, are harmless.

mod arming;
mod due_index;

pub(crate) use arming::ARM_HORIZON_MS;
#[cfg(feature = "aws")]
pub(crate) use arming::ARM_KIND;
pub use arming::{Arming, ScheduleState};
pub use due_index::{DueIndex, DueItem};
pub(crate) use due_index::{DEFAULT_DUE_INDEX_SHARDS, DUE_WORK_KIND, MAX_DUE_INDEX_SHARDS};

use crate::ports::{Clock, StorageError};
use async_trait::async_trait;
use serde::Serialize;
use std::collections::BTreeMap;
use std::sync::Arc;
use tokio::time::Instant;
use tracing::Instrument;

tokio::task_local! {
    /// When the running pass should stop starting new work, if it has a deadline.
    static PASS_DEADLINE: Option<Instant>;
}

/// Whether the running pass may start another round of work: before its deadline
/// ([`Scheduler::run_once_until`]), always for a pass without one, never outside a pass.
pub(crate) fn pass_has_time() -> bool {
    PASS_DEADLINE
        .try_with(|deadline| deadline.is_none_or(|deadline| Instant::now() < deadline))
        .unwrap_or(false)
}

/// Whether a task that just handled a round of due work should read another: only when the round
/// was full (more may be due), moved at least one item on (a round where every item failed would
/// read the same ones again) and the pass has time ([`pass_has_time`]).
pub(crate) fn another_round(read: usize, limit: usize, failed: u64) -> bool {
    read == limit && failed < limit as u64 && pass_has_time()
}

/// Why a task's pass failed.
#[derive(Debug, thiserror::Error)]
pub enum ScheduleError {
    #[error(transparent)]
    Storage(#[from] StorageError),
    #[error("{0}")]
    Task(String),
}

/// One kind of due work.
#[async_trait]
pub trait ScheduledTask: Send + Sync {
    /// The task's key in the [`SchedulerReport`].
    fn name(&self) -> &'static str;
    /// One pass over this task's due work; the report is JSON for the poller's result.
    async fn run(&self, now_ms: i64) -> Result<serde_json::Value, ScheduleError>;
    /// When this task's earliest work is due (at or before now: at once), `None` without any;
    /// the poller's schedule stays on while some task has work soon ([`Arming`]).
    async fn next_due(&self) -> Result<Option<i64>, ScheduleError>;
}

/// What one pass did: each task's report (or `{"error": …}`), and how many tasks failed.
#[derive(Debug, Clone, Default, Serialize)]
pub struct SchedulerReport {
    pub tasks: BTreeMap<String, serde_json::Value>,
    pub errors: u64,
    /// What the pass left the poller's schedule as, where it is armed and disarmed (AWS).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub schedule: Option<ScheduleState>,
}

/// Runs every registered task once per pass, in registration order.
#[derive(Clone)]
pub struct Scheduler {
    clock: Arc<dyn Clock>,
    tasks: Vec<Arc<dyn ScheduledTask>>,
    arming: Option<Arming>,
}

impl Scheduler {
    pub fn new(clock: Arc<dyn Clock>) -> Self {
        Self {
            clock,
            tasks: Vec::new(),
            arming: None,
        }
    }

    /// End every pass by arming or disarming the poller's schedule (see [`Arming`]).
    pub fn with_arming(mut self, arming: Arming) -> Self {
        self.arming = Some(arming);
        self
    }

    /// Whether some task has work due by `until_ms`; a task that cannot tell counts as having
    /// some (the schedule stays on rather than leave work behind).
    pub(crate) async fn has_work_before(&self, until_ms: i64) -> bool {
        for task in &self.tasks {
            match task.next_due().await {
                Ok(Some(due_ms)) if due_ms <= until_ms => return true,
                Ok(_) => {}
                Err(err) => {
                    tracing::warn!(task = task.name(), error = %err, "could not tell when work is due");
                    return true;
                }
            }
        }
        false
    }

    pub fn with_task(mut self, task: Arc<dyn ScheduledTask>) -> Self {
        self.tasks.push(task);
        self
    }

    /// One pass: every task runs, even after another failed; a task with more due work than one
    /// round goes on until it is done ([`pass_has_time`]).
    pub async fn run_once(&self) -> SchedulerReport {
        PASS_DEADLINE.scope(None, self.run_tasks()).await
    }

    /// One pass whose tasks start no new round of work after `deadline` (the poller's: before
    /// the next scheduled pass and well before the invocation's end).
    pub async fn run_once_until(&self, deadline: Instant) -> SchedulerReport {
        PASS_DEADLINE.scope(Some(deadline), self.run_tasks()).await
    }

    async fn run_tasks(&self) -> SchedulerReport {
        let mut report = SchedulerReport::default();
        for task in &self.tasks {
            let span = tracing::info_span!("scheduled_task", task = task.name());
            let outcome = match task.run(self.clock.now_unix_ms()).instrument(span).await {
                Ok(outcome) => outcome,
                Err(err) => {
                    tracing::warn!(task = task.name(), error = %err, "scheduled task failed");
                    report.errors += 1;
                    serde_json::json!({"error": err.to_string()})
                }
            };
            report.tasks.insert(task.name().to_owned(), outcome);
        }
        if let Some(arming) = &self.arming {
            match arming.settle(self, self.clock.now_unix_ms()).await {
                Ok(state) => report.schedule = Some(state),
                Err(err) => {
                    tracing::warn!(error = %err, "could not arm or disarm the poller's schedule");
                    report.errors += 1;
                }
            }
        }
        report
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ports::SystemClock;
    use serde_json::json;
    use std::sync::atomic::{AtomicU32, Ordering};

    struct Counting {
        name: &'static str,
        runs: AtomicU32,
        fails: bool,
    }

    impl Counting {
        fn new(name: &'static str, fails: bool) -> Arc<Self> {
            Arc::new(Self {
                name,
                runs: AtomicU32::new(0),
                fails,
            })
        }
    }

    #[async_trait]
    impl ScheduledTask for Counting {
        fn name(&self) -> &'static str {
            self.name
        }

        async fn run(&self, now_ms: i64) -> Result<serde_json::Value, ScheduleError> {
            let runs = self.runs.fetch_add(1, Ordering::SeqCst) + 1;
            if self.fails {
                return Err(ScheduleError::Task(format!("{} broke", self.name)));
            }
            Ok(json!({"runs": runs, "saw_time": now_ms > 0}))
        }

        async fn next_due(&self) -> Result<Option<i64>, ScheduleError> {
            Ok(None)
        }
    }

    #[tokio::test(start_paused = true)]
    async fn a_pass_has_time_until_its_deadline_and_one_without_deadline_always() {
        assert!(!pass_has_time(), "outside a pass");
        assert!(PASS_DEADLINE.scope(None, async { pass_has_time() }).await);
        let deadline = Instant::now() + std::time::Duration::from_secs(10);
        let at_start = PASS_DEADLINE.scope(Some(deadline), async { pass_has_time() }).await;
        tokio::time::advance(std::time::Duration::from_secs(10)).await;
        let at_end = PASS_DEADLINE.scope(Some(deadline), async { pass_has_time() }).await;
        assert_eq!((at_start, at_end), (true, false));
    }

    #[tokio::test]
    async fn every_task_runs_even_after_one_fails() {
        let first = Counting::new("first", true);
        let second = Counting::new("second", false);
        let scheduler = Scheduler::new(Arc::new(SystemClock))
            .with_task(first.clone())
            .with_task(second.clone());
        let report = scheduler.run_once().await;
        assert_eq!(report.errors, 1);
        assert_eq!(report.tasks["first"], json!({"error": "first broke"}));
        assert_eq!(report.tasks["second"], json!({"runs": 1, "saw_time": true}));
        scheduler.run_once().await;
        assert_eq!(
            (first.runs.load(Ordering::SeqCst), second.runs.load(Ordering::SeqCst)),
            (2, 2)
        );
        let json = serde_json::to_value(scheduler.run_once().await).unwrap();
        assert_eq!(json["errors"], 1);
        assert_eq!(json["tasks"]["second"]["runs"], 3);
    }
}
