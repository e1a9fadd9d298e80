//! Polling a `/batch_inference` batch: `pending` until it ends, then `failed` or `completed`
//! with each inference rebuilt from its record, in input order. A batch's items have ids derived
//! from its id, so a page of `limit` items after `after` is found from the ids alone and read
//! from the pages of the inference store that hold it (batches stored before pages existed list
//! their items from their input and read one record per item).

use super::lines::tensorzero::ItemResult;
use super::stored::{BatchFormat, Loaded, StoredBatch, BATCH_KIND};
use super::tensorzero_api::{BatchInferenceError, BatchInferencePoll, PollQuery, PollStatus};
use super::BatchApi;
use crate::openai::batches::BatchStatus;
use crate::ports::inference_records::InferenceRecord;
use crate::ports::{BatchItemId, ItemIdKind, ProjectId, StorageError};
use crate::tensorzero::batch_request::{item_ids_in, ItemIds};
use crate::tensorzero::function_calls::{FunctionError, InferenceReply};
use futures::{StreamExt, TryStreamExt};
use std::collections::HashMap;
use uuid::Uuid;

/// Records read at once when a poll of an unpaged batch rebuilds inferences.
const READ_CONCURRENCY: usize = 32;

impl BatchApi {
    /// Poll a batch (or one of its items).
    pub async fn poll_batch_inference(
        &self,
        project: &ProjectId,
        batch_id: Uuid,
        query: PollQuery,
    ) -> Result<BatchInferencePoll, BatchInferenceError> {
        let not_found = || BatchInferenceError::BatchNotFound(batch_id);
        // A `/batch_inference` batch is listed under a partition of its project (`owner_of`), not
        // under the project itself: its body's project scopes it.
        let Some(loaded) = Loaded::<StoredBatch>::get(self.state.as_ref(), BATCH_KIND, &batch_id.to_string()).await?
        else {
            return Err(not_found());
        };
        let stored = loaded.body;
        if !matches!(stored.format, BatchFormat::TensorZero(_)) || stored.project != *project {
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
        if matches!(&stored.format, BatchFormat::TensorZero(plan) if plan.paged) {
            return self.poll_paged(project, batch_id, &stored, query, ended).await;
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
        let inferences = replies(self.records_of(project, &ok_ids).await?);
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
        Ok(crate::jsonl::lines(&bytes).filter_map(item_ids_in).collect())
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
        Ok(crate::jsonl::lines(&bytes)
            .filter_map(|line| serde_json::from_slice::<ItemResult>(line).ok())
            .filter_map(|result| result.inference_id.map(|id| (id, result)))
            .collect())
    }

    /// The records of these inferences, one read each, in this order (a batch from before pages).
    async fn records_of(&self, project: &ProjectId, ids: &[Uuid]) -> Result<Vec<InferenceRecord>, BatchInferenceError> {
        let records = futures::stream::iter(ids.iter().copied())
            .map(|id| async move { self.records.get(project, id).await.map(|record| (id, record)) })
            .buffered(READ_CONCURRENCY)
            .try_collect::<Vec<_>>()
            .await?;
        Ok(records
            .into_iter()
            .filter_map(|(id, record)| {
                if record.is_none() {
                    tracing::error!(inference_id = %id, "a batch inference counted as done has no record; left out");
                }
                record
            })
            .collect())
    }

    /// A poll of an ended batch whose items' ids derive from its id: the positions asked for are
    /// read from the pages that hold them.
    async fn poll_paged(
        &self,
        project: &ProjectId,
        batch_id: Uuid,
        stored: &StoredBatch,
        query: PollQuery,
        ended: bool,
    ) -> Result<BatchInferencePoll, BatchInferenceError> {
        let total = u32::try_from(stored.batch.request_counts.total).unwrap_or(u32::MAX);
        let position = |id: Uuid| BatchItemId::of_batch(id, batch_id, ItemIdKind::Inference).filter(|at| *at < total);
        let window = match (query.inference_id, query.after) {
            (Some(inference_id), _) => {
                let at =
                    position(inference_id).ok_or(BatchInferenceError::InferenceNotFound { batch_id, inference_id })?;
                at..at + 1
            }
            (None, after) => {
                let start = match after {
                    None => 0,
                    Some(after) => position(after).map(|at| at + 1).ok_or_else(|| {
                        FunctionError::invalid(format!("`after` is not an inference of this batch: {after}"))
                    })?,
                };
                let limit = query.limit.map_or(u32::MAX, |l| u32::try_from(l).unwrap_or(u32::MAX));
                start..start.saturating_add(limit).min(total)
            }
        };
        if !ended {
            return Ok(BatchInferencePoll::bare(PollStatus::Pending));
        }
        let records = self.records.batch_records(project, batch_id, window.clone()).await?;
        let mut failed: Vec<(u32, ItemResult)> = self
            .failures(stored)
            .await?
            .into_values()
            .filter_map(|result| {
                let at = result.inference_id.and_then(position)?;
                window.contains(&at).then_some((at, result))
            })
            .collect();
        failed.sort_by_key(|(at, _)| *at);
        let last = window
            .end
            .checked_sub(1)
            .filter(|_| !window.is_empty())
            .and_then(|at| BatchItemId::inference(batch_id, at).id());
        let found = Found {
            inferences: replies(records),
            failed: failed.into_iter().map(|(_, result)| result).collect(),
            has_more: window.end < total,
            last,
        };
        Ok(ended_reply(
            batch_id,
            stored.batch.status,
            stored.batch.request_counts.completed,
            query,
            found,
        ))
    }
}

/// The replies of these records, in this order (one that cannot be read is left out, logged).
fn replies(records: Vec<InferenceRecord>) -> Vec<InferenceReply> {
    records
        .iter()
        .filter_map(|record| match InferenceReply::from_record(record) {
            Ok(reply) => Some(reply),
            Err(error) => {
                tracing::error!(inference_id = %record.inference_id, %error, "a stored batch inference cannot be read; left out");
                None
            }
        })
        .collect()
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
#[path = "tensorzero_poll_tests.rs"]
mod tests;
