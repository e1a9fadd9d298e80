//! [`AfterResponse`] for both hosts: every piece of deferred work becomes a tokio task at once,
//! tracked so the host can wait until all of it has finished (the local server on shutdown, a
//! Lambda function after each invocation).

use crate::ports::AfterResponse;
use futures::future::BoxFuture;
use std::time::Duration;
use tokio_util::task::task_tracker::TaskTrackerToken;
use tokio_util::task::TaskTracker;

/// Deferred work running as tracked tokio tasks.
#[derive(Debug, Default)]
pub struct DeferredTasks {
    tasks: TaskTracker,
}

impl DeferredTasks {
    pub fn new() -> Self {
        Self::default()
    }

    /// Work deferred and not finished yet.
    pub fn pending(&self) -> usize {
        self.tasks.len()
    }

    /// A stand-in for work still under way (a response body being sent, say): settling waits
    /// until it is dropped.
    pub fn hold(&self) -> TaskTrackerToken {
        self.tasks.token()
    }

    /// Wait until no deferred work is left, including work deferred while waiting (work that
    /// defers more work). Meant for one caller at a time: the host's own bookkeeping.
    pub async fn settle(&self) {
        self.tasks.close();
        self.tasks.wait().await;
        self.tasks.reopen();
    }

    /// [`settle`](Self::settle) for at most `bound`; the number of tasks still running then.
    pub async fn settle_within(&self, bound: Duration) -> usize {
        if tokio::time::timeout(bound, self.settle()).await.is_err() {
            self.tasks.reopen();
        }
        self.pending()
    }
}

impl AfterResponse for DeferredTasks {
    fn defer(&self, work: BoxFuture<'static, ()>) {
        self.tasks.spawn(work);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use futures::FutureExt;
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::sync::Arc;

    fn counting(done: &Arc<AtomicUsize>, after: Duration) -> BoxFuture<'static, ()> {
        let done = Arc::clone(done);
        async move {
            tokio::time::sleep(after).await;
            done.fetch_add(1, Ordering::SeqCst);
        }
        .boxed()
    }

    #[tokio::test(start_paused = true)]
    async fn settle_waits_for_every_task_and_the_work_they_defer() {
        let tasks = Arc::new(DeferredTasks::new());
        let done = Arc::new(AtomicUsize::new(0));
        tasks.defer(counting(&done, Duration::from_millis(50)));
        let (inner_tasks, inner_done) = (Arc::clone(&tasks), Arc::clone(&done));
        tasks.defer(
            async move {
                tokio::time::sleep(Duration::from_millis(10)).await;
                // Deferred by deferred work, while `settle` already waits.
                inner_tasks.defer(counting(&inner_done, Duration::from_millis(100)));
            }
            .boxed(),
        );
        tasks.settle().await;
        assert_eq!(done.load(Ordering::SeqCst), 2);
        assert_eq!(tasks.pending(), 0);
        // Still usable afterwards.
        tasks.defer(counting(&done, Duration::from_millis(5)));
        tasks.settle().await;
        assert_eq!(done.load(Ordering::SeqCst), 3);
    }

    #[tokio::test(start_paused = true)]
    async fn the_work_starts_before_anyone_settles() {
        let tasks = DeferredTasks::new();
        let done = Arc::new(AtomicUsize::new(0));
        tasks.defer(counting(&done, Duration::from_millis(20)));
        tokio::time::sleep(Duration::from_millis(30)).await;
        assert_eq!(done.load(Ordering::SeqCst), 1, "deferred work runs on its own task");
    }

    #[tokio::test(start_paused = true)]
    async fn a_bounded_settle_gives_up_and_reports_what_is_left() {
        let tasks = DeferredTasks::new();
        let done = Arc::new(AtomicUsize::new(0));
        tasks.defer(counting(&done, Duration::from_millis(10)));
        tasks.defer(counting(&done, Duration::from_secs(60)));
        assert_eq!(tasks.settle_within(Duration::from_secs(1)).await, 1);
        assert_eq!(done.load(Ordering::SeqCst), 1);
        // Reopened: a later settle waits for the rest.
        tasks.settle().await;
        assert_eq!(done.load(Ordering::SeqCst), 2);
    }
}
