//! What the batch engine stores: the batch, its chunks and the active-batch markers (the jobs it
//! puts on the queue are [`crate::jobs::JobMessage`]s).
//!
//! - `batch` (owner: the project): [`StoredBatch`], the API object plus engine state.
//! - `batch_chunk` (owner: the batch id, `created_at_ms` = chunk index, so the owner listing is in
//!   chunk order): [`StoredChunk`].
//! - `batch_active` (owner `_active`): one per unfinished batch, what the poller walks.

use super::input_validation::ChunkRange;
use crate::openai::batches::{BatchObject, BatchUsage};
use crate::openai::files::ExpiresAfter;
use crate::ports::{Clock, ProjectId, Record, StateStore, StorageError};
use serde::{Deserialize, Serialize};

pub(crate) const BATCH_KIND: &str = "batch";
pub(crate) const CHUNK_KIND: &str = "batch_chunk";
pub(crate) const ACTIVE_KIND: &str = "batch_active";
pub(crate) const ACTIVE_OWNER: &str = "_active";

/// A batch record's body.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub(crate) struct StoredBatch {
    pub batch: BatchObject,
    pub project: ProjectId,
    pub input_blob_key: String,
    /// Chunks planned by validation (0 until then) and how many have finished.
    pub chunks: u32,
    pub chunks_done: u32,
    /// When the validation job was last enqueued.
    pub enqueued_at_ms: i64,
    /// Ids reserved for the output and error files before they are written, so a finalization
    /// that is interrupted and run again writes the same files.
    pub reserved_output_file_id: Option<String>,
    pub reserved_error_file_id: Option<String>,
    /// Until when a finalizer works on this batch.
    pub finalize_lease_until_ms: LeaseUntil,
    /// Set by the finalizer before it reads the results: no segment is counted after it.
    #[serde(default)]
    pub sealed: bool,
    /// The create request's `output_expires_after`, applied to the output and error files.
    #[serde(default)]
    pub output_expires_after: Option<ExpiresAfter>,
    /// What its lines are (records written before formats existed are OpenAI batches).
    #[serde(default)]
    pub format: BatchFormat,
    /// Lines handed to providers' own batch APIs.
    #[serde(default)]
    pub native: NativeProgress,
    /// Until when a client asked for live progress (ms; see `live.rs`).
    #[serde(default)]
    pub live_until_ms: i64,
    /// The id of the API key that created it (none on an open server): each chunk run checks it
    /// was not revoked since, and if it was, the run's lines fail with `api_key_revoked`, unrun.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub key_id: Option<String>,
}

/// A batch's provider-native work: lines staged by chunk runs, then packed into parts (one
/// provider batch each) once no chunk stages any more.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct NativeProgress {
    /// Lines staged for provider batches (counted in their chunks' `lines_done`, not yet in
    /// `request_counts.completed`/`failed`).
    pub staged: u64,
    /// Set when no chunk will stage any more: no segment staging lines is counted after it.
    pub closed: bool,
    /// How many parts the staged lines were packed into, once they are.
    pub parts: Option<u32>,
    pub parts_done: u32,
}

impl NativeProgress {
    /// Staged lines whose results are not all counted yet.
    pub fn open(&self) -> bool {
        self.staged > 0 && self.parts.is_none_or(|parts| self.parts_done < parts)
    }

    /// Staging is closed and provider batches still owe results: the `native` job's work.
    pub(crate) fn awaiting_provider(&self) -> bool {
        self.closed && self.open()
    }
}

/// What a batch's lines are, and where their results go.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub(crate) enum BatchFormat {
    /// `/v1/batches`: OpenAI request lines in, output and error files out.
    #[default]
    OpenAiJsonl,
    /// `/batch_inference`: one `/inference` item per line, inference records out.
    TensorZero(TensorZeroPlan),
}

/// A `/batch_inference` batch's own facts.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub(crate) struct TensorZeroPlan {
    pub function_name: String,
    pub variant_name: String,
    /// The dynamic credentials of batches stored before they were sealed; dropped when the batch
    /// ends.
    #[serde(default, skip_serializing_if = "std::collections::HashMap::is_empty")]
    pub credentials: std::collections::HashMap<String, String>,
    /// The dynamic credentials it was submitted with, sealed (bound to the batch id); dropped
    /// when the batch ends.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sealed_credentials: Option<String>,
    /// Its items' ids derive from the batch id, and its inferences are kept in pages when it
    /// ends (batches stored before kept one record per item, written as each item ran).
    #[serde(default)]
    pub paged: bool,
}

/// The marker of an unfinished batch, what the poller walks; written before the batch record.
pub(crate) fn active_marker(batch_id: &str, project: &ProjectId, created_ms: i64) -> Record {
    // Its body is JSON already: nothing to encode, so no error to hand back.
    Record {
        kind: ACTIVE_KIND.to_owned(),
        id: batch_id.to_owned(),
        owner: ACTIVE_OWNER.to_owned(),
        created_at_ms: created_ms,
        version: 1,
        expires_at: None,
        body: serde_json::json!({ "project": project }),
    }
}

impl StoredBatch {
    /// Where a `/batch_inference` batch keeps what failed or never ran, once it has ended (only
    /// when its `request_counts.failed` is not 0).
    pub(crate) fn failures_key(&self) -> String {
        format!("batch_inference/{}/{}/failures.jsonl", self.project, self.batch.id)
    }
}

impl StoredBatch {
    /// Every planned chunk has finished (its flag and these counters move in one write).
    pub(crate) fn all_chunks_done(&self) -> bool {
        self.chunks > 0 && self.chunks_done >= self.chunks
    }

    /// Past its completion window by `clock`.
    pub(crate) fn is_overdue(&self, clock: &dyn Clock) -> bool {
        self.batch.expires_at.is_some_and(|at| clock.now_unix_s() >= at)
    }

    /// Where this batch keeps its per-segment results.
    pub(crate) fn results_prefix(&self) -> String {
        format!("batches/{}/{}", self.project, self.batch.id)
    }
}

/// The run of a chunk that holds it (`token`); others leave the chunk alone until `until_ms`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct Lease {
    pub token: String,
    pub until_ms: LeaseUntil,
}

/// Results of consecutive lines of a chunk, saved together.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub(crate) struct Segment {
    pub lines: u64,
    pub completed: u64,
    pub failed: u64,
    pub output_key: Option<String>,
    pub error_key: Option<String>,
    pub usage: BatchUsage,
    /// Lines of this segment staged for providers' own batch APIs, one blob per group.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub staged: Vec<StagedBlob>,
}

/// Which provider batch a staged line can share: the same model, provider, endpoint and
/// credentials.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
pub(crate) struct NativeGroup {
    pub model: String,
    pub provider: String,
    pub url: String,
    /// A digest of the line's dynamic credentials (salted with the batch id); empty for none.
    pub credentials_digest: String,
}

/// Staged request lines of one group, in the provider's JSONL format.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct StagedBlob {
    pub group: NativeGroup,
    pub key: String,
    pub lines: u64,
    pub bytes: u64,
    /// The group's dynamic credentials, sealed (bound to the batch id).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sealed_credentials: Option<String>,
}

/// A chunk record's body.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub(crate) struct StoredChunk {
    pub batch_id: String,
    pub index: u32,
    pub range: ChunkRange,
    /// Lines (from the start of the chunk) whose results are saved in `segments`.
    pub lines_done: u64,
    pub segments: Vec<Segment>,
    pub done: bool,
    pub lease: Option<Lease>,
    pub enqueued_at_ms: i64,
}

impl StoredChunk {
    /// When the run holding the chunk at `now_ms` lets go of it at the latest, if one holds it.
    pub(crate) fn held_until(&self, now_ms: i64) -> Option<i64> {
        self.lease.as_ref().and_then(|lease| lease.until_ms.held_until(now_ms))
    }
}

pub(crate) fn chunk_id(batch_id: &str, index: u32) -> String {
    format!("{batch_id}.{index:05}")
}

pub(crate) use crate::records::{decode, edit, list_all, Edit, LeaseUntil, Loaded};

/// The batch's chunk records, in chunk order.
pub(crate) async fn chunks_of(state: &dyn StateStore, batch_id: &str) -> Result<Vec<StoredChunk>, StorageError> {
    list_all(state, CHUNK_KIND, batch_id)
        .await?
        .iter()
        .map(decode::<StoredChunk>)
        .collect()
}
