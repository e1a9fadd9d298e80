//! Deferred work in Lambda finishes after the response is delivered and before the execution
//! environment may freeze. Lambda freezes it once the runtime loop and every extension have
//! asked for their next event, so the work is awaited by one of the two:
//!
//! - normally by an internal extension (registered for INVOKE events): for each invocation it
//!   waits until the runtime loop reports that invocation's response delivered, then until no
//!   deferred work is left, and only then asks for its next event. The runtime loop moves on at
//!   once, and the client has its answer before the work ends;
//! - if the extension could not be registered, by the runtime loop itself, after delivering the
//!   response and before asking for the next event.
//!
//! "Delivered" is when the Runtime API has answered the response upload; a streamed body may
//! still be on its way then under some emulators, so the body itself holds the deferred work
//! open until it is sent ([`super::sent_body`]). Invocations are sequential (one runtime loop, no
//! managed concurrency), so the most recently delivered request id is all the bookkeeping needed.

use crate::adapters::DeferredTasks;
use futures::future::BoxFuture;
use futures::FutureExt;
use lambda_http::lambda_runtime::LambdaInvocation;
use lambda_http::{Error, Service};
use std::sync::Arc;
use std::task::{Context, Poll};
use tokio::sync::watch;
use tower::Layer;

/// What the runtime loop does once an invocation's response is delivered.
#[derive(Clone)]
pub(crate) enum AfterDelivery {
    /// Tell the extension ([`InvocationSettler`]) which invocation's response is out.
    NotifyExtension(Arc<watch::Sender<Option<String>>>),
    /// No extension: wait for the deferred work here, before asking for the next event.
    SettleHere(Arc<DeferredTasks>),
}

impl AfterDelivery {
    async fn delivered(&self, request_id: String) {
        match self {
            Self::NotifyExtension(delivered) => {
                delivered.send_replace(Some(request_id));
            }
            Self::SettleHere(deferred) => settle(deferred, &request_id).await,
        }
    }
}

/// The extension's half: one call per INVOKE event.
pub(crate) struct InvocationSettler {
    delivered: watch::Receiver<Option<String>>,
    deferred: Arc<DeferredTasks>,
}

impl InvocationSettler {
    /// Return once the response of `request_id` is delivered and no deferred work is left.
    pub(crate) async fn after_invocation(&self, request_id: &str) {
        let mut delivered = self.delivered.clone();
        // `wait_for` looks at the current value first: the runtime loop may be done already.
        if delivered
            .wait_for(|last| last.as_deref() == Some(request_id))
            .await
            .is_err()
        {
            // The runtime loop is gone, so the process is ending; nothing to hold back.
            return;
        }
        settle(&self.deferred, request_id).await;
    }
}

/// The two halves for running with the extension: the runtime loop's and the extension's.
pub(crate) fn extension_handoff(deferred: Arc<DeferredTasks>) -> (AfterDelivery, InvocationSettler) {
    let (sender, receiver) = watch::channel(None);
    (
        AfterDelivery::NotifyExtension(Arc::new(sender)),
        InvocationSettler {
            delivered: receiver,
            deferred,
        },
    )
}

async fn settle(deferred: &DeferredTasks, request_id: &str) {
    let pending = deferred.pending();
    if pending > 0 {
        tracing::debug!(request_id, pending, "finishing deferred work after the response");
    }
    deferred.settle().await;
}

/// Wraps the runtime's invocation service (event in, response handed to the Runtime API) and
/// applies [`AfterDelivery`] once the response is delivered, whatever the outcome.
#[derive(Clone)]
pub(crate) struct AfterInvocationLayer {
    after: AfterDelivery,
}

impl AfterInvocationLayer {
    pub fn new(after: AfterDelivery) -> Self {
        Self { after }
    }
}

impl<S> Layer<S> for AfterInvocationLayer {
    type Service = AfterInvocation<S>;

    fn layer(&self, inner: S) -> Self::Service {
        AfterInvocation {
            inner,
            after: self.after.clone(),
        }
    }
}

pub(crate) struct AfterInvocation<S> {
    inner: S,
    after: AfterDelivery,
}

impl<S> Service<LambdaInvocation> for AfterInvocation<S>
where
    S: Service<LambdaInvocation, Response = (), Error = Error>,
    S::Future: Send + 'static,
{
    type Response = ();
    type Error = Error;
    type Future = BoxFuture<'static, Result<(), Error>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, invocation: LambdaInvocation) -> Self::Future {
        let request_id = invocation.context.request_id.clone();
        let delivery = self.inner.call(invocation);
        let after = self.after.clone();
        async move {
            let delivered = delivery.await;
            after.delivered(request_id).await;
            delivered
        }
        .boxed()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ports::AfterResponse;
    use lambda_http::lambda_runtime::Context as InvocationContext;
    use std::sync::Mutex;
    use std::time::Duration;
    use tower::ServiceExt;

    type Log = Arc<Mutex<Vec<String>>>;

    fn invocation(request_id: &str) -> LambdaInvocation {
        let mut context = InvocationContext::default();
        context.request_id = request_id.to_owned();
        LambdaInvocation {
            parts: http::Response::new(()).into_parts().0,
            body: bytes::Bytes::new(),
            context,
        }
    }

    /// A handler that answers after 40 ms and defers two pieces of work: one half-way, and one at
    /// the very end of its answer (as a streamed body does when it ends). Each logs
    /// `"<request id> work <n>"` when it finishes, 50 ms later. Nothing is deferred at first, so an
    /// extension that did not wait for the response would find no work and let Lambda freeze.
    fn handler(
        deferred: Arc<DeferredTasks>,
        log: Log,
    ) -> impl Service<LambdaInvocation, Response = (), Error = Error, Future: Send + 'static> + Clone {
        tower::service_fn(move |invocation: LambdaInvocation| {
            let (deferred, log) = (Arc::clone(&deferred), Arc::clone(&log));
            async move {
                let id = invocation.context.request_id;
                let defer = |n: u32| {
                    let (log, line) = (Arc::clone(&log), format!("{id} work {n}"));
                    deferred.defer(
                        async move {
                            tokio::time::sleep(Duration::from_millis(50)).await;
                            log.lock().unwrap().push(line);
                        }
                        .boxed(),
                    );
                };
                tokio::time::sleep(Duration::from_millis(20)).await;
                defer(1);
                tokio::time::sleep(Duration::from_millis(20)).await;
                defer(2);
                log.lock().unwrap().push(format!("{id} delivered"));
                Ok::<(), Error>(())
            }
        })
    }

    fn lines(log: &Log) -> Vec<String> {
        log.lock().unwrap().clone()
    }

    /// Lambda's part: the next invocation starts only once the runtime loop and the extension
    /// are both done with this one. `extension_first` decides who hears of the invocation first.
    async fn one_invocation<S>(
        runtime: &mut AfterInvocation<S>,
        settler: &Arc<InvocationSettler>,
        id: &str,
        extension_first: bool,
    ) where
        S: Service<LambdaInvocation, Response = (), Error = Error>,
        S::Future: Send + 'static,
    {
        let extension = {
            let (settler, id) = (Arc::clone(settler), id.to_owned());
            async move { settler.after_invocation(&id).await }
        };
        let runtime = runtime.ready().await.unwrap().call(invocation(id));
        if extension_first {
            let extension = tokio::spawn(extension);
            runtime.await.unwrap();
            extension.await.unwrap();
        } else {
            runtime.await.unwrap();
            extension.await;
        }
    }

    #[tokio::test(start_paused = true)]
    async fn work_deferred_in_an_invocation_finishes_before_the_next_one_starts() {
        let deferred = Arc::new(DeferredTasks::new());
        let log = Log::default();
        let (after, settler) = extension_handoff(Arc::clone(&deferred));
        let settler = Arc::new(settler);
        let mut runtime = AfterInvocationLayer::new(after).layer(handler(Arc::clone(&deferred), Arc::clone(&log)));
        for (n, extension_first) in [(1, true), (2, false), (3, true)] {
            let id = format!("req-{n}");
            one_invocation(&mut runtime, &settler, &id, extension_first).await;
            let seen = lines(&log);
            for line in [
                format!("{id} delivered"),
                format!("{id} work 1"),
                format!("{id} work 2"),
            ] {
                assert!(seen.contains(&line), "before invocation {} starts: {seen:?}", n + 1);
            }
        }
        assert_eq!(deferred.pending(), 0);
    }

    #[tokio::test(start_paused = true)]
    async fn the_response_is_delivered_before_the_deferred_work_ends() {
        let deferred = Arc::new(DeferredTasks::new());
        let log = Log::default();
        let (after, settler) = extension_handoff(Arc::clone(&deferred));
        let mut runtime = AfterInvocationLayer::new(after).layer(handler(Arc::clone(&deferred), Arc::clone(&log)));
        runtime.ready().await.unwrap().call(invocation("req-1")).await.unwrap();
        assert_eq!(
            lines(&log),
            ["req-1 delivered"],
            "the runtime loop does not wait for the work"
        );
        settler.after_invocation("req-1").await;
        assert_eq!(lines(&log).len(), 3);
    }

    #[tokio::test(start_paused = true)]
    async fn without_the_extension_the_runtime_loop_finishes_the_work_before_moving_on() {
        let deferred = Arc::new(DeferredTasks::new());
        let log = Log::default();
        let mut runtime = AfterInvocationLayer::new(AfterDelivery::SettleHere(Arc::clone(&deferred)))
            .layer(handler(Arc::clone(&deferred), Arc::clone(&log)));
        for id in ["req-1", "req-2"] {
            runtime.ready().await.unwrap().call(invocation(id)).await.unwrap();
            assert_eq!(lines(&log).iter().filter(|line| line.starts_with(id)).count(), 3);
        }
    }

    #[tokio::test(start_paused = true)]
    async fn work_deferred_between_invocations_is_not_lost() {
        let deferred = Arc::new(DeferredTasks::new());
        let log = Log::default();
        let (after, settler) = extension_handoff(Arc::clone(&deferred));
        let settler = Arc::new(settler);
        let mut runtime = AfterInvocationLayer::new(after).layer(handler(Arc::clone(&deferred), Arc::clone(&log)));
        // Deferred outside any invocation (during init, or by a detached task): the next
        // invocation's settling covers it.
        let late = Arc::clone(&log);
        deferred.defer(
            async move {
                tokio::time::sleep(Duration::from_millis(500)).await;
                late.lock().unwrap().push("between work".to_owned());
            }
            .boxed(),
        );
        one_invocation(&mut runtime, &settler, "req-1", true).await;
        assert!(lines(&log).contains(&"between work".to_owned()));
    }
}
