//! Async inference (Baseten's `/async_predict`): a request is accepted at once and queued by
//! priority, a worker runs it with retries, its output is saved, and the result is POSTed to the
//! caller's webhook, signed. Unlike Baseten, the output stays retrievable for the retention period
//! whatever became of the webhook.
//!
//! Each role holds only what it uses:
//! - [`AsyncApi`] (`api.rs`): submit, get, list, cancel. It mints every id and timestamp, and
//!   checks a submission with a [`SubmissionCheck`] (`check.rs`: the configuration alone; the
//!   API calls no model).
//! - [`AsyncJobs`] (`jobs.rs`, `deliver.rs`): the worker's `async_run` and `async_deliver`
//!   jobs; it alone holds the [`EndpointCalls`] (`endpoint_calls.rs`: the model layers).
//! - [`AsyncDueWork`] (`due_work.rs`): the scheduler's pass over requests whose deadline came
//!   (expiry in the queue, a worker gone, a webhook retry due).
//! - [`AsyncRequests::take_over`] (`takeover.rs`): the local server's start, queueing again what a
//!   previous process left queued or running (its in-process queue is gone).
//! - [`AsyncRequests`] (`requests.rs`, `lifecycle.rs`): what the roles share: the records, the
//!   due entries, the models' slots and the saved outputs.
//! - One record per request (`stored.rs`); the output in the blob store under
//!   `async/{project}/{request_id}/output.json`, written before any webhook is sent.
//!
//! Life of a request: `QUEUED` → `IN_PROGRESS` (a lease while a worker runs it; between retries
//! too) → `SUCCEEDED` | `FAILED` | `EXPIRED` | `CANCELED`, and `WEBHOOK_FAILED` when it succeeded
//! but its webhook never got a 2xx. A worker that dies mid-run leaves an open attempt: the next
//! run finds the saved output (if it got that far) and never calls the model again.

mod api;
mod awaiting_secret;
mod check;
mod classify;
mod deliver;
mod due_work;
mod endpoint_calls;
mod error;
mod jobs;
mod lifecycle;
mod requests;
mod stored;
mod submit;
mod takeover;
mod wire;

pub use api::{AsyncApi, ListAsyncRequests};
pub(crate) use api::{CancelOutcome, ASYNC_PAGE};
pub use check::SubmissionCheck;
pub use due_work::AsyncDueWork;
pub use endpoint_calls::EndpointCalls;
pub use error::AsyncError;
pub use jobs::AsyncJobs;
pub use requests::{AsyncDeps, AsyncRequests, AsyncSettings};
pub(crate) use stored::AsyncStatus;
pub use stored::WebhookStatus;
pub(crate) use submit::AsyncPredictDoc;
pub use submit::RetryConfig;
pub(crate) use wire::AsyncRequestPage;
pub use wire::AsyncRequestView;

/// The scheduler lane of async requests' due work.
pub(crate) const DUE_LANE: &str = "async_request";
