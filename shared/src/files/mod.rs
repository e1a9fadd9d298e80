//! Files and uploads: bytes in the blob store, metadata in the state store, every record scoped
//! to a project (another project's id answers 404, as if it did not exist).
//!
//! Keys: blobs under `projects/{project}/files/{file_id}` and
//! `uploads/{project}/{upload_id}/parts/{part_id}`; records of kind `file`, `upload`
//! (owner: the project) and `upload_part` (owner: the upload id). Janitor markers (kind `janitor`)
//! make expiry and crash clean-up sweepable in due-time order: see [`sweep`]. Holds (kind
//! `blob_hold`) keep a deleted file's bytes while a running batch still reads them (`holds.rs`).

mod direct;
mod file_ops;
mod holds;
mod limits;
mod streams;
pub mod sweep;
mod upload_ops;

pub(crate) use direct::DeclaredBytes;
pub use file_ops::{FileContent, ListFiles, NewFile, FILE_PAGE};
pub(crate) use file_ops::{FileDraft, FileReservation};
pub use holds::HOLD_BACKSTOP_MS;
pub(crate) use limits::{check_expires_after, max_bytes_for, ExpiryField, MAX_FILE_BYTES};
pub use limits::{check_new_file, MAX_PART_BYTES};
pub use streams::md5_tapped;

use crate::openai::files::FileObject;
use crate::ports::{BlobStore, Clock, IdSource, ProjectId, Record, SortCursor, StateStore, StorageError};
use serde::{Deserialize, Serialize};
use std::sync::Arc;
use uuid::Uuid;

/// Why a files or uploads call failed.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum FilesError {
    #[error("No such {what} object: {}", crate::user_text::excerpt(.id))]
    NotFound { what: &'static str, id: String },
    #[error("{message}")]
    Invalid { message: String, param: Option<String> },
    #[error("{message}")]
    TooLarge { message: String },
    /// An `Idempotency-Key` seen before with other parameters.
    #[error("This Idempotency-Key was used with other parameters.")]
    KeyReused,
    #[error(transparent)]
    Storage(#[from] StorageError),
}

impl FilesError {
    pub(crate) fn invalid(message: impl Into<String>, param: &str) -> Self {
        Self::Invalid {
            message: message.into(),
            param: Some(param.to_owned()),
        }
    }

    pub(crate) fn file_not_found(id: &str) -> Self {
        Self::NotFound {
            what: "File",
            id: id.to_owned(),
        }
    }
}

pub(crate) const FILE_KIND: &str = "file";
pub(crate) const UPLOAD_KIND: &str = "upload";
pub(crate) const PART_KIND: &str = "upload_part";

/// A file record's body: the API object plus where its bytes are.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub(crate) struct StoredFile {
    #[serde(flatten)]
    pub file: FileObject,
    pub blob_key: String,
    /// For direct uploads: the size the client declared.
    #[serde(default)]
    pub declared_bytes: Option<u64>,
    /// For direct uploads: the SHA-256 (hex) the client declared, checked when the bytes arrive.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub declared_sha256: Option<String>,
}

/// The files and uploads business layer; it mints every id and timestamp.
#[derive(Clone)]
pub struct FilesService {
    pub(crate) state: Arc<dyn StateStore>,
    pub(crate) blobs: Arc<dyn BlobStore>,
    pub(crate) clock: Arc<dyn Clock>,
    pub(crate) ids: Arc<dyn IdSource>,
}

/// Milliseconds since the epoch encoded in a UUIDv7.
pub(crate) fn uuid_ms(uuid: &Uuid) -> i64 {
    crate::ports::clock::uuid_unix_ms(uuid)
}

/// The listing position of an id minted by this layer (`{prefix}{uuid-v7}`), which also works
/// for ids of records deleted since.
pub(crate) fn cursor_for_id(prefix: &str, id: &str) -> Option<SortCursor> {
    let uuid = Uuid::parse_str(id.strip_prefix(prefix)?).ok()?;
    (uuid.get_version_num() == 7).then(|| SortCursor {
        created_at_ms: uuid_ms(&uuid),
        id: id.to_owned(),
    })
}

pub(crate) fn project_prefix(project: &ProjectId) -> String {
    format!("projects/{project}")
}

impl FilesService {
    pub fn new(
        state: Arc<dyn StateStore>,
        blobs: Arc<dyn BlobStore>,
        clock: Arc<dyn Clock>,
        ids: Arc<dyn IdSource>,
    ) -> Self {
        Self {
            state,
            blobs,
            clock,
            ids,
        }
    }

    /// A fresh id and its creation time in milliseconds (taken from the id itself).
    pub(crate) fn mint(&self, prefix: &str) -> (String, i64) {
        let uuid = self.ids.new_uuid();
        (format!("{prefix}{}", uuid.simple()), uuid_ms(&uuid))
    }

    pub(crate) fn now_s(&self) -> i64 {
        self.clock.now_unix_s()
    }

    /// Write `body` over `record` as its next version, unless someone changed it since it was read
    /// ([`StorageError::Conflict`]).
    pub(crate) async fn replace_body<T: Serialize>(&self, record: &Record, body: &T) -> Result<(), StorageError> {
        let updated = crate::records::next_version(record, body)?;
        self.state.update(&updated, record.version).await
    }

    /// The project's record of `kind`/`id`, or `None` if it is missing or belongs to another project.
    pub(crate) async fn owned_record(
        &self,
        kind: &str,
        id: &str,
        project: &ProjectId,
    ) -> Result<Option<Record>, FilesError> {
        Ok(crate::records::get_owned(self.state.as_ref(), kind, id, project).await?)
    }
}

pub(crate) use crate::records::decode;

#[cfg(test)]
mod tests;
