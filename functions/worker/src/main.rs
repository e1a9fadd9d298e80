//! The batch worker Lambda: the SQS event source hands it job messages (`validate` a batch's input
//! file, run one `chunk` of its requests). Each record goes to the shared worker; the ones it could
//! not finish are reported as batch item failures, so SQS redelivers only those (the worker has
//! already set their visibility timeout for the retry).

use aws_lambda_events::event::sqs::{BatchItemFailure, SqsBatchResponse, SqsEvent};
use lambda_runtime::{service_fn, Error, LambdaEvent};
use nimbus_shared::app::lambda;
use nimbus_shared::batches::BatchWorker;
use std::time::{Duration, UNIX_EPOCH};

#[tokio::main]
async fn main() -> Result<(), Error> {
    lambda::prepare_function("nimbus-worker");
    let worker = lambda::batch_worker().await.map_err(Error::from)?;
    let worker = &worker;
    lambda_runtime::run(service_fn(move |event| handle(worker, event))).await
}

async fn handle(worker: &BatchWorker, event: LambdaEvent<SqsEvent>) -> Result<SqsBatchResponse, Error> {
    // The invocation's deadline (milliseconds since the epoch): the worker stops in time to save progress.
    let deadline = UNIX_EPOCH + Duration::from_millis(event.context.deadline);
    let mut response = SqsBatchResponse::default();
    for record in event.payload.records {
        let body = record.body.as_deref().unwrap_or_default();
        let receipt = record.receipt_handle.as_deref().unwrap_or_default();
        if !worker.handle_delivery(body, receipt, deadline).await {
            let mut failure = BatchItemFailure::default();
            // An empty identifier makes Lambda retry the whole batch: still a retry, never a loss.
            failure.item_identifier = record.message_id.unwrap_or_default();
            response.batch_item_failures.push(failure);
        }
    }
    Ok(response)
}
