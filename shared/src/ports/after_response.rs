//! Work that must not delay the answer (storing records, for instance): handlers hand it to the
//! host, which runs it beside or after the response and guarantees it is not lost.

use futures::future::BoxFuture;

/// Where handlers put work that runs after the response.
///
/// The host starts the work at once and does not wait for it before answering. It sees the work
/// through before the process may be stopped: the local server waits for it (bounded) on
/// graceful shutdown; a Lambda function finishes it after the response is delivered and before
/// the execution environment is frozen.
pub trait AfterResponse: Send + Sync {
    /// Run `work` without delaying the response. Its failures are its own to log: nobody awaits
    /// its outcome.
    fn defer(&self, work: BoxFuture<'static, ()>);
}
