//! Work that must not delay the answer (storing records, writing the cache): handed over here
//! and run after the response. Locally it runs on a spawned task; in Lambda it must finish
//! before the execution environment is frozen.

use futures::future::BoxFuture;

pub trait AfterResponse: Send + Sync {
    /// Run `work` after the current response.
    fn defer(&self, work: BoxFuture<'static, ()>);
}

/// Runs deferred work on a spawned task at once (a long-running process).
#[derive(Debug, Clone, Copy, Default)]
pub struct SpawnAfterResponse;

impl AfterResponse for SpawnAfterResponse {
    fn defer(&self, work: BoxFuture<'static, ()>) {
        tokio::spawn(work);
    }
}
