//! `/batch_inference` (TensorZero's batch API) on the engine: submit checks every item and
//! queues the batch like any other (its items' ids derive from its id); polls
//! (`tensorzero_poll.rs`) answer `pending`, `failed` or `completed` with each inference rebuilt
//! from its stored record, in input order.
//!
//! Paging (a Nimbus extension): `limit` items from after the item `after`; the reply then says
//! `has_more` and, when there is more, `next_after`. Failed items are left out of `inferences`, as
//! TensorZero leaves them out; `include_failures` lists them in `failed_inferences`.

use super::lines::tensorzero::ItemResult;
use super::stored::{active_marker, BatchFormat, LeaseUntil, StoredBatch, TensorZeroPlan, BATCH_KIND};
use super::{enqueue, BatchApi, BatchesError, JobMessage};
use crate::openai::batches::BatchObject;
use crate::ports::credential_sealer::seal_json;
use crate::ports::{BatchId, ProjectId, StorageError};
use crate::tensorzero::batch_request::BatchInferenceRequest;
use crate::tensorzero::function_calls::{FunctionError, InferenceReply};
use bytes::Bytes;
use serde::Serialize;
use std::collections::HashMap;
use uuid::Uuid;

/// How long a `/batch_inference` batch may run before what is left expires.
const WINDOW_S: i64 = 24 * 3600;

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
    pub(super) fn bare(status: PollStatus) -> Self {
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
pub(super) fn owner_of(project: &ProjectId) -> String {
    format!("{project}/batch_inference")
}

impl BatchApi {
    /// Check every item, store them as the batch's input, and queue the batch.
    pub async fn submit_batch_inference(
        &self,
        project: &ProjectId,
        request: BatchInferenceRequest,
    ) -> Result<BatchInferenceCreated, BatchInferenceError> {
        self.submit_batch_inference_by(project, None, request).await
    }

    /// [`Self::submit_batch_inference`] for the API key `key_id` (recorded: once it is revoked,
    /// the items not run yet fail with `api_key_revoked`).
    pub(crate) async fn submit_batch_inference_by(
        &self,
        project: &ProjectId,
        key_id: Option<&str>,
        request: BatchInferenceRequest,
    ) -> Result<BatchInferenceCreated, BatchInferenceError> {
        let planned = self.functions.plan_batch(request)?;
        let batch_uuid = planned.batch_id;
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
        let created_ms = self.clock.now_unix_ms();
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
            project: project.clone(),
            input_blob_key,
            chunks: 0,
            chunks_done: 0,
            enqueued_at_ms: created_ms,
            reserved_output_file_id: None,
            reserved_error_file_id: None,
            finalize_lease_until_ms: LeaseUntil::NONE,
            sealed: false,
            output_expires_after: None,
            format: BatchFormat::TensorZero(TensorZeroPlan {
                function_name: planned.function_name.clone(),
                variant_name: planned.variant.name.clone(),
                credentials: HashMap::new(),
                sealed_credentials,
                paged: true,
            }),
            native: Default::default(),
            live_until_ms: 0,
            key_id: key_id.map(str::to_owned),
        };
        // The marker first: a batch the poller cannot see could never be recovered.
        let marker = active_marker(&batch_id, project, created_ms);
        self.state.create(&marker).await?;
        let record = crate::records::new_record(
            BATCH_KIND.to_owned(),
            batch_id.clone(),
            owner_of(project),
            created_ms,
            None,
            &stored,
        )?;
        self.state.create(&record).await?;
        // If this send is lost, the poller enqueues the validation again.
        let validate = JobMessage::Validate {
            batch_id: BatchId::new(batch_id.clone()),
        };
        if let Err(err) = enqueue(self.queue.as_ref(), &validate).await {
            tracing::warn!(batch = %batch_id, error = %err, "could not enqueue the batch; the poller will");
        }
        Ok(BatchInferenceCreated {
            batch_id: batch_uuid,
            inference_ids: planned.items.iter().map(|i| i.inference_id).collect(),
            episode_ids: planned.items.iter().map(|i| i.episode_id).collect(),
        })
    }
}
