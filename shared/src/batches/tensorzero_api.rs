//! `/batch_inference` (TensorZero's batch API) on the engine: submit checks every item and
//! queues the batch like any other; polls answer `pending`, `failed` or `completed` with each
//! inference rebuilt from its stored record, in input order.
//!
//! Paging (a Nimbus extension): `limit` items from after the item `after`; the reply then says
//! `has_more` and, when there is more, `next_after`. Failed items are left out of `inferences`, as
//! TensorZero leaves them out; `include_failures` lists them in `failed_inferences`.

use super::lines::tensorzero::ItemResult;
use super::records::{active_marker, encode, BatchFormat, Loaded, StoredBatch, TensorZeroPlan, BATCH_KIND};
use super::{BatchService, BatchesError, JobMessage};
use crate::functions::batch_request::{item_ids, BatchInferenceRequest, ItemIds};
use crate::functions::inference::{FunctionError, InferenceReply};
use crate::openai::batches::{BatchObject, BatchStatus};
use crate::ports::credential_sealer::seal_json;
use crate::ports::{Record, StorageError};
use bytes::Bytes;
use futures::{StreamExt, TryStreamExt};
use serde::Serialize;
use std::collections::HashMap;
use uuid::Uuid;

/// How long a `/batch_inference` batch may run before what is left expires.
const WINDOW_S: i64 = 24 * 3600;
/// Records read at once when a poll rebuilds inferences.
const READ_CONCURRENCY: usize = 32;

/// Why a `/batch_inference` call failed.
#[derive(Debug, thiserror::Error)]
pub enum BatchInferenceError {
    /// The request, as the function layer judged it (bad input, unknown function or variant).
    #[error(transparent)]
    Function(#[from] FunctionError),
    #[error("Batch not found: {0}")]
    BatchNotFound(Uuid),
    #[error("Inference {inference_id} is not part of batch {batch_id}")]
    InferenceNotFound { batch_id: Uuid, inference_id: Uuid },
    #[error(transparent)]
    Storage(#[from] StorageError),
}

impl From<BatchesError> for BatchInferenceError {
    fn from(err: BatchesError) -> Self {
        match err {
            BatchesError::Storage(storage) => Self::Storage(storage),
            other => Self::Storage(StorageError::Backend(other.to_string())),
        }
    }
}

/// `POST /batch_inference`'s reply.
#[derive(Debug, Clone, PartialEq, Serialize, utoipa::ToSchema)]
pub struct BatchInferenceCreated {
    pub batch_id: Uuid,
    pub inference_ids: Vec<Uuid>,
    pub episode_ids: Vec<Uuid>,
}

/// Which results a poll returns.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct PollQuery {
    /// Only this item.
    pub inference_id: Option<Uuid>,
    /// Items after this one (in input order).
    pub after: Option<Uuid>,
    /// At most this many items; all when `None`.
    pub limit: Option<usize>,
    /// List failed items in `failed_inferences`.
    pub include_failures: bool,
}

/// A poll's status, as TensorZero names it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, utoipa::ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum PollStatus {
    Pending,
    Failed,
    Completed,
}

/// A poll's reply: `{"status": "pending"}`, `{"status": "failed"}`, or `completed` with
/// `batch_id` and `inferences`; the extensions appear only when asked for.
#[derive(Debug, Clone, PartialEq, Serialize, utoipa::ToSchema)]
pub struct BatchInferencePoll {
    pub status: PollStatus,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub batch_id: Option<Uuid>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub inferences: Option<Vec<InferenceReply>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub failed_inferences: Option<Vec<ItemResult>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub has_more: Option<bool>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub next_after: Option<Uuid>,
}

impl BatchInferencePoll {
    fn bare(status: PollStatus) -> Self {
        Self {
            status,
            batch_id: None,
            inferences: None,
            failed_inferences: None,
            has_more: None,
            next_after: None,
        }
    }
}

/// Where a project's `/batch_inference` batches are listed (apart from its `/v1/batches`).
fn owner_of(project: &str) -> String {
    format!("{project}/batch_inference")
}

impl BatchService {
    /// Check every item, store them as the batch's input, and queue the batch.
    pub async fn submit_batch_inference(
        &self,
        project: &str,
        request: BatchInferenceRequest,
    ) -> Result<BatchInferenceCreated, BatchInferenceError> {
        let planned = self.functions.plan_batch(request)?;
        let batch_uuid = self.ids.new_uuid();
        let batch_id = batch_uuid.to_string();
        let mut input = Vec::new();
        for item in &planned.items {
            input.extend_from_slice(item.line.as_bytes());
            input.push(b'\n');
        }
        let input_blob_key = format!("batch_inference/{project}/{batch_id}/items.jsonl");
        self.blobs.put(&input_blob_key, Bytes::from(input)).await?;
        // Kept until the batch ends, so kept sealed: never at rest in the clear.
        let sealed_credentials = if planned.credentials.is_empty() {
            None
        } else {
            Some(
                seal_json(self.sealer.as_ref(), &batch_id, &planned.credentials)
                    .await
                    .map_err(StorageError::from)?,
            )
        };
        let created_ms = self.now_ms();
        let created_at = created_ms.div_euclid(1000);
        let total = planned.items.len() as u64;
        let stored = StoredBatch {
            batch: {
                let mut batch = BatchObject::validating(
                    batch_id.clone(),
                    "/batch_inference",
                    String::new(),
                    "24h".to_owned(),
                    created_at,
                    WINDOW_S,
                );
                batch.request_counts.total = total;
                batch
            },
            project: project.to_owned(),
            input_blob_key,
            chunks: 0,
            chunks_done: 0,
            enqueued_at_ms: created_ms,
            reserved_output_file_id: None,
            reserved_error_file_id: None,
            finalize_lease_until_ms: 0,
            sealed: false,
            output_expires_after: None,
            format: BatchFormat::TensorZero(TensorZeroPlan {
                function_name: planned.function_name.clone(),
                variant_name: planned.variant.name.clone(),
                credentials: HashMap::new(),
                sealed_credentials,
            }),
            native: Default::default(),
            live_until_ms: 0,
        };
        // The marker first: a batch the poller cannot see could never be recovered.
        let marker = active_marker(&batch_id, project, created_ms);
        self.state.create(&marker).await?;
        let record = Record {
            kind: BATCH_KIND.to_owned(),
            id: batch_id.clone(),
            owner: owner_of(project),
            created_at_ms: created_ms,
            version: 1,
            expires_at: None,
            body: encode(&stored)?,
        };
        self.state.create(&record).await?;
        // If this send is lost, the poller enqueues the validation again.
        if let Err(err) = self
            .enqueue(&JobMessage::Validate {
                batch_id: batch_id.clone(),
            })
            .await
        {
            tracing::warn!(batch = %batch_id, error = %err, "could not enqueue the batch; the poller will");
        }
        Ok(BatchInferenceCreated {
            batch_id: batch_uuid,
            inference_ids: planned.items.iter().map(|i| i.inference_id).collect(),
            episode_ids: planned.items.iter().map(|i| i.episode_id).collect(),
        })
    }

    /// Poll a batch (or one of its items).
    pub async fn poll_batch_inference(
        &self,
        project: &str,
        batch_id: Uuid,
        query: PollQuery,
    ) -> Result<BatchInferencePoll, BatchInferenceError> {
        let not_found = || BatchInferenceError::BatchNotFound(batch_id);
        let Some(loaded) = Loaded::<StoredBatch>::get(self.state.as_ref(), BATCH_KIND, &batch_id.to_string()).await?
        else {
            return Err(not_found());
        };
        let stored = loaded.body;
        if !matches!(stored.format, BatchFormat::TensorZero(_)) {
            return Err(not_found());
        }
        if stored.project != project || loaded.record.owner != owner_of(project) {
            return Err(not_found());
        }
        let status = stored.batch.status;
        let ended = matches!(
            status,
            BatchStatus::Completed | BatchStatus::Failed | BatchStatus::Expired | BatchStatus::Cancelled
        );
        if !ended && query.inference_id.is_none() {
            return Ok(BatchInferencePoll::bare(PollStatus::Pending));
        }
        // The item list: every id, in input order.
        let items = self.batch_items(&stored).await?;
        if let Some(inference_id) = query.inference_id {
            if !items.iter().any(|item| item.inference_id == inference_id) {
                return Err(BatchInferenceError::InferenceNotFound { batch_id, inference_id });
            }
        }
        if !ended {
            return Ok(BatchInferencePoll::bare(PollStatus::Pending));
        }
        let failures = self.failures(&stored).await?;
        let window = page(&items, query)?;
        let has_more = window.end < items.len();
        let chosen = &items[window.clone()];
        let ok_ids: Vec<Uuid> = chosen
            .iter()
            .filter(|item| !failures.contains_key(&item.inference_id))
            .map(|item| item.inference_id)
            .collect();
        let inferences = self.replies(project, &ok_ids).await?;
        let failed: Vec<ItemResult> = chosen
            .iter()
            .filter_map(|item| failures.get(&item.inference_id).cloned())
            .collect();
        let found = Found {
            inferences,
            failed,
            has_more,
            last: chosen.last().map(|item| item.inference_id),
        };
        Ok(ended_reply(
            batch_id,
            status,
            stored.batch.request_counts.completed,
            query,
            found,
        ))
    }

    /// The batch's items, in input order, from its stored input.
    async fn batch_items(&self, stored: &StoredBatch) -> Result<Vec<ItemIds>, BatchInferenceError> {
        let bytes = self.blobs.get(&stored.input_blob_key).await?;
        Ok(bytes
            .split(|b| *b == b'\n')
            .filter(|line| !line.trim_ascii().is_empty())
            .filter_map(item_ids)
            .collect())
    }

    /// What failed or never ran, by inference id (empty when nothing did).
    async fn failures(&self, stored: &StoredBatch) -> Result<HashMap<Uuid, ItemResult>, BatchInferenceError> {
        if stored.batch.request_counts.failed == 0 {
            return Ok(HashMap::new());
        }
        let bytes = match self.blobs.get(&stored.failures_key()).await {
            Ok(bytes) => bytes,
            Err(StorageError::NotFound) => return Ok(HashMap::new()),
            Err(err) => return Err(err.into()),
        };
        Ok(bytes
            .split(|b| *b == b'\n')
            .filter_map(|line| serde_json::from_slice::<ItemResult>(line).ok())
            .filter_map(|result| result.inference_id.map(|id| (id, result)))
            .collect())
    }

    /// The replies of these inferences, rebuilt from their records, in this order.
    async fn replies(&self, project: &str, ids: &[Uuid]) -> Result<Vec<InferenceReply>, BatchInferenceError> {
        let records = futures::stream::iter(ids.iter().copied())
            .map(|id| async move { self.records.get(project, id).await.map(|record| (id, record)) })
            .buffered(READ_CONCURRENCY)
            .try_collect::<Vec<_>>()
            .await?;
        let mut replies = Vec::with_capacity(records.len());
        for (id, record) in records {
            let Some(record) = record else {
                tracing::error!(inference_id = %id, "a batch inference counted as done has no record; left out");
                continue;
            };
            match InferenceReply::from_record(&record) {
                Ok(reply) => replies.push(reply),
                Err(error) => {
                    tracing::error!(inference_id = %id, %error, "a stored batch inference cannot be read; left out")
                }
            }
        }
        Ok(replies)
    }
}

/// What a poll of an ended batch found among the items it covers.
struct Found {
    /// The replies of the items that have an inference, in input order.
    inferences: Vec<InferenceReply>,
    /// The items that failed or never ran, in input order.
    failed: Vec<ItemResult>,
    /// Items follow the covered ones.
    has_more: bool,
    /// The last covered item.
    last: Option<Uuid>,
}

/// The reply to a poll of an ended batch (`completed` `completed` items so far), as TensorZero
/// shapes it: a batch with no inference (all failed, cancelled, expired) has failed, and so has an
/// item asked for on its own that has no inference; a failed reply is bare unless the caller asked
/// for failures or a page.
fn ended_reply(
    batch_id: Uuid,
    status: BatchStatus,
    completed: u64,
    query: PollQuery,
    found: Found,
) -> BatchInferencePoll {
    let succeeded = status == BatchStatus::Completed && completed > 0;
    let item_failed = query.inference_id.is_some() && found.inferences.is_empty();
    let paged = query.limit.is_some() || query.after.is_some();
    let mut poll = BatchInferencePoll::bare(if succeeded && !item_failed {
        PollStatus::Completed
    } else {
        PollStatus::Failed
    });
    if poll.status == PollStatus::Completed || query.include_failures || paged {
        poll.batch_id = Some(batch_id);
        poll.inferences = Some(found.inferences);
    }
    if query.include_failures {
        poll.batch_id = Some(batch_id);
        poll.failed_inferences = Some(found.failed);
    }
    if paged {
        poll.has_more = Some(found.has_more);
        poll.next_after = found.last.filter(|_| found.has_more);
    }
    poll
}

/// The items a poll covers: one, or a page after `after`.
fn page(items: &[ItemIds], query: PollQuery) -> Result<std::ops::Range<usize>, BatchInferenceError> {
    if let Some(id) = query.inference_id {
        let at = items.iter().position(|item| item.inference_id == id).unwrap_or(0);
        return Ok(at..(at + 1).min(items.len()));
    }
    let start = match query.after {
        None => 0,
        Some(after) => match items.iter().position(|item| item.inference_id == after) {
            Some(at) => at + 1,
            None => {
                return Err(
                    FunctionError::invalid(format!("`after` is not an inference of this batch: {after}")).into(),
                )
            }
        },
    };
    let end = match query.limit {
        Some(limit) => start.saturating_add(limit).min(items.len()),
        None => items.len(),
    };
    Ok(start..end)
}

#[cfg(test)]
#[path = "tensorzero_api_tests.rs"]
mod tests;
