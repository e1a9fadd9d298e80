//! A segment before it is saved: the results of consecutive lines of a chunk run (or of a
//! provider part) and the lines staged for providers' own batch APIs, and the result blobs it is
//! written to first (`progress.rs` then counts it in one conditional write).

use super::lines::{LineResult, NativeRequest};
use super::stored::{NativeGroup, Segment};
use crate::openai::batches::BatchUsage;
use crate::ports::{BlobStore, StorageError};
use bytes::Bytes;
use std::collections::{BTreeMap, HashMap};

/// Results of consecutive lines, not yet saved.
#[derive(Debug, Default)]
pub(crate) struct PendingSegment {
    pub lines: u64,
    pub completed: u64,
    pub failed: u64,
    pub output: Vec<u8>,
    pub errors: Vec<u8>,
    pub usage: BatchUsage,
    /// Lines staged for providers' own batch APIs, by group.
    pub native: BTreeMap<NativeGroup, StagedLines>,
}

/// Staged request lines of one group, not yet saved.
#[derive(Debug, Default)]
pub(crate) struct StagedLines {
    pub lines: u64,
    pub jsonl: Vec<u8>,
    pub credentials: HashMap<String, String>,
}

impl PendingSegment {
    /// Stage a line for its provider's batch API under `custom_id` (unique within the batch).
    pub(crate) fn stage(&mut self, batch_id: &str, custom_id: &str, request: NativeRequest) {
        self.lines += 1;
        let group = NativeGroup {
            model: request.model,
            provider: request.provider,
            url: request.url.to_owned(),
            credentials_digest: credentials_digest(batch_id, &request.credentials),
        };
        let line = serde_json::json!({
            "custom_id": custom_id,
            "method": "POST",
            "url": group.url,
            "body": request.body,
        });
        let staged = self.native.entry(group).or_default();
        staged.lines += 1;
        staged.jsonl.extend_from_slice(line.to_string().as_bytes());
        staged.jsonl.push(b'\n');
        staged.credentials = request.credentials;
    }

    pub fn push(&mut self, result: LineResult) {
        self.lines += 1;
        let target = if result.ok {
            self.completed += 1;
            &mut self.output
        } else {
            self.failed += 1;
            &mut self.errors
        };
        target.extend_from_slice(result.line.as_bytes());
        target.push(b'\n');
        self.usage.add_usage(&result.usage);
    }

    pub fn is_empty(&self) -> bool {
        self.lines == 0
    }
}

/// A digest telling lines with different dynamic credentials apart (salted with the batch id,
/// so it says nothing across batches); empty without credentials.
fn credentials_digest(batch_id: &str, credentials: &HashMap<String, String>) -> String {
    use sha2::{Digest, Sha256};
    if credentials.is_empty() {
        return String::new();
    }
    let sorted: BTreeMap<&String, &String> = credentials.iter().collect();
    let mut hasher = Sha256::new();
    hasher.update(batch_id.as_bytes());
    hasher.update([0]);
    hasher.update(serde_json::to_vec(&sorted).unwrap_or_default());
    hex::encode(&hasher.finalize()[..8])
}

/// The segment of `pending`'s results, its output and error lines written as blobs under
/// `prefix` (staged lines are the caller's).
pub(crate) async fn put_results(
    blobs: &dyn BlobStore,
    prefix: &str,
    pending: &mut PendingSegment,
) -> Result<Segment, StorageError> {
    let mut segment = Segment {
        lines: pending.lines,
        completed: pending.completed,
        failed: pending.failed,
        output_key: None,
        error_key: None,
        usage: pending.usage,
        staged: Vec::new(),
    };
    if !pending.output.is_empty() {
        let key = format!("{prefix}.out.jsonl");
        blobs
            .put(&key, Bytes::from(std::mem::take(&mut pending.output)))
            .await?;
        segment.output_key = Some(key);
    }
    if !pending.errors.is_empty() {
        let key = format!("{prefix}.err.jsonl");
        blobs
            .put(&key, Bytes::from(std::mem::take(&mut pending.errors)))
            .await?;
        segment.error_key = Some(key);
    }
    Ok(segment)
}
