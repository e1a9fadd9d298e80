//! Holds on a file's bytes: whoever still reads a file (a running batch its input) holds its
//! bytes, so deleting or expiring the file removes it from the API at once while the bytes stay
//! until the last holder lets go.
//!
//! One `blob_hold` record per blob key (owner: the file id) lists the holders. Both sides write first
//! and read the other's record after: the deleter removes the file record, then reads the hold;
//! a holder adds or removes itself, then reads the file record. Single-record reads are strongly
//! consistent in both adapters, so in every interleaving at least one side sees the other: bytes
//! are never deleted under a holder and never left behind (deleting them twice is harmless).

use super::sweep::{Janitor, JanitorTask};
use super::{decode, FilesError, FilesService, FILE_KIND};
use crate::openai::files::FileObject;
use crate::ports::{BatchId, FileId, ProjectId, StorageError};
use serde::{Deserialize, Serialize};

pub(crate) const HOLD_KIND: &str = "blob_hold";
/// Longer than the longest completion window (7 days) plus finalizing: when a held file is deleted,
/// the janitor removes its bytes this long after at the latest, even if a holder never let go.
pub const HOLD_BACKSTOP_MS: i64 = 8 * 24 * 3600 * 1000;
/// Conditional writes on one hold record retry this often before giving up.
const ATTEMPTS: usize = 50;

/// A `blob_hold` record's body.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
struct BlobHold {
    /// The file the bytes belong to.
    file_id: String,
    /// Who reads the bytes (batch ids).
    holders: Vec<String>,
}

impl FilesService {
    /// A batch input file (see [`FilesService::batch_input`]) whose bytes `holder` holds until it
    /// calls [`FilesService::release_hold`]. A file deleted meanwhile answers 404 and is not held.
    pub(crate) async fn hold_batch_input(
        &self,
        project: &ProjectId,
        file_id: &FileId,
        holder: &BatchId,
    ) -> Result<(FileObject, String), FilesError> {
        let (_, blob_key) = self.batch_input(project, file_id).await?;
        self.add_holder(&blob_key, file_id.as_str(), holder.as_str()).await?;
        // Read the file again after the hold is written: a delete that came in between either
        // sees the hold (and keeps the bytes) or is seen here.
        match self.batch_input(project, file_id).await {
            Ok(input) => Ok(input),
            Err(err) => {
                self.release_hold(&blob_key, file_id, holder).await?;
                Err(err)
            }
        }
    }

    /// `holder` no longer needs the bytes of `file_id` at `blob_key`; if nobody else holds them
    /// and the file is deleted, they are deleted now. Idempotent.
    pub(crate) async fn release_hold(
        &self,
        blob_key: &str,
        file_id: &FileId,
        holder: &BatchId,
    ) -> Result<(), FilesError> {
        let (file_id, holder) = (file_id.as_str(), holder.as_str());
        let mut released = false;
        for _ in 0..ATTEMPTS {
            let Some(record) = self.state.get(HOLD_KIND, blob_key).await? else {
                released = true;
                break;
            };
            let mut hold: BlobHold = decode(&record)?;
            if !hold.holders.iter().any(|h| h == holder) {
                if !hold.holders.is_empty() {
                    return Ok(());
                }
                released = true;
                break;
            }
            hold.holders.retain(|h| h != holder);
            let written = if hold.holders.is_empty() {
                self.state
                    .delete(HOLD_KIND, blob_key, Some(record.version))
                    .await
                    .map(|_| ())
            } else {
                self.replace_body(&record, &hold).await
            };
            match written {
                Ok(()) if hold.holders.is_empty() => {
                    released = true;
                    break;
                }
                Ok(()) => return Ok(()),
                Err(StorageError::Conflict) => continue,
                Err(err) => return Err(err.into()),
            }
        }
        if !released {
            return Err(StorageError::Conflict.into());
        }
        // Nobody holds the bytes now: they go if the file is gone.
        if self.state.get(FILE_KIND, file_id).await?.is_none() {
            tracing::info!(file = %file_id, blob = %blob_key, holder, "deleting the bytes of a deleted file: its last holder let go");
            self.blobs.delete(blob_key).await?;
        }
        Ok(())
    }

    /// The bytes of a file whose record was just deleted: deleted now unless someone holds them;
    /// then the last holder deletes them, or the janitor after [`HOLD_BACKSTOP_MS`].
    pub(crate) async fn delete_unheld_bytes(&self, file_id: &str, blob_key: &str) -> Result<(), FilesError> {
        let holders = match self.state.get(HOLD_KIND, blob_key).await? {
            Some(record) => decode::<BlobHold>(&record)?.holders,
            None => Vec::new(),
        };
        if holders.is_empty() {
            self.blobs.delete(blob_key).await?;
            return Ok(());
        }
        tracing::info!(file = %file_id, blob = %blob_key, ?holders, "file deleted; its bytes stay until its holders finish");
        let task = JanitorTask::DeleteHeldBytes {
            file_id: file_id.to_owned(),
            blob_key: blob_key.to_owned(),
        };
        Janitor::new(self)
            .schedule(task, self.clock.now_unix_ms() + HOLD_BACKSTOP_MS)
            .await?;
        Ok(())
    }

    /// The janitor's backstop for bytes of a deleted file that a holder never let go of.
    pub(crate) async fn delete_held_bytes(&self, file_id: &str, blob_key: &str) -> Result<(), FilesError> {
        if self.state.get(FILE_KIND, file_id).await?.is_some() {
            return Ok(());
        }
        if let Some(record) = self.state.get(HOLD_KIND, blob_key).await? {
            let hold: BlobHold = decode(&record)?;
            tracing::warn!(file = %file_id, blob = %blob_key, holders = ?hold.holders, "deleting bytes still held long past any batch's window");
            self.state.delete(HOLD_KIND, blob_key, None).await?;
        }
        self.blobs.delete(blob_key).await?;
        Ok(())
    }

    /// Add `holder` to the bytes' holders (no change if it is there already).
    pub(crate) async fn add_holder(&self, blob_key: &str, file_id: &str, holder: &str) -> Result<(), FilesError> {
        for _ in 0..ATTEMPTS {
            let written = match self.state.get(HOLD_KIND, blob_key).await? {
                None => {
                    let hold = BlobHold {
                        file_id: file_id.to_owned(),
                        holders: vec![holder.to_owned()],
                    };
                    let record = crate::records::new_record(
                        HOLD_KIND.to_owned(),
                        blob_key.to_owned(),
                        file_id.to_owned(),
                        self.clock.now_unix_ms(),
                        None,
                        &hold,
                    )?;
                    self.state.create(&record).await
                }
                Some(record) => {
                    let mut hold: BlobHold = decode(&record)?;
                    if hold.holders.iter().any(|h| h == holder) {
                        return Ok(());
                    }
                    hold.holders.push(holder.to_owned());
                    self.replace_body(&record, &hold).await
                }
            };
            match written {
                Ok(()) => return Ok(()),
                Err(StorageError::Conflict) => continue,
                Err(err) => return Err(err.into()),
            }
        }
        Err(StorageError::Conflict.into())
    }

    /// Who holds the bytes at `blob_key` (tests and diagnostics).
    pub async fn holders_of(&self, blob_key: &str) -> Result<Vec<String>, FilesError> {
        Ok(match self.state.get(HOLD_KIND, blob_key).await? {
            Some(record) => decode::<BlobHold>(&record)?.holders,
            None => Vec::new(),
        })
    }
}
