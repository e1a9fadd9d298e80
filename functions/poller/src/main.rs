//! The poller Lambda, run by an EventBridge schedule (rate(1 minute)): one pass of the scheduler
//! (every registered task: files sweep, batch recovery and expiry, …; see `app::scheduler`). Any
//! event starts a pass; the pass's report is the function's JSON result. A task that fails is
//! counted in the report's `errors` (and logged) while the others still run; the next pass
//! retries it. A task with more due work than one round (1,000 async requests, 500 webhook
//! deliveries) reads round after round until done or the pass's deadline
//! (`lambda::poller_pass_deadline`).

use lambda_runtime::{service_fn, Error, LambdaEvent};
use nimbus_shared::app::lambda;
use nimbus_shared::scheduler::{Scheduler, SchedulerReport};

#[tokio::main]
async fn main() -> Result<(), Error> {
    lambda::prepare_function("nimbus-poller");
    let scheduler = lambda::scheduler().await.map_err(Error::from)?;
    let scheduler = &scheduler;
    lambda_runtime::run(service_fn(move |event| handle(scheduler, event))).await
}

async fn handle(scheduler: &Scheduler, event: LambdaEvent<serde_json::Value>) -> Result<SchedulerReport, Error> {
    let deadline = lambda::poller_pass_deadline(event.context.deadline());
    Ok(scheduler.run_once_until(deadline).await)
}
