//! Provider-native batches: lines of models whose provider is marked `batch = "native"` run on
//! the provider's own Batch API (at its batch discount) instead of Nimbus's workers.
//!
//! - Chunk runs stage such lines (`LineKind::native_request`) into per-group blobs instead of
//!   running them; they count in their chunk's `lines_done` and in the batch's `native.staged`.
//! - When no chunk will stage any more (all done, or the batch is cancelling or overdue), the
//!   finalizer closes staging and sends a `native` job instead of finishing the batch.
//! - The `native` job packs the staged lines into parts (`plan.rs`), uploads each part's file,
//!   creates its provider batch (`steps.rs`), and collects the results of parts whose provider
//!   batch ended (`collect.rs`); when every part is counted it finalizes the batch as usual.
//! - The scheduler's `batches` task polls submitted provider batches (`poll.rs`), never a client
//!   GET, with backoff, and moves `request_counts` as the provider reports progress.

mod collect;
mod deadline;
mod plan;
mod poll;
mod steps;
pub(crate) mod stored;

use super::finalize::Finalizer;
use super::lines::LineKinds;
use super::stored::{chunks_of, decode, edit, list_all, Edit, Loaded, StoredBatch, BATCH_KIND};
use super::{enqueue, BatchSettings, BatchesError, JobMessage};
use crate::auth::RevokedKeys;
use crate::inference::InferenceService;
use crate::openai::batches::BatchStatus;
use crate::ports::credential_sealer::open_json;
use crate::ports::{
    BatchId, BlobStore, Clock, CredentialSealer, IdSource, JobOutcome, JobQueue, MetricsSink, StateStore,
};
use crate::records::LeaseUntil;
use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;
use stored::{StoredPart, PART_KIND};
use tokio::time::Instant;

/// How long one worker works on a part before another may take it over.
const PART_LEASE_MS: i64 = 15 * 60 * 1000;
/// How long a cancelled or expired batch waits for its provider batches to end after asking
/// them to cancel; then lines without results are listed as never run.
const STOP_GRACE_MS: i64 = 15 * 60 * 1000;
/// When a step failed (the provider unreachable, storage), the job is tried again after this.
const STEP_RETRY: Duration = Duration::from_secs(15);

/// The code of a line not run because its batch's window ran out.
pub(crate) const EXPIRED_CODE: &str = "batch_expired";

const CANCELLED_MESSAGE: &str = "This request was not executed because the batch was cancelled.";
const EXPIRED_MESSAGE: &str = "This request could not be executed before the completion window expired.";

/// Why a batch stops sending work to providers, and what its unrun lines say.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Stopping {
    pub code: &'static str,
    pub message: &'static str,
    /// When it began stopping (ms).
    pub since_ms: i64,
}

/// The parts of a batch, in order.
pub(crate) async fn parts_of(state: &dyn StateStore, batch_id: &str) -> Result<Vec<Loaded<StoredPart>>, BatchesError> {
    let mut parts = Vec::new();
    for record in list_all(state, PART_KIND, batch_id).await? {
        parts.push(Loaded {
            body: decode::<StoredPart>(&record)?,
            record,
        });
    }
    Ok(parts)
}

/// Whether some part of the batch ended because the batch's window ran out.
pub(crate) async fn parts_expired(state: &dyn StateStore, batch_id: &str) -> Result<bool, BatchesError> {
    Ok(parts_of(state, batch_id)
        .await?
        .iter()
        .any(|part| part.body.end.as_ref().is_some_and(|end| end.code == EXPIRED_CODE)))
}

/// The finalizer found provider-native work open: close staging (no segment staging lines counts
/// after this) and hand the batch to the `native` job. Returns false if the batch moved meanwhile
/// (the caller reads it again).
pub(crate) async fn close_staging(
    state: &dyn StateStore,
    queue: &dyn JobQueue,
    batch: &mut Loaded<StoredBatch>,
) -> Result<bool, BatchesError> {
    if !batch.body.native.closed {
        batch.body.native.closed = true;
        match batch.save(state).await {
            Ok(()) => {}
            Err(crate::ports::StorageError::Conflict) => return Ok(false),
            Err(err) => return Err(err.into()),
        }
        let job = JobMessage::Native {
            batch_id: BatchId::new(batch.body.batch.id.clone()),
        };
        enqueue(queue, &job).await?;
    }
    Ok(true)
}

/// Runs lines on providers' own batch APIs: the `native` job (plan, upload, create, collect) and
/// the scheduler's polls of submitted provider batches.
pub(crate) struct NativeParts {
    pub(super) state: Arc<dyn StateStore>,
    pub(super) blobs: Arc<dyn BlobStore>,
    pub(super) queue: Arc<dyn JobQueue>,
    pub(super) clock: Arc<dyn Clock>,
    /// Ids of the error lines of lines a provider did not run.
    pub(super) ids: Arc<dyn IdSource>,
    pub(super) settings: Arc<BatchSettings>,
    /// Reaches the providers' batch APIs.
    pub(super) inference: Arc<InferenceService>,
    /// Opens a part's sealed dynamic credentials.
    pub(super) sealer: Arc<dyn CredentialSealer>,
    pub(super) revoked_keys: Arc<RevokedKeys>,
    pub(super) metrics: Arc<dyn MetricsSink>,
    pub(super) kinds: LineKinds,
    pub(super) finalizer: Arc<Finalizer>,
}

impl NativeParts {
    /// Whether (and why) `batch` stops: cancelling, or past its window.
    pub(crate) fn stopping(&self, batch: &StoredBatch) -> Option<Stopping> {
        let object = &batch.batch;
        if object.status == BatchStatus::Cancelling {
            return Some(Stopping {
                code: "batch_cancelled",
                message: CANCELLED_MESSAGE,
                since_ms: object.cancelling_at.unwrap_or_default().saturating_mul(1000),
            });
        }
        if batch.is_overdue(self.clock.as_ref()) {
            return Some(Stopping {
                code: EXPIRED_CODE,
                message: EXPIRED_MESSAGE,
                since_ms: object.expires_at.unwrap_or_default().saturating_mul(1000),
            });
        }
        None
    }

    /// [`Self::stopping`], or else whether the API key that created `batch` was revoked (then
    /// its provider batches stop as for a cancel, their unrun lines saying `api_key_revoked`).
    pub(crate) async fn stopping_now(&self, batch: &StoredBatch) -> Result<Option<Stopping>, BatchesError> {
        if let Some(stop) = self.stopping(batch) {
            return Ok(Some(stop));
        }
        let Some(key_id) = &batch.key_id else {
            return Ok(None);
        };
        Ok(self.revoked_keys.revoked_at(key_id).await?.map(|since_ms| Stopping {
            code: crate::batches::chunk_run::API_KEY_REVOKED_CODE,
            message: crate::batches::chunk_run::API_KEY_REVOKED_MESSAGE,
            since_ms,
        }))
    }

    /// The `native` job: plan the parts once, move every part on as far as it goes now, collect
    /// what ended, and finish the batch when every part is counted.
    pub(crate) async fn native_job(&self, batch_id: &str, deadline: Instant) -> Result<JobOutcome, BatchesError> {
        let Some(batch) = Loaded::<StoredBatch>::get(self.state.as_ref(), BATCH_KIND, batch_id).await? else {
            return Ok(JobOutcome::Done);
        };
        if batch.body.batch.status.is_terminal() || !batch.body.native.closed {
            return Ok(JobOutcome::Done);
        }
        let batch = if batch.body.native.parts.is_none() {
            let chunks: Vec<_> = chunks_of(self.state.as_ref(), batch_id)
                .await?
                .into_iter()
                .filter(|c| c.index < batch.body.chunks)
                .collect();
            let count = self.plan_parts(batch_id, &chunks).await?;
            let edited = edit(self.state.as_ref(), BATCH_KIND, batch_id, |b: &mut StoredBatch| {
                if b.native.parts.is_some() {
                    return Edit::Keep(());
                }
                b.native.parts = Some(count);
                Edit::Save(())
            })
            .await?;
            match edited {
                Some((_, batch)) => batch,
                None => return Ok(JobOutcome::Done),
            }
        } else {
            batch
        };
        let stopping = self.stopping_now(&batch.body).await?;
        let mut failed = false;
        for part in parts_of(self.state.as_ref(), batch_id).await? {
            if part.body.state == stored::PartState::Done {
                continue;
            }
            let index = part.body.index;
            if deadline::step_budget(deadline).is_none() {
                // Too little left of this invocation for a provider call: the rest goes on in
                // a fresh message at once (retrying this one would count toward its dead-letter
                // limit, and a large batch may need many invocations).
                enqueue(
                    self.queue.as_ref(),
                    &JobMessage::Native {
                        batch_id: BatchId::new(batch_id),
                    },
                )
                .await?;
                return Ok(JobOutcome::Done);
            }
            if let Err(err) = self.advance_part(&batch.body, part, stopping, deadline).await {
                tracing::warn!(batch = %batch_id, part = index, error = %err, "a provider batch step failed; it is tried again");
                failed = true;
            }
        }
        let all_counted = Loaded::<StoredBatch>::get(self.state.as_ref(), BATCH_KIND, batch_id)
            .await?
            .is_some_and(|b| !b.body.native.open());
        if all_counted {
            self.finalizer.finalize_quietly(batch_id).await;
            return Ok(JobOutcome::Done);
        }
        Ok(if failed {
            JobOutcome::Retry {
                retry_after: STEP_RETRY,
            }
        } else {
            JobOutcome::Done
        })
    }

    /// The dynamic credentials a part's provider calls are made with.
    pub(super) async fn part_credentials(&self, part: &StoredPart) -> Result<HashMap<String, String>, BatchesError> {
        match &part.sealed_credentials {
            None => Ok(HashMap::new()),
            Some(sealed) => Ok(open_json(self.sealer.as_ref(), &part.batch_id, sealed)
                .await
                .map_err(crate::ports::StorageError::from)?),
        }
    }

    /// Take part `part` for this worker; `None` if another holds it.
    pub(super) async fn lease_part(
        &self,
        part: Loaded<StoredPart>,
    ) -> Result<Option<Loaded<StoredPart>>, BatchesError> {
        let now_ms = self.clock.now_unix_ms();
        let mut part = part;
        if part.body.lease_until_ms.held_at(now_ms) {
            return Ok(None);
        }
        part.body.lease_until_ms = LeaseUntil::until(now_ms + PART_LEASE_MS);
        match part.save(self.state.as_ref()).await {
            Ok(()) => Ok(Some(part)),
            Err(crate::ports::StorageError::Conflict) => Ok(None),
            Err(err) => Err(err.into()),
        }
    }

    /// Let go of a part (whatever state it reached stays).
    pub(super) async fn release_part(&self, part: &mut Loaded<StoredPart>) -> Result<(), BatchesError> {
        part.body.lease_until_ms = LeaseUntil::NONE;
        part.save(self.state.as_ref()).await?;
        Ok(())
    }
}
