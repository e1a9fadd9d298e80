//! Async inference (Baseten's `/async_predict`): a request is accepted at once and queued by
//! priority, a worker runs it with retries, its output is saved, and the result is POSTed to the
//! caller's webhook, signed. Unlike Baseten, the output stays retrievable for the retention period
//! whatever became of the webhook.
//!
//! - [`AsyncService`] (`service.rs`): submit, get, list, cancel. It mints every id and timestamp.
//! - [`AsyncRunner`] (`runner.rs`): the worker's `async_run` and `async_deliver` jobs.
//! - [`AsyncDueWork`] (`due_work.rs`): the scheduler's pass over requests whose deadline came
//!   (expiry in the queue, a worker gone, a webhook retry due).
//! - [`AsyncService::take_over`] (`takeover.rs`): the local server's start, queueing again what a
//!   previous process left queued or running (its in-process queue is gone).
//! - One record per request (`records.rs`); the output in the blob store under
//!   `async/{project}/{request_id}/output.json`, written before any webhook is sent.
//!
//! Life of a request: `QUEUED` → `IN_PROGRESS` (a lease while a worker runs it; between retries
//! too) → `SUCCEEDED` | `FAILED` | `EXPIRED` | `CANCELED`, and `WEBHOOK_FAILED` when it succeeded
//! but its webhook never got a 2xx. A worker that dies mid-run leaves an open attempt: the next
//! run finds the saved output (if it got that far) and never calls the model again.

mod awaiting_secret;
mod classify;
mod deliver;
mod due_work;
mod error;
mod execute;
mod lifecycle;
mod runner;
mod service;
mod stored;
mod submit;
mod takeover;
mod wire;

pub use due_work::AsyncDueWork;
pub use error::AsyncError;
pub use execute::AsyncExecutor;
pub use runner::AsyncRunner;
pub use service::{AsyncDeps, AsyncService, AsyncSettings, CancelOutcome, ListAsyncRequests, ASYNC_PAGE};
pub use stored::{AsyncStatus, WebhookStatus};
pub use submit::{AsyncEndpoint, AsyncPredictDoc, RetryConfig};
pub use wire::{AsyncRequestPage, AsyncRequestView};

/// The scheduler lane of async requests' due work.
pub const DUE_LANE: &str = "async_request";
