//! The scheduler of due work: the poller Lambda (every minute) and the local server's timer run
//! one [`Scheduler::run_once`] pass over the registered [`ScheduledTask`]s (the files sweep, batch
//! recovery, …; `app::scheduler` registers them). Tasks find their work through a [`DueIndex`]
//! (or their own markers) and every step is idempotent, so two passes at once, or one that
//! crashed half-way, are harmless.

mod due_index;

pub use due_index::{DueIndex, DueItem};

use crate::ports::{Clock, StorageError};
use async_trait::async_trait;
use serde::Serialize;
use std::collections::BTreeMap;
use std::sync::Arc;

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
}

/// What one pass did: each task's report (or `{"error": …}`), and how many tasks failed.
#[derive(Debug, Clone, Default, Serialize)]
pub struct SchedulerReport {
    pub tasks: BTreeMap<String, serde_json::Value>,
    pub errors: u64,
}

/// Runs every registered task once per pass, in registration order.
#[derive(Clone)]
pub struct Scheduler {
    clock: Arc<dyn Clock>,
    tasks: Vec<Arc<dyn ScheduledTask>>,
}

impl Scheduler {
    pub fn new(clock: Arc<dyn Clock>) -> Self {
        Self {
            clock,
            tasks: Vec::new(),
        }
    }

    pub fn with_task(mut self, task: Arc<dyn ScheduledTask>) -> Self {
        self.tasks.push(task);
        self
    }

    /// One pass: every task runs, even after another failed.
    pub async fn run_once(&self) -> SchedulerReport {
        let mut report = SchedulerReport::default();
        for task in &self.tasks {
            let outcome = match task.run(self.clock.now_unix_ms()).await {
                Ok(outcome) => outcome,
                Err(err) => {
                    tracing::warn!(task = task.name(), error = %err, "scheduled task failed");
                    report.errors += 1;
                    serde_json::json!({"error": err.to_string()})
                }
            };
            report.tasks.insert(task.name().to_owned(), outcome);
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
