//! The Batch API's calls: create, get, list, cancel.

use super::records::{active_marker, decode, edit, encode, BatchFormat, Edit, Loaded, StoredBatch, BATCH_KIND};
use super::{BatchEndpoint, BatchService, BatchesError, JobMessage};
use crate::files::{check_expires_after, ExpiryField, FilesError};
use crate::idempotency::{fingerprint, Reservation};
use crate::openai::batches::{BatchList, BatchObject, BatchStatus, CreateBatchRequest};
use crate::openai::metadata::{self, MetadataProblem, MAX_KEY_CHARS, MAX_PAIRS, MAX_VALUE_CHARS};
use crate::ports::{ListOrder, ListQuery, Record, SortCursor, StorageError};
use crate::user_text::excerpt;
use std::collections::BTreeMap;
use uuid::Uuid;

/// Completion windows: 24 hours (OpenAI's only one) up to 7 days.
const MIN_WINDOW_S: i64 = 24 * 3600;
const MAX_WINDOW_S: i64 = 7 * 24 * 3600;

/// Listing parameters (`after`, `limit` 1..=100).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct ListBatches {
    pub after: Option<String>,
    pub limit: usize,
}

fn batch_not_found(id: &str) -> BatchesError {
    BatchesError::NotFound {
        what: "Batch",
        id: id.to_owned(),
        param: "id",
    }
}

/// `"24h"`..`"168h"`; with `allow_seconds`, also `"<N>s"` (tests of expiry).
fn window_seconds(window: &str, allow_seconds: bool) -> Result<i64, BatchesError> {
    let invalid = || {
        BatchesError::invalid(
            format!(
                "Invalid 'completion_window': '{}'. Supported: '24h', or up to '168h'.",
                excerpt(window)
            ),
            "completion_window",
            "invalid_value",
        )
    };
    let parse = |digits: &str| digits.parse::<i64>().ok().filter(|n| *n > 0);
    if let Some(hours) = window.strip_suffix('h').and_then(parse) {
        let seconds = hours.saturating_mul(3600);
        return if (MIN_WINDOW_S..=MAX_WINDOW_S).contains(&seconds) {
            Ok(seconds)
        } else {
            Err(invalid())
        };
    }
    match window.strip_suffix('s').and_then(parse) {
        Some(seconds) if allow_seconds && seconds <= MAX_WINDOW_S => Ok(seconds),
        _ => Err(invalid()),
    }
}

/// The metadata as string pairs within OpenAI's limits (`openai::metadata`), all problems coded
/// `invalid_value`.
fn check_metadata(request: &CreateBatchRequest) -> Result<Option<BTreeMap<String, String>>, BatchesError> {
    let Some(pairs) = &request.metadata else {
        return Ok(None);
    };
    let invalid = |message: String| BatchesError::invalid(message, metadata::PARAM, "invalid_value");
    metadata::check_pair_count(pairs.len()).map_err(|problem| invalid(metadata_message(&problem)))?;
    let mut strings = BTreeMap::new();
    for (key, value) in pairs {
        let Some(value) = value.as_str() else {
            return Err(invalid(format!(
                "Invalid 'metadata': the value of '{}' must be a string.",
                excerpt(key)
            )));
        };
        metadata::check_pair(key, value).map_err(|problem| invalid(metadata_message(&problem)))?;
        strings.insert(key.clone(), value.to_owned());
    }
    Ok(Some(strings))
}

/// The Batch API's wording of a metadata problem.
fn metadata_message(problem: &MetadataProblem<'_>) -> String {
    match problem {
        MetadataProblem::TooManyPairs { count } => {
            format!("Invalid 'metadata': at most {MAX_PAIRS} pairs, got {count}.")
        }
        MetadataProblem::KeyTooLong { key, .. } => format!(
            "Invalid 'metadata': key '{}' is longer than {MAX_KEY_CHARS} characters.",
            excerpt(key)
        ),
        MetadataProblem::ValueTooLong { key, .. } => format!(
            "Invalid 'metadata': the value of '{}' is longer than {MAX_VALUE_CHARS} characters.",
            excerpt(key)
        ),
    }
}

impl BatchService {
    /// Create a batch in `validating` and enqueue its validation. With an idempotency key, a retry
    /// returns the batch the first request created.
    pub async fn create_batch(
        &self,
        project: &str,
        request: CreateBatchRequest,
        idempotency_key: Option<&str>,
    ) -> Result<BatchObject, BatchesError> {
        let endpoint = BatchEndpoint::parse(&request.endpoint).ok_or_else(|| {
            BatchesError::invalid(
                format!(
                    "Invalid 'endpoint': '{}'. Supported: '/v1/chat/completions', '/v1/embeddings'.",
                    excerpt(&request.endpoint)
                ),
                "endpoint",
                "invalid_value",
            )
        })?;
        let window_s = window_seconds(&request.completion_window, self.settings.allow_short_windows)?;
        let metadata = check_metadata(&request)?;
        if let Some(policy) = &request.output_expires_after {
            // The files' own rule, with the batch's parameter names and code.
            check_expires_after(policy, ExpiryField::BatchOutputExpiresAfter).map_err(|err| match err {
                FilesError::Invalid { message, param } => BatchesError::Invalid {
                    message,
                    param,
                    code: Some("invalid_value"),
                },
                other => other.into(),
            })?;
        }
        self.files
            .batch_input(project, &request.input_file_id)
            .await
            .map_err(input_file_error)?;

        let uuid = self.ids.new_uuid();
        let mut id = format!("batch_{}", uuid.simple());
        if let Some(key) = idempotency_key {
            let request_json = serde_json::to_string(&request).map_err(|e| StorageError::Invalid(e.to_string()))?;
            match self
                .idempotency
                .reserve(project, "batches", key, &id, &fingerprint(&[&request_json]))
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
                    id = resource_id;
                }
            }
        }
        // The batch holds its input's bytes until it ends: deleting the file meanwhile removes it
        // from the files API, not from under the batch.
        let (_, input_blob_key) = self
            .files
            .hold_batch_input(project, &request.input_file_id, &id)
            .await
            .map_err(input_file_error)?;
        let created_ms = id_time_ms(&id).unwrap_or_else(|| self.now_ms());
        let created_at = created_ms.div_euclid(1000);
        let output_expires_after = request.output_expires_after.clone();
        let mut batch = BatchObject::validating(
            id.clone(),
            endpoint.path(),
            request.input_file_id,
            request.completion_window,
            created_at,
            window_s,
        );
        batch.metadata = metadata;
        let stored = StoredBatch {
            batch: batch.clone(),
            project: project.to_owned(),
            input_blob_key,
            chunks: 0,
            chunks_done: 0,
            enqueued_at_ms: self.now_ms(),
            reserved_output_file_id: None,
            reserved_error_file_id: None,
            finalize_lease_until_ms: 0,
            sealed: false,
            output_expires_after,
            format: BatchFormat::OpenAiJsonl,
            native: Default::default(),
        };
        // The marker first: a batch the poller cannot see could never be recovered.
        let marker = active_marker(&id, project, created_ms);
        match self.state.create(&marker).await {
            Ok(()) | Err(StorageError::Conflict) => {}
            Err(err) => return Err(self.abandon_input(&stored, err).await),
        }
        let record = Record {
            kind: BATCH_KIND.to_owned(),
            id: id.clone(),
            owner: project.to_owned(),
            created_at_ms: created_ms,
            version: 1,
            expires_at: None,
            body: encode(&stored)?,
        };
        match self.state.create(&record).await {
            Ok(()) => {}
            Err(StorageError::Conflict) => {
                // A concurrent retry with the same key created it.
                if let Some(existing) = self.state.get(BATCH_KIND, &id).await? {
                    return Ok(decode::<StoredBatch>(&existing)?.batch);
                }
            }
            Err(err) => return Err(self.abandon_input(&stored, err).await),
        }
        // If this send is lost, the poller enqueues the validation again.
        if let Err(err) = self.enqueue(&JobMessage::Validate { batch_id: id.clone() }).await {
            tracing::warn!(batch = %id, error = %err, "could not enqueue validation; the poller will");
        }
        Ok(batch)
    }

    /// A batch that could not be created lets go of its input; the error to answer with.
    async fn abandon_input(&self, stored: &StoredBatch, err: StorageError) -> BatchesError {
        if let Err(release) = self.release_input(stored).await {
            tracing::warn!(batch = %stored.batch.id, file = %stored.batch.input_file_id, error = %release, "could not release the input of a batch not created");
        }
        err.into()
    }

    /// The batch no longer reads its input: its hold on the bytes goes, and the bytes with it if
    /// the file was deleted meanwhile. Idempotent.
    pub(crate) async fn release_input(&self, stored: &StoredBatch) -> Result<(), BatchesError> {
        if !matches!(stored.format, BatchFormat::OpenAiJsonl) {
            // A `/batch_inference` input is the batch's own object, kept: polls read its ids.
            return Ok(());
        }
        self.files
            .release_hold(&stored.input_blob_key, &stored.batch.input_file_id, &stored.batch.id)
            .await?;
        Ok(())
    }

    /// The project's batch record, or 404.
    pub(crate) async fn owned_batch(&self, project: &str, id: &str) -> Result<Loaded<StoredBatch>, BatchesError> {
        match Loaded::<StoredBatch>::get(self.state.as_ref(), BATCH_KIND, id).await? {
            Some(loaded) if loaded.record.owner == project => Ok(loaded),
            _ => Err(batch_not_found(id)),
        }
    }

    pub async fn get_batch(&self, project: &str, id: &str) -> Result<BatchObject, BatchesError> {
        Ok(self.owned_batch(project, id).await?.body.batch)
    }

    /// The project's batches, newest first.
    pub async fn list_batches(&self, project: &str, query: ListBatches) -> Result<BatchList, BatchesError> {
        if !(1..=100).contains(&query.limit) {
            return Err(BatchesError::invalid(
                format!("Invalid 'limit': {}. Expected a value between 1 and 100.", query.limit),
                "limit",
                "invalid_value",
            ));
        }
        let after = match &query.after {
            None => None,
            Some(id) => Some(
                id_time_ms(id)
                    .map(|created_at_ms| SortCursor {
                        created_at_ms,
                        id: id.clone(),
                    })
                    .ok_or_else(|| {
                        BatchesError::invalid(
                            format!("Invalid 'after': '{}' is not a batch id.", excerpt(id)),
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
                owner: project.to_owned(),
                after,
                limit: query.limit,
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
    pub async fn cancel_batch(&self, project: &str, id: &str) -> Result<BatchObject, BatchesError> {
        let now = self.now_s();
        let edited = edit(self.state.as_ref(), BATCH_KIND, id, |stored: &mut StoredBatch| {
            if stored.project != project || stored.format != BatchFormat::OpenAiJsonl {
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
        })
        .await?;
        let Some((answer, loaded)) = edited else {
            return Err(batch_not_found(id));
        };
        if answer? {
            // A worker finishes it once nothing runs any more (the last run to stop does too, and
            // the poller if this message is lost): the result files are not written inside an
            // API request.
            let job = JobMessage::Finalize {
                batch_id: id.to_owned(),
            };
            if let Err(err) = self.enqueue(&job).await {
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
    use serde_json::json;

    #[test]
    fn completion_windows_are_24h_to_7_days_and_seconds_only_for_tests() {
        assert_eq!(window_seconds("24h", false).unwrap(), 86_400);
        assert_eq!(window_seconds("72h", false).unwrap(), 3 * 86_400);
        assert_eq!(window_seconds("168h", false).unwrap(), 7 * 86_400);
        for bad in ["23h", "169h", "0h", "-24h", "24", "1d", "", "5s", "h"] {
            let err = window_seconds(bad, false).unwrap_err();
            assert!(
                matches!(&err, BatchesError::Invalid { param: Some(p), .. } if p == "completion_window"),
                "{bad}: {err:?}"
            );
        }
        assert_eq!(window_seconds("5s", true).unwrap(), 5);
    }

    fn request(metadata: Vec<(String, String)>) -> CreateBatchRequest {
        CreateBatchRequest {
            input_file_id: "file-x".into(),
            endpoint: "/v1/chat/completions".into(),
            completion_window: "24h".into(),
            metadata: Some(metadata.into_iter().map(|(k, v)| (k, json!(v))).collect()),
            output_expires_after: None,
        }
    }

    #[test]
    fn metadata_limits_name_the_param() {
        let ok: Vec<_> = (0..16).map(|i| (format!("k{i}"), "v".repeat(512))).collect();
        assert!(check_metadata(&request(ok)).is_ok());
        let too_many: Vec<_> = (0..17).map(|i| (format!("k{i}"), "v".into())).collect();
        let long_key = vec![("k".repeat(65), "v".into())];
        let long_value = vec![("k".into(), "v".repeat(513))];
        let mut not_a_string = request(vec![]);
        not_a_string.metadata = Some([("k".to_owned(), json!(1))].into_iter().collect());
        for bad in [request(too_many), request(long_key), request(long_value), not_a_string] {
            let err = check_metadata(&bad).unwrap_err();
            assert!(matches!(&err, BatchesError::Invalid { param: Some(p), .. } if p == "metadata"));
        }
    }

    #[test]
    fn metadata_messages_keep_the_batch_wording() {
        let message = |pairs: Vec<(String, String)>| match check_metadata(&request(pairs)) {
            Err(BatchesError::Invalid { message, code, .. }) => {
                assert_eq!(code, Some("invalid_value"));
                message
            }
            other => panic!("expected a rejection, got {other:?}"),
        };
        let too_many: Vec<_> = (0..17).map(|i| (format!("k{i}"), "v".into())).collect();
        assert_eq!(message(too_many), "Invalid 'metadata': at most 16 pairs, got 17.");
        assert_eq!(
            message(vec![("k".repeat(65), "v".repeat(513))]),
            format!(
                "Invalid 'metadata': key '{}' is longer than 64 characters.",
                excerpt(&"k".repeat(65))
            )
        );
        assert_eq!(
            message(vec![("key".into(), "v".repeat(513))]),
            "Invalid 'metadata': the value of 'key' is longer than 512 characters."
        );
    }

    #[test]
    fn ids_carry_their_creation_time() {
        let uuid = Uuid::now_v7();
        let id = format!("batch_{}", uuid.simple());
        assert_eq!(id_time_ms(&id), Some(crate::files::uuid_ms(&uuid)));
        assert_eq!(id_time_ms("batch_nope"), None);
        assert_eq!(id_time_ms(&format!("batch_{}", Uuid::new_v4().simple())), None);
    }
}
