//! The batch engine: OpenAI-compatible batches run by Nimbus itself on queue workers, against any
//! configured model. Its roles, each holding only the ports it uses, are wired in `engine.rs`
//! ([`BatchEngine`]):
//!
//! - [`BatchApi`] (`api.rs`): create (validates parameters; the input is validated by a job),
//!   get, list, cancel; `/batch_inference` submit and poll. It mints every batch id.
//! - Jobs on the queue ([`JobMessage`], handed by [`BatchJobs`], the batch family's
//!   [`crate::jobs::JobRunner`], to their role): `validate` (the planner, `validate_job.rs`)
//!   streams the input file, plans chunks (byte ranges of the input object) and enqueues them;
//!   `chunk` (the chunk runner, `chunk_run.rs`) runs a chunk's lines, each read once
//!   (`lines/`: `BatchLine`, and the format's `LineKind`); `native` runs lines on providers'
//!   own batch APIs (`native/`).
//! - Progress is saved in segments (`segment.rs`, `progress.rs`): a segment's results go to the
//!   blob store first, then the chunk record and the batch's counters move together in one
//!   conditional write, so a redelivered or half-done chunk never counts, loses or duplicates a
//!   line and resumes after its last segment.
//! - The finalizer (`finalize.rs`) assembles the output and error files; [`BatchRecovery`] (a
//!   scheduled task) recovers what is stuck and expires what is overdue. At start-up the local
//!   server, the only worker of its data directory, takes over what a previous process left
//!   running (`takeover.rs`).

mod api;
mod chunk_run;
mod create_checks;
mod engine;
mod finalize;
pub mod input_validation;
mod lines;
mod live;
mod missing_input;
mod native;
mod progress;
mod stored;
pub(crate) use stored::ACTIVE_KIND as ACTIVE_BATCH_KIND;
mod jobs;
mod recovery;
mod segment;
mod slots;
#[cfg(feature = "embedded")]
mod takeover;
mod tensorzero_api;
mod tensorzero_pages;
mod tensorzero_poll;
mod validate_job;

pub use crate::jobs::JobMessage;
pub use api::BatchApi;
pub use api::{ListBatches, BATCH_PAGE};
pub use create_checks::check_create_request;
pub(crate) use engine::{batch_api, BatchDeps, BatchEngine, BatchModels};
pub use input_validation::BatchEndpoint;
pub(crate) use jobs::BatchJobs;
pub use recovery::{BatchRecovery, RecoveryReport};
pub(crate) use tensorzero_api::BatchInferenceError;
pub use tensorzero_api::{BatchInferenceCreated, BatchInferencePoll, PollQuery, PollStatus};

use crate::files::FilesError;
use crate::ports::{JobQueue, MetricUnit, MetricsSink, StorageError};
use std::collections::HashMap;
use std::time::Duration;

/// Why a batch call failed.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum BatchesError {
    #[error("No such {what} object: {}", crate::user_text::excerpt(.id))]
    NotFound {
        what: &'static str,
        id: String,
        param: &'static str,
    },
    #[error("{message}")]
    Invalid {
        message: String,
        param: Option<String>,
        code: Option<&'static str>,
    },
    #[error("{0}")]
    Conflict(String),
    #[error(transparent)]
    Files(#[from] FilesError),
    #[error(transparent)]
    Storage(#[from] StorageError),
    /// A provider's batch API could not be used for now (the step is tried again).
    #[error("provider batch API: {0}")]
    Provider(String),
}

impl BatchesError {
    pub(crate) fn invalid(message: impl Into<String>, param: &str, code: &'static str) -> Self {
        Self::Invalid {
            message: message.into(),
            param: Some(param.to_owned()),
            code: Some(code),
        }
    }
}

/// How often a chunk's run looks at its batch in Lambda (a cancel, expiry, a new live watcher).
pub(crate) const STATUS_POLL_INTERVAL: Duration = Duration::from_secs(60);

/// How the engine runs; the host (Lambda or local) picks the timings.
#[derive(Debug, Clone)]
pub struct BatchSettings {
    pub lines_per_chunk: u64,
    pub max_chunk_bytes: u64,
    /// Lines of one chunk in flight at once.
    pub line_concurrency: usize,
    /// A running chunk saves a segment once this many results are pending...
    pub checkpoint_lines: u64,
    /// ...at most once per this interval, and at least every 30 intervals.
    pub checkpoint_interval: Duration,
    /// How often a running chunk looks at its batch to notice a cancel (a checkpoint counts).
    pub status_poll_interval: Duration,
    /// Running chunks publish their unsaved counts every [`LIVE_PROGRESS_INTERVAL`] for every
    /// batch (the local server, where writes cost nothing); otherwise only while a client asks
    /// for live progress (`GET /v1/batches/{id}?live=true`, as `nimbus batch watch` does).
    pub live_progress_always: bool,
    /// The longest a worker runs one message (the Lambda timeout, less a margin).
    pub max_run: Duration,
    /// A chunk or validation not picked up for this long after it was enqueued is enqueued again.
    pub requeue_after: Duration,
    /// Accept completion windows in seconds (`"5s"`): tests of expiry only.
    pub allow_short_windows: bool,
    /// `[models.NAME] max_concurrency`: in-flight batch requests per model across all workers.
    pub model_limits: HashMap<String, u32>,
    /// How lines of providers marked `batch = "native"` are packed and polled.
    pub native: NativeSettings,
}

/// Provider-native batches: file limits and the polling schedule.
#[derive(Debug, Clone)]
pub struct NativeSettings {
    pub max_lines: u64,
    pub max_bytes: u64,
    /// The shortest gap between two polls of one provider batch.
    pub poll_interval: Duration,
    /// The longest gap polls back off to while nothing moves.
    pub poll_max_interval: Duration,
}

impl NativeSettings {
    pub fn from_config(batches: &crate::config::BatchesConfig) -> Self {
        Self {
            max_lines: batches.native_max_lines,
            max_bytes: batches.native_max_bytes,
            poll_interval: Duration::from_millis(batches.native_poll_interval_ms),
            poll_max_interval: Duration::from_millis(batches.native_poll_max_interval_ms),
        }
    }
}

impl BatchSettings {
    pub fn from_config(config: &crate::config::Config) -> Self {
        let batches = &config.batches;
        Self {
            lines_per_chunk: batches.lines_per_chunk,
            max_chunk_bytes: batches.max_chunk_bytes,
            line_concurrency: batches.line_concurrency,
            checkpoint_lines: batches.checkpoint_lines(),
            checkpoint_interval: Duration::from_millis(batches.checkpoint_interval_ms),
            // Each look is a read, so a chunk's run costs one read a minute however slow its
            // model: after a cancel, lines may start for up to a minute (the batch itself ends
            // within seconds; OpenAI's own cancel takes minutes). #26 E16.
            status_poll_interval: STATUS_POLL_INTERVAL,
            live_progress_always: false,
            max_run: Duration::from_secs(240),
            requeue_after: Duration::from_secs(1800),
            allow_short_windows: false,
            model_limits: config
                .models
                .iter()
                .filter_map(|(name, model)| model.max_concurrency.map(|limit| (name.clone(), limit)))
                .collect(),
            native: NativeSettings::from_config(batches),
        }
    }
}

/// Lines counted into a batch (`batch_lines`, by who ran them and how they ended).
pub(crate) fn count_lines(metrics: &dyn MetricsSink, runner: &'static str, completed: u64, failed: u64, staged: u64) {
    for (outcome, lines) in [("completed", completed), ("failed", failed), ("staged", staged)] {
        if lines > 0 {
            let dimensions = [("runner", runner), ("outcome", outcome)];
            metrics.record("batch_lines", MetricUnit::Count, lines as f64, &dimensions);
        }
    }
}

/// Put a job on the queue (the batch lane).
pub(crate) async fn enqueue(queue: &dyn JobQueue, job: &JobMessage) -> Result<(), StorageError> {
    queue.send(&job.to_body(), Duration::ZERO).await?;
    Ok(())
}
