//! A process-wide budget for the JSON bodies being held at once. A body and the JSON tree parsed
//! from it take many times its size in memory, so large bodies (up to the 10 MB limit) take
//! permits in proportion to their size and wait their turn, while small ones never wait. This
//! bounds the server's peak memory under a burst of large requests.

use std::sync::{Arc, LazyLock};
use tokio::sync::{OwnedSemaphorePermit, Semaphore};

/// Bodies smaller than this do not count against the budget.
pub const SMALL_BODY_BYTES: usize = 256 * 1024;
/// Bytes of large bodies held at once, across all requests (at least one body of the largest size).
pub const BUDGET_BYTES: usize = 16 * 1024 * 1024;

static BUDGET: LazyLock<Arc<Semaphore>> = LazyLock::new(|| Arc::new(Semaphore::new(BUDGET_BYTES)));

/// Held while a large body (and what was parsed from it) is alive; released on drop.
#[derive(Debug, Default)]
pub struct BodyPermit(#[allow(dead_code)] Option<OwnedSemaphorePermit>);

/// Wait until a body of `declared_bytes` (its `Content-Length`, or `None` when unknown: counted as
/// `max_bytes`) fits the budget.
pub async fn reserve(declared_bytes: Option<usize>, max_bytes: usize) -> BodyPermit {
    let bytes = declared_bytes.unwrap_or(max_bytes).min(max_bytes).min(BUDGET_BYTES);
    if bytes < SMALL_BODY_BYTES {
        return BodyPermit(None);
    }
    let permits = u32::try_from(bytes).unwrap_or(u32::MAX);
    // The semaphore is never closed, so this only fails if it were; then do not limit.
    BodyPermit(Arc::clone(&BUDGET).acquire_many_owned(permits).await.ok())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[tokio::test]
    async fn small_bodies_never_wait_and_large_ones_share_the_budget() {
        let first = reserve(Some(BUDGET_BYTES), usize::MAX).await;
        assert!(first.0.is_some());
        // A small body passes while the budget is exhausted.
        let small = tokio::time::timeout(Duration::from_millis(100), reserve(Some(1024), usize::MAX)).await;
        assert!(small.is_ok_and(|permit| permit.0.is_none()));
        // An unknown length counts as the largest body: it waits for the first to finish.
        let waiting = tokio::spawn(reserve(None, 10 * 1024 * 1024));
        tokio::time::sleep(Duration::from_millis(50)).await;
        assert!(!waiting.is_finished());
        drop(first);
        let second = tokio::time::timeout(Duration::from_secs(5), waiting).await;
        assert!(matches!(second, Ok(Ok(BodyPermit(Some(_))))));
    }
}
