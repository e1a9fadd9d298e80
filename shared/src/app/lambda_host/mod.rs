//! How the HTTP functions run in Lambda: one runtime loop that answers each invocation buffered
//! (the HTTP API) or streamed (the streaming REST API, a function URL), see [`response_mode`],
//! and that finishes the work handlers deferred after the response and before the environment
//! may freeze, see [`after_invocation`] and [`sent_body`].

mod after_invocation;
mod response_mode;
mod sent_body;

use crate::adapters::DeferredTasks;
use after_invocation::{AfterDelivery, AfterInvocationLayer, InvocationSettler};
use axum::Router;
use lambda_extension::{Extension, NextEvent};
use lambda_http::lambda_runtime::{layers::TracingLayer, Runtime};
use lambda_http::{Error, StreamAdapter};
pub(crate) use response_mode::is_function_url_host;
use response_mode::ByResponseMode;
use std::future::Future;
use std::sync::Arc;

/// The internal extension's name (unique within the execution environment).
const EXTENSION_NAME: &str = "nimbus-after-response";

/// Serve `router` until the execution environment shuts down; `deferred` is where its handlers
/// put work for after the response.
pub async fn serve(router: Router, deferred: Arc<DeferredTasks>) -> Result<(), Error> {
    let router = sent_body::hold_deferred_work_until_sent(router, Arc::clone(&deferred));
    // The adapters `lambda_http::run` and `run_with_streaming_response` put around a router
    // (`Adapter` is public, though left out of lambda_http's documentation).
    let handler = ByResponseMode::new(lambda_http::Adapter::from(router.clone()), StreamAdapter::from(router));
    let (notify_extension, settler) = after_invocation::extension_handoff(Arc::clone(&deferred));
    // Extensions register during init, before the runtime loop asks for its first event.
    let (after_delivery, extension) = match register_extension(settler).await {
        Ok(extension) => (notify_extension, Some(extension)),
        Err(err) => {
            tracing::warn!(
                error = %err,
                "could not register the internal extension: the runtime loop finishes deferred work itself, \
                 after each response and before asking for the next event"
            );
            (AfterDelivery::SettleHere(deferred), None)
        }
    };
    let runtime = Runtime::new(handler)
        .layer(AfterInvocationLayer::new(after_delivery))
        .layer(TracingLayer::new());
    match extension {
        Some(extension) => tokio::try_join!(runtime.run(), extension).map(|_| ()),
        None => runtime.run().await,
    }
}

/// Register the extension; the returned future runs its event loop.
async fn register_extension(settler: InvocationSettler) -> Result<impl Future<Output = Result<(), Error>>, Error> {
    let settler = Arc::new(settler);
    let registered = Extension::new()
        .with_extension_name(EXTENSION_NAME)
        // Internal extensions receive INVOKE events only.
        .with_events(&["INVOKE"])
        .with_events_processor(lambda_extension::service_fn(
            move |event: lambda_extension::LambdaEvent| {
                let settler = Arc::clone(&settler);
                async move {
                    if let NextEvent::Invoke(invoke) = event.next {
                        settler.after_invocation(&invoke.request_id).await;
                    }
                    Ok::<(), Error>(())
                }
            },
        ))
        .register()
        .await?;
    Ok(registered.run())
}
