//! The poller Lambda, run by an EventBridge schedule (rate(1 minute)): one pass of the shared
//! poller (files sweep, batch recovery and expiry). Any event starts a pass; the pass's report is
//! the function's JSON result, and a failed pass is a failed invocation.

use lambda_runtime::{service_fn, Error, LambdaEvent};
use nimbus_shared::app::lambda;
use nimbus_shared::batches::{PollReport, Poller};

#[tokio::main]
async fn main() -> Result<(), Error> {
    lambda::prepare_function("nimbus-poller");
    let poller = lambda::poller().await.map_err(Error::from)?;
    let poller = &poller;
    lambda_runtime::run(service_fn(move |event| handle(poller, event))).await
}

async fn handle(poller: &Poller, _event: LambdaEvent<serde_json::Value>) -> Result<PollReport, Error> {
    poller.run_once().await.map_err(Error::from)
}
