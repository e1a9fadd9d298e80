//! The worker Lambda: SQS event sources (the jobs queue and the three priority queues) hand it
//! job messages, each run by the runner of its family (batch `validate`/`chunk`/`finalize`, async
//! requests, webhook deliveries; see `app::job_dispatcher`). The records it could not finish are
//! reported as batch item failures, so SQS redelivers only those (their visibility timeout is
//! already set for the retry, on the queue each came from).

use aws_lambda_events::event::sqs::{BatchItemFailure, SqsBatchResponse, SqsEvent};
use lambda_runtime::{service_fn, Error, LambdaEvent};
use nimbus_shared::app::lambda;
use nimbus_shared::jobs::JobDispatcher;
use std::time::{Duration, UNIX_EPOCH};

#[tokio::main]
async fn main() -> Result<(), Error> {
    lambda::prepare_function("nimbus-worker");
    let worker = lambda::worker().await.map_err(Error::from)?;
    let worker = &worker;
    lambda_runtime::run(service_fn(move |event| handle(worker, event))).await
}

async fn handle(worker: &JobDispatcher, event: LambdaEvent<SqsEvent>) -> Result<SqsBatchResponse, Error> {
    // The invocation's deadline (milliseconds since the epoch): the worker stops in time to save progress.
    let deadline = UNIX_EPOCH + Duration::from_millis(event.context.deadline);
    let mut response = SqsBatchResponse::default();
    for record in event.payload.records {
        let body = record.body.as_deref().unwrap_or_default();
        let attribute = |name: &str| record.attributes.get(name).map(String::as_str);
        worker.record_pickup(
            body,
            attribute("ApproximateReceiveCount")
                .and_then(|v| v.parse().ok())
                .unwrap_or(1),
            attribute("SentTimestamp").and_then(|v| v.parse().ok()),
        );
        let receipt = lambda::sqs_record_receipt(
            record.event_source_arn.as_deref(),
            record.receipt_handle.as_deref().unwrap_or_default(),
        );
        if !worker.handle_delivery(body, &receipt, deadline).await {
            let mut failure = BatchItemFailure::default();
            // An empty identifier makes Lambda retry the whole batch: still a retry, never a loss.
            failure.item_identifier = record.message_id.unwrap_or_default();
            response.batch_item_failures.push(failure);
        }
    }
    Ok(response)
}
