//! What provider-native work stores: one `batch_native_part` record per provider batch (owner:
//! the batch id, `created_at_ms` = the part's index, so the owner listing is in part order).

use crate::batches::stored::{LeaseUntil, NativeGroup, Segment};
use serde::{Deserialize, Serialize};

pub(crate) const PART_KIND: &str = "batch_native_part";

/// Where a part's request lines are: a range of lines of a staged blob.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct PartSource {
    pub key: String,
    pub skip: u64,
    pub lines: u64,
}

/// How far a part got. Every step records its intent before it calls the provider, so a step
/// interrupted at any point is finished by looking at the provider (by file name or batch
/// metadata), never repeated blindly.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub(crate) enum PartState {
    Planned,
    /// The file is being uploaded (it may exist at the provider).
    Uploading,
    Uploaded,
    /// The provider batch is being created (it may exist at the provider).
    Creating,
    /// The provider batch runs; the poller watches it.
    Submitted,
    /// The provider side is over (`end` says how); its results are to be collected.
    Ended,
    /// Its results are counted (`result`).
    Done,
}

/// How a part's provider side ended.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct PartEnd {
    /// The provider batch's final status, when there was one.
    pub provider_status: Option<String>,
    pub output_file_id: Option<String>,
    pub error_file_id: Option<String>,
    /// The error code and message of every line in neither result file.
    pub code: String,
    pub message: String,
}

/// Progress the provider reported, counted in the batch's `request_counts` until collected.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct Reported {
    pub completed: u64,
    pub failed: u64,
}

/// A part: some staged lines of one group, sent as one provider batch.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub(crate) struct StoredPart {
    pub batch_id: String,
    pub index: u32,
    pub group: NativeGroup,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sealed_credentials: Option<String>,
    pub sources: Vec<PartSource>,
    pub lines: u64,
    pub bytes: u64,
    pub state: PartState,
    pub file_id: Option<String>,
    pub provider_batch_id: Option<String>,
    /// When the current step's intent was recorded (unix s): a reconciliation looks no further back.
    pub intent_at_s: i64,
    pub reported: Reported,
    /// Polls in a row that saw no progress (the next poll backs off).
    pub quiet_polls: u32,
    pub next_poll_ms: i64,
    pub cancel_requested: bool,
    pub end: Option<PartEnd>,
    pub result: Option<Segment>,
    /// Until when a worker works on this part.
    pub lease_until_ms: LeaseUntil,
}

impl StoredPart {
    /// Unique per batch and part: the part's record id, its provider file's name stem and its
    /// provider batch's `nimbus_ref` metadata.
    pub fn reference(&self) -> String {
        part_id(&self.batch_id, self.index)
    }

    pub fn filename(&self) -> String {
        format!("nimbus-{}-{:04}.jsonl", self.batch_id, self.index)
    }
}

pub(crate) fn part_id(batch_id: &str, index: u32) -> String {
    format!("{batch_id}.{index:04}")
}
