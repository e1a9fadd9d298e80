//! Creating, reading, listing and deleting files.

use super::limits::{check_filename, check_new_file, expires_at, max_bytes_for, too_large};
use super::streams::limited;
use super::sweep::{Janitor, JanitorTask, Marker};
use super::{cursor_for_id, decode, project_prefix, FilesError, FilesService, StoredFile, FILE_KIND};
use crate::idempotency::{IdempotencyKeys, Reservation};
use crate::openai::files::{ExpiresAfter, FileDeleted, FileList, FileObject, FilePurpose};
use crate::paging::{PageBounds, PageLimit};
use crate::ports::{ByteStream, FileId, ListOrder, ListQuery, ProjectId, Record};
use crate::user_text::excerpt;
use std::sync::Arc;
use std::time::Duration;

/// How long a presigned download URL stays valid.
pub(crate) const DOWNLOAD_URL_TTL: Duration = Duration::from_secs(300);

/// A new file's metadata, as the client described it.
#[derive(Debug, Clone, PartialEq)]
pub struct NewFile {
    pub filename: String,
    pub purpose: FilePurpose,
    pub expires_after: Option<ExpiresAfter>,
}

/// How many files a page lists: 1 to 10,000, all of them by default.
pub const FILE_PAGE: PageBounds = PageBounds::new(10_000, 10_000);

/// Listing parameters (`after`, `limit` within [`FILE_PAGE`], `order`, `purpose`).
#[derive(Debug, Clone, PartialEq)]
pub struct ListFiles {
    pub after: Option<String>,
    pub limit: PageLimit,
    pub order: ListOrder,
    pub purpose: Option<FilePurpose>,
}

impl Default for ListFiles {
    fn default() -> Self {
        Self {
            after: None,
            limit: FILE_PAGE.default_limit(),
            order: ListOrder::default(),
            purpose: None,
        }
    }
}

/// A file being created: id and blob reserved, bytes maybe written, no record yet.
pub(crate) struct FileDraft {
    id: String,
    created_ms: i64,
    blob_key: String,
    guard: Marker,
    bytes: Option<u64>,
    exceeded: bool,
}

/// What an `Idempotency-Key` on a file upload found.
pub(crate) enum FileReservation {
    /// An earlier request with the key created this file.
    Existing(FileObject),
    /// Create the file under this id.
    Id(String),
}

/// How to hand a file's bytes to the client.
pub enum FileContent {
    /// Redirect to a short-lived URL (S3 presigned GET).
    Redirect(String),
    /// Stream them through.
    Stream {
        bytes: u64,
        filename: String,
        body: ByteStream,
    },
}

impl FilesService {
    /// Store a file streamed from the client. Nothing is visible unless every byte landed.
    pub async fn create_file(
        &self,
        project: &ProjectId,
        new: NewFile,
        body: ByteStream,
    ) -> Result<FileObject, FilesError> {
        check_filename(&new.filename, new.purpose)?;
        let mut draft = self.start_file(project).await?;
        if let Err(err) = self
            .write_file_bytes(&mut draft, body, max_bytes_for(new.purpose))
            .await
        {
            self.discard_file(&draft).await;
            return Err(if draft.exceeded { too_large(new.purpose) } else { err });
        }
        self.finish_file(project, draft, new).await
    }

    /// Reserve an id and a blob for a file whose metadata may arrive after its bytes
    /// (multipart fields come in any order).
    pub(crate) async fn start_file(&self, project: &ProjectId) -> Result<FileDraft, FilesError> {
        let (id, _) = self.mint("file-");
        self.start_file_with_id(project, &id).await
    }

    /// Like [`FilesService::start_file`] for an id minted earlier by this layer (an idempotent
    /// create's retry, a batch's reserved result file).
    pub(crate) async fn start_file_with_id(&self, project: &ProjectId, id: &str) -> Result<FileDraft, FilesError> {
        let cursor = cursor_for_id("file-", id)
            .ok_or_else(|| FilesError::invalid(format!("'{}' is not a file id.", excerpt(id)), "id"))?;
        let blob_key = format!("{}/files/{id}", project_prefix(project));
        let guard = Janitor::new(self).guard_blob(FILE_KIND, id, &blob_key).await?;
        Ok(FileDraft {
            id: id.to_owned(),
            created_ms: cursor.created_at_ms,
            blob_key,
            guard,
            bytes: None,
            exceeded: false,
        })
    }

    /// The id a new file with this idempotency key gets, or the file an earlier request made.
    pub(crate) async fn reserve_file_id(&self, project: &ProjectId, key: &str) -> Result<FileReservation, FilesError> {
        let (id, _) = self.mint("file-");
        let keys = IdempotencyKeys::new(Arc::clone(&self.state), Arc::clone(&self.clock));
        match keys.reserve(project, "files", key, &id, "").await? {
            Reservation::New => Ok(FileReservation::Id(id)),
            Reservation::Existing { resource_id, .. } => match self.live_file(project, &resource_id).await {
                Ok((_, stored)) => Ok(FileReservation::Existing(stored.file)),
                // The first request did not finish: this one makes the file under the same id.
                Err(FilesError::NotFound { .. }) => Ok(FileReservation::Id(resource_id)),
                Err(err) => Err(err),
            },
        }
    }

    /// Store a file the gateway generated (e.g. a batch's output) under a reserved id. If that
    /// file exists already (an earlier attempt got that far), it is returned as it is.
    pub(crate) async fn create_generated_file(
        &self,
        project: &ProjectId,
        id: &FileId,
        new: NewFile,
        body: ByteStream,
    ) -> Result<FileObject, FilesError> {
        let id = id.as_str();
        if let Some(record) = self.owned_record(FILE_KIND, id, project).await? {
            return Ok(decode::<StoredFile>(&record)?.file);
        }
        let mut draft = self.start_file_with_id(project, id).await?;
        if let Err(err) = self.write_file_bytes(&mut draft, body, u64::MAX).await {
            self.discard_file(&draft).await;
            return Err(err);
        }
        self.finish_file(project, draft, new).await
    }

    /// A batch input file: its object and where its bytes are.
    pub(crate) async fn batch_input(
        &self,
        project: &ProjectId,
        id: &FileId,
    ) -> Result<(FileObject, String), FilesError> {
        let (record, stored) = self.live_file(project, id.as_str()).await?;
        let stored = self.settle_direct_upload(record, stored).await?;
        if stored.file.purpose != FilePurpose::Batch {
            return Err(FilesError::invalid(
                format!(
                    "File {id} has purpose '{}'; a batch needs a file uploaded with purpose 'batch'.",
                    stored.file.purpose.as_str()
                ),
                "input_file_id",
            ));
        }
        if stored.file.status != "processed" {
            return Err(FilesError::invalid(
                format!("File {id} is not ready yet (status '{}').", stored.file.status),
                "input_file_id",
            ));
        }
        Ok((stored.file, stored.blob_key))
    }

    /// Stream the bytes into the draft's blob, failing past `max` bytes.
    pub(crate) async fn write_file_bytes(
        &self,
        draft: &mut FileDraft,
        body: ByteStream,
        max: u64,
    ) -> Result<(), FilesError> {
        let (body, flag) = limited(body, max);
        match self.blobs.put_stream(&draft.blob_key, body).await {
            Ok(bytes) => {
                draft.bytes = Some(bytes);
                Ok(())
            }
            Err(err) => {
                draft.exceeded = flag.refused();
                Err(if draft.exceeded {
                    FilesError::TooLarge {
                        message: format!("File is too large: at most {} MB.", max / 1024 / 1024),
                    }
                } else {
                    err.into()
                })
            }
        }
    }

    /// Validate the metadata against the stored bytes and make the file visible, or discard it.
    pub(crate) async fn finish_file(
        &self,
        project: &ProjectId,
        draft: FileDraft,
        new: NewFile,
    ) -> Result<FileObject, FilesError> {
        let Some(bytes) = draft.bytes else {
            self.discard_file(&draft).await;
            return Err(FilesError::invalid("The request has no 'file' field.", "file"));
        };
        let created_at = draft.created_ms.div_euclid(1000);
        let checked = check_new_file(&new.filename, new.purpose, bytes)
            .and_then(|()| expires_at(created_at, new.purpose, new.expires_after.clone()));
        let expires = match checked {
            Ok(expires) => expires,
            Err(err) => {
                self.discard_file(&draft).await;
                return Err(err);
            }
        };
        let file = FileObject {
            id: draft.id.clone(),
            object: "file".to_owned(),
            bytes,
            created_at,
            filename: new.filename,
            purpose: new.purpose,
            status: "processed".to_owned(),
            expires_at: expires,
            status_details: None,
        };
        let stored = StoredFile {
            file: file.clone(),
            blob_key: draft.blob_key.clone(),
            declared_bytes: None,
            declared_sha256: None,
        };
        match self.insert_file(project, draft.created_ms, stored).await {
            Ok(()) => {}
            Err(FilesError::Storage(crate::ports::StorageError::Conflict)) => {
                // An earlier attempt with the same reserved id finished first; its record points
                // at the same blob key, so the bytes stay.
                Janitor::new(self).cancel(&draft.guard).await?;
                let (_, existing) = self.live_file(project, &draft.id).await?;
                return Ok(existing.file);
            }
            Err(err) => {
                self.discard_file(&draft).await;
                return Err(err);
            }
        }
        Janitor::new(self).cancel(&draft.guard).await?;
        Ok(file)
    }

    /// Drop a draft's bytes (best effort: the janitor's guard removes them otherwise).
    pub(crate) async fn discard_file(&self, draft: &FileDraft) {
        if self.blobs.delete(&draft.blob_key).await.is_ok() {
            let _ = Janitor::new(self).cancel(&draft.guard).await;
        }
    }

    /// Write the record (and its expiry marker) of a file whose bytes are stored.
    pub(crate) async fn insert_file(
        &self,
        project: &ProjectId,
        created_ms: i64,
        stored: StoredFile,
    ) -> Result<(), FilesError> {
        if let Some(expires_at) = stored.file.expires_at {
            Janitor::new(self)
                .schedule(
                    JanitorTask::ExpireFile {
                        project: project.clone(),
                        file_id: stored.file.id.clone(),
                    },
                    expires_at * 1000,
                )
                .await?;
        }
        let record = crate::records::new_record(
            FILE_KIND.to_owned(),
            stored.file.id.clone(),
            project.to_string(),
            created_ms,
            stored.file.expires_at,
            &stored,
        )?;
        self.state.create(&record).await?;
        Ok(())
    }

    /// The project's live (unexpired) file record.
    pub(crate) async fn live_file(&self, project: &ProjectId, id: &str) -> Result<(Record, StoredFile), FilesError> {
        let record = self
            .owned_record(FILE_KIND, id, project)
            .await?
            .ok_or_else(|| FilesError::file_not_found(id))?;
        let stored: StoredFile = decode(&record)?;
        if stored.file.expires_at.is_some_and(|at| at <= self.now_s()) {
            return Err(FilesError::file_not_found(id));
        }
        Ok((record, stored))
    }

    pub async fn get_file(&self, project: &ProjectId, id: &str) -> Result<FileObject, FilesError> {
        let (record, stored) = self.live_file(project, id).await?;
        Ok(self.settle_direct_upload(record, stored).await?.file)
    }

    pub async fn list_files(&self, project: &ProjectId, query: ListFiles) -> Result<FileList, FilesError> {
        let limit = query.limit.get();
        let mut after = match &query.after {
            None => None,
            Some(id) => Some(cursor_for_id("file-", id).ok_or_else(|| {
                FilesError::invalid(format!("Invalid 'after': '{}' is not a file id.", excerpt(id)), "after")
            })?),
        };
        let now = self.now_s();
        let mut data = Vec::new();
        let mut has_more = false;
        'pages: loop {
            let page = self
                .state
                .list_by_owner(&ListQuery {
                    kind: FILE_KIND.to_owned(),
                    owner: project.to_string(),
                    after: after.take(),
                    limit: (limit + 1).min(1000),
                    order: query.order,
                })
                .await?;
            after = page.records.last().map(Record::cursor);
            for record in page.records {
                let stored: StoredFile = decode(&record)?;
                let expired = stored.file.expires_at.is_some_and(|at| at <= now);
                let wanted = query.purpose.is_none_or(|p| p == stored.file.purpose);
                if expired || !wanted {
                    continue;
                }
                if data.len() == limit {
                    has_more = true;
                    break 'pages;
                }
                data.push(self.settle_direct_upload(record, stored).await?.file);
            }
            if !page.has_more {
                break;
            }
        }
        Ok(FileList {
            object: "list",
            first_id: data.first().map(|f| f.id.clone()),
            last_id: data.last().map(|f| f.id.clone()),
            data,
            has_more,
        })
    }

    /// Delete the metadata, then the bytes unless a running batch still holds them (they go when
    /// it ends). Of concurrent deletes one wins; the others see 404.
    pub async fn delete_file(&self, project: &ProjectId, id: &str) -> Result<FileDeleted, FilesError> {
        for _ in 0..5 {
            let (record, stored) = self.live_file(project, id).await?;
            match self.state.delete(FILE_KIND, id, Some(record.version)).await {
                Ok(true) => {
                    self.delete_unheld_bytes(id, &stored.blob_key).await?;
                    return Ok(FileDeleted {
                        id: id.to_owned(),
                        object: "file",
                        deleted: true,
                    });
                }
                Ok(false) => return Err(FilesError::file_not_found(id)),
                // Changed or deleted meanwhile: look again.
                Err(crate::ports::StorageError::Conflict) => continue,
                Err(err) => return Err(err.into()),
            }
        }
        Err(FilesError::file_not_found(id))
    }

    /// The bytes: a redirect to a presigned URL when the store has them (S3) and the file is
    /// larger than `inline_limit`, else a stream.
    pub async fn file_content(
        &self,
        project: &ProjectId,
        id: &str,
        inline_limit: u64,
    ) -> Result<FileContent, FilesError> {
        let (record, stored) = self.live_file(project, id).await?;
        let stored = self.settle_direct_upload(record, stored).await?;
        if stored.file.status != "processed" {
            return Err(FilesError::invalid(
                format!("File {id} has no content yet (status '{}').", stored.file.status),
                "id",
            ));
        }
        if stored.file.bytes > inline_limit {
            if let Some(url) = self
                .blobs
                .presign_get(&stored.blob_key, DOWNLOAD_URL_TTL, &stored.file.filename)
                .await?
            {
                return Ok(FileContent::Redirect(url));
            }
        }
        let body = self.blobs.get_stream(&stored.blob_key).await?;
        Ok(FileContent::Stream {
            bytes: stored.file.bytes,
            filename: stored.file.filename,
            body,
        })
    }
}
