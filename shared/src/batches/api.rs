//! The Batch API's calls: create, get, list, cancel.

use super::create_checks::{check_create_request, CheckedCreate};
use super::finalize::release_input;
use super::live::Live;
use super::stored::{active_marker, decode, edit, BatchFormat, Edit, LeaseUntil, Loaded, StoredBatch, BATCH_KIND};
use super::{enqueue, BatchSettings, BatchesError, JobMessage};
use crate::files::FilesError;
use crate::files::FilesService;
use crate::idempotency::IdempotencyKeys;
use crate::idempotency::{fingerprint, Reservation};
use crate::openai::batches::{BatchList, BatchObject, BatchStatus, CreateBatchRequest};
use crate::paging::{PageBounds, PageLimit};
use crate::ports::{
    BatchId, BlobStore, Clock, CredentialSealer, FileId, IdSource, InferenceStore, JobQueue, ProjectId, StateStore,
};
use crate::ports::{ListOrder, ListQuery, SortCursor, StorageError};
use crate::tensorzero::function_calls::FunctionChecks;
use crate::user_text::excerpt;
use std::sync::Arc;
use uuid::Uuid;

/// How many batches a page lists: 1 to 100, 20 by default.
pub const BATCH_PAGE: PageBounds = PageBounds::new(20, 100);

/// Listing parameters (`after`, `limit` within [`BATCH_PAGE`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ListBatches {
    pub after: Option<BatchId>,
    pub limit: PageLimit,
}

fn batch_not_found(id: &BatchId) -> BatchesError {
    BatchesError::NotFound {
        what: "Batch",
        id: id.to_string(),
        param: "id",
    }
}

/// The batch API: create, get, list and cancel batches (`/v1/batches`), submit and poll
/// `/batch_inference`. It mints every batch id and timestamp.
pub struct BatchApi {
    pub(super) state: Arc<dyn StateStore>,
    pub(super) blobs: Arc<dyn BlobStore>,
    pub(super) queue: Arc<dyn JobQueue>,
    pub(super) clock: Arc<dyn Clock>,
    pub(super) ids: Arc<dyn IdSource>,
    /// Input files: checked and held at create.
    pub(super) files: FilesService,
    pub(super) idempotency: IdempotencyKeys,
    /// Plans `/batch_inference` submissions.
    pub(super) functions: FunctionChecks,
    /// Seals a submission's dynamic credentials.
    pub(super) sealer: Arc<dyn CredentialSealer>,
    /// `/batch_inference` polls read the items' inference records.
    pub(super) records: Arc<dyn InferenceStore>,
    pub(super) live: Live,
    pub(super) settings: Arc<BatchSettings>,
}

impl BatchApi {
    /// Create a batch in `validating` and enqueue its validation. With an idempotency key, a retry
    /// returns the batch the first request created.
    pub async fn create_batch(
        &self,
        project: &ProjectId,
        request: CreateBatchRequest,
        idempotency_key: Option<&str>,
    ) -> Result<BatchObject, BatchesError> {
        self.create_batch_by(project, None, request, idempotency_key).await
    }

    /// [`Self::create_batch`] for the API key `key_id` (recorded: once it is revoked, the lines
    /// not run yet fail with `api_key_revoked`).
    pub async fn create_batch_by(
        &self,
        project: &ProjectId,
        key_id: Option<&str>,
        request: CreateBatchRequest,
        idempotency_key: Option<&str>,
    ) -> Result<BatchObject, BatchesError> {
        let CheckedCreate {
            endpoint,
            window_s,
            metadata,
        } = check_create_request(&request, self.settings.allow_short_windows)?;
        let input_file_id = FileId::new(&request.input_file_id);
        self.files
            .batch_input(project, &input_file_id)
            .await
            .map_err(input_file_error)?;

        let uuid = self.ids.new_uuid();
        let mut id = BatchId::new(format!("batch_{}", uuid.simple()));
        if let Some(key) = idempotency_key {
            let request_json = serde_json::to_string(&request).map_err(|e| StorageError::Invalid(e.to_string()))?;
            match self
                .idempotency
                .reserve(project, "batches", key, id.as_str(), &fingerprint(&[&request_json]))
                .await?
            {
                Reservation::New => {}
                Reservation::Existing {
                    same_request: false, ..
                } => {
                    return Err(BatchesError::invalid(
                        "This Idempotency-Key was used with other parameters.",
                        "Idempotency-Key",
                        "idempotency_key_reused",
                    ))
                }
                Reservation::Existing { resource_id, .. } => {
                    if let Some(existing) = self.state.get(BATCH_KIND, &resource_id).await? {
                        return Ok(decode::<StoredBatch>(&existing)?.batch);
                    }
                    // The first request reserved the id but did not get to create the batch.
                    id = BatchId::new(resource_id);
                }
            }
        }
        // The batch holds its input's bytes until it ends: deleting the file meanwhile removes it
        // from the files API, not from under the batch.
        let (_, input_blob_key) = self
            .files
            .hold_batch_input(project, &input_file_id, &id)
            .await
            .map_err(input_file_error)?;
        let created_ms = id_time_ms(id.as_str()).unwrap_or_else(|| self.clock.now_unix_ms());
        let created_at = created_ms.div_euclid(1000);
        let output_expires_after = request.output_expires_after.clone();
        let mut batch = BatchObject::validating(
            id.to_string(),
            endpoint.path(),
            request.input_file_id,
            request.completion_window,
            created_at,
            window_s,
        );
        batch.metadata = metadata;
        let stored = StoredBatch {
            batch: batch.clone(),
            project: project.clone(),
            input_blob_key,
            chunks: 0,
            chunks_done: 0,
            enqueued_at_ms: self.clock.now_unix_ms(),
            reserved_output_file_id: None,
            reserved_error_file_id: None,
            finalize_lease_until_ms: LeaseUntil::NONE,
            sealed: false,
            output_expires_after,
            format: BatchFormat::OpenAiJsonl,
            native: Default::default(),
            live_until_ms: 0,
            key_id: key_id.map(str::to_owned),
        };
        // The marker first: a batch the poller cannot see could never be recovered.
        let marker = active_marker(id.as_str(), project, created_ms);
        match self.state.create(&marker).await {
            Ok(()) | Err(StorageError::Conflict) => {}
            Err(err) => return Err(self.abandon_input(&stored, err).await),
        }
        let record = crate::records::new_record(
            BATCH_KIND.to_owned(),
            id.to_string(),
            project.to_string(),
            created_ms,
            None,
            &stored,
        )?;
        match self.state.create(&record).await {
            Ok(()) => {}
            Err(StorageError::Conflict) => {
                // A concurrent retry with the same key created it.
                if let Some(existing) = self.state.get(BATCH_KIND, id.as_str()).await? {
                    return Ok(decode::<StoredBatch>(&existing)?.batch);
                }
            }
            Err(err) => return Err(self.abandon_input(&stored, err).await),
        }
        // If this send is lost, the poller enqueues the validation again.
        if let Err(err) = enqueue(self.queue.as_ref(), &JobMessage::Validate { batch_id: id.clone() }).await {
            tracing::warn!(batch = %id, error = %err, "could not enqueue validation; the poller will");
        }
        Ok(batch)
    }

    /// A batch that could not be created lets go of its input; the error to answer with.
    async fn abandon_input(&self, stored: &StoredBatch, err: StorageError) -> BatchesError {
        if let Err(release) = release_input(&self.files, stored).await {
            tracing::warn!(batch = %stored.batch.id, file = %stored.batch.input_file_id, error = %release, "could not release the input of a batch not created");
        }
        err.into()
    }

    /// The project's batch record, or 404.
    pub(crate) async fn owned_batch(
        &self,
        project: &ProjectId,
        id: &BatchId,
    ) -> Result<Loaded<StoredBatch>, BatchesError> {
        match Loaded::<StoredBatch>::get_owned(self.state.as_ref(), BATCH_KIND, id.as_str(), project).await? {
            Some(loaded) => Ok(loaded),
            _ => Err(batch_not_found(id)),
        }
    }

    /// The batch; with `live` (or on the local server) its counts include what running chunks
    /// have not saved yet, and a `live` read keeps them publishing (see `live.rs`).
    pub async fn get_batch(&self, project: &ProjectId, id: &BatchId, live: bool) -> Result<BatchObject, BatchesError> {
        let loaded = self.owned_batch(project, id).await?;
        if live {
            self.live.keep_live(&loaded).await?;
        }
        let mut stored = loaded.body;
        if live || self.settings.live_progress_always {
            self.live.with_live_counts(&mut stored).await?;
        }
        Ok(stored.batch)
    }

    /// The project's batches, newest first.
    pub async fn list_batches(&self, project: &ProjectId, query: ListBatches) -> Result<BatchList, BatchesError> {
        let after = match &query.after {
            None => None,
            Some(id) => Some(
                id_time_ms(id.as_str())
                    .map(|created_at_ms| SortCursor {
                        created_at_ms,
                        id: id.to_string(),
                    })
                    .ok_or_else(|| {
                        BatchesError::invalid(
                            format!("Invalid 'after': '{}' is not a batch id.", excerpt(id.as_str())),
                            "after",
                            "invalid_value",
                        )
                    })?,
            ),
        };
        let page = self
            .state
            .list_by_owner(&ListQuery {
                kind: BATCH_KIND.to_owned(),
                owner: project.to_string(),
                after,
                limit: query.limit.get(),
                order: ListOrder::Desc,
            })
            .await?;
        let data = page
            .records
            .iter()
            .map(|record| decode::<StoredBatch>(record).map(|stored| stored.batch))
            .collect::<Result<Vec<_>, _>>()?;
        Ok(BatchList {
            object: "list",
            first_id: data.first().map(|b| b.id.clone()),
            last_id: data.last().map(|b| b.id.clone()),
            data,
            has_more: page.has_more,
        })
    }

    /// Start cancelling: `cancelling` at once; workers stop starting lines and the batch ends
    /// `cancelled` once they have saved what they finished.
    pub async fn cancel_batch(&self, project: &ProjectId, id: &BatchId) -> Result<BatchObject, BatchesError> {
        let now = self.clock.now_unix_s();
        let edited = edit(
            self.state.as_ref(),
            BATCH_KIND,
            id.as_str(),
            |stored: &mut StoredBatch| {
                if stored.project != *project || stored.format != BatchFormat::OpenAiJsonl {
                    return Edit::Keep(Err(batch_not_found(id)));
                }
                let status = stored.batch.status;
                match status {
                    BatchStatus::Cancelling | BatchStatus::Cancelled => Edit::Keep(Ok(false)),
                    BatchStatus::Completed | BatchStatus::Failed | BatchStatus::Expired => Edit::Keep(Err(
                        BatchesError::Conflict(format!("Cannot cancel a batch with status '{}'.", status.as_str())),
                    )),
                    BatchStatus::Validating | BatchStatus::InProgress | BatchStatus::Finalizing => {
                        stored.batch.status = BatchStatus::Cancelling;
                        stored.batch.cancelling_at = Some(now);
                        Edit::Save(Ok(true))
                    }
                }
            },
        )
        .await?;
        let Some((answer, loaded)) = edited else {
            return Err(batch_not_found(id));
        };
        if answer? {
            // A worker finishes it once nothing runs any more (the last run to stop does too, and
            // the poller if this message is lost): the result files are not written inside an
            // API request.
            let job = JobMessage::Finalize { batch_id: id.clone() };
            if let Err(err) = enqueue(self.queue.as_ref(), &job).await {
                tracing::warn!(batch = %id, error = %err, "cancel: finalizing left to the poller");
            }
        }
        Ok(loaded.body.batch)
    }
}

/// A missing input file is a 404 naming `input_file_id`.
fn input_file_error(err: FilesError) -> BatchesError {
    match err {
        FilesError::NotFound { what, id } => BatchesError::NotFound {
            what,
            id,
            param: "input_file_id",
        },
        other => other.into(),
    }
}

/// Milliseconds encoded in an id minted by this layer (`{prefix}{uuid-v7}`).
pub(crate) fn id_time_ms(id: &str) -> Option<i64> {
    let uuid = Uuid::parse_str(id.rsplit('_').next()?).ok()?;
    (uuid.get_version_num() == 7).then(|| crate::files::uuid_ms(&uuid))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_carry_their_creation_time() {
        let uuid = Uuid::now_v7();
        let id = format!("batch_{}", uuid.simple());
        assert_eq!(id_time_ms(&id), Some(crate::files::uuid_ms(&uuid)));
        assert_eq!(id_time_ms("batch_nope"), None);
        assert_eq!(id_time_ms(&format!("batch_{}", Uuid::new_v4().simple())), None);
    }
}
