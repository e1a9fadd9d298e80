//! Packing staged lines into parts: per group (model, provider, endpoint, credentials), in input
//! order, at most the provider's lines and bytes per file. The packing depends only on what was
//! staged, so a plan that is interrupted and made again creates the same parts.

use super::stored::{part_id, PartSource, PartState, Reported, StoredPart, PART_KIND};
use super::{parts_of, NativeParts};
use crate::batches::stored::{NativeGroup, StagedBlob, StoredChunk};
use crate::batches::{BatchesError, NativeSettings};
use crate::ports::StorageError;
use crate::records::LeaseUntil;
use std::collections::BTreeMap;

/// A part being filled.
struct OpenPart {
    group: NativeGroup,
    sealed_credentials: Option<String>,
    sources: Vec<PartSource>,
    lines: u64,
    bytes: u64,
}

impl OpenPart {
    fn new(blob: &StagedBlob) -> Self {
        Self {
            group: blob.group.clone(),
            sealed_credentials: blob.sealed_credentials.clone(),
            sources: Vec::new(),
            lines: 0,
            bytes: 0,
        }
    }

    /// Add line `line` (of `len` bytes with its newline) of blob `key`.
    fn add(&mut self, key: &str, line: u64, len: u64) {
        match self.sources.last_mut() {
            Some(last) if last.key == key && last.skip + last.lines == line => last.lines += 1,
            _ => self.sources.push(PartSource {
                key: key.to_owned(),
                skip: line,
                lines: 1,
            }),
        }
        self.lines += 1;
        self.bytes += len;
    }

    fn fits(&self, len: u64, limits: &NativeSettings) -> bool {
        self.lines == 0 || (self.lines < limits.max_lines && self.bytes + len <= limits.max_bytes)
    }
}

impl NativeParts {
    /// The parts of a batch's staged lines (records written create-if-absent); their count.
    pub(super) async fn plan_parts(&self, batch_id: &str, chunks: &[StoredChunk]) -> Result<u32, BatchesError> {
        let mut groups: BTreeMap<&NativeGroup, Vec<&StagedBlob>> = BTreeMap::new();
        for blob in chunks
            .iter()
            .flat_map(|c| c.segments.iter())
            .flat_map(|s| s.staged.iter())
        {
            groups.entry(&blob.group).or_default().push(blob);
        }
        let limits = &self.settings.native;
        let mut parts = Vec::new();
        for blobs in groups.values() {
            let mut open: Option<OpenPart> = None;
            for blob in blobs {
                let bytes = self.blobs.get(&blob.key).await?;
                for (number, line) in crate::jsonl::line_bytes(&bytes).iter().enumerate() {
                    let len = line.len() as u64 + 1;
                    let part = open.get_or_insert_with(|| OpenPart::new(blob));
                    // Credentials are part of the group: every blob of it carries the same.
                    if !part.fits(len, limits) {
                        parts.extend(open.replace(OpenPart::new(blob)));
                    }
                    if let Some(part) = open.as_mut() {
                        part.add(&blob.key, number as u64, len);
                    }
                }
            }
            parts.extend(open);
        }
        let now_ms = self.clock.now_unix_ms();
        for (index, part) in parts.into_iter().enumerate() {
            let index = u32::try_from(index).unwrap_or(u32::MAX);
            let body = StoredPart {
                batch_id: batch_id.to_owned(),
                index,
                group: part.group,
                sealed_credentials: part.sealed_credentials,
                sources: part.sources,
                lines: part.lines,
                bytes: part.bytes,
                state: PartState::Planned,
                file_id: None,
                provider_batch_id: None,
                intent_at_s: 0,
                reported: Reported::default(),
                quiet_polls: 0,
                next_poll_ms: now_ms,
                cancel_requested: false,
                end: None,
                result: None,
                lease_until_ms: LeaseUntil::NONE,
            };
            let record = crate::records::new_record(
                PART_KIND.to_owned(),
                part_id(batch_id, index),
                batch_id.to_owned(),
                i64::from(index),
                None,
                &body,
            )?;
            match self.state.create(&record).await {
                Ok(()) | Err(StorageError::Conflict) => {}
                Err(err) => return Err(err.into()),
            }
            if index == u32::MAX {
                break;
            }
        }
        let count = parts_of(self.state.as_ref(), batch_id).await?.len();
        Ok(u32::try_from(count).unwrap_or(u32::MAX))
    }
}
