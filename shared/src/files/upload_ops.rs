//! The Uploads API: a large file sent in parts (each small enough for one Lambda request), then
//! assembled in order into one file, streaming, with the declared size and optional MD5 checked.

use super::limits::{check_filename, max_bytes_for, parse_purpose, too_large, MAX_PART_BYTES, UPLOAD_TTL_S};
use super::streams::{limited, md5_tapped};
use super::sweep::{Janitor, JanitorTask};
use super::{cursor_for_id, decode, project_prefix, FilesError, FilesService, StoredFile, PART_KIND, UPLOAD_KIND};
use crate::idempotency::{fingerprint, IdempotencyKeys, Reservation};
use crate::openai::files::{CreateUploadRequest, FileObject, UploadObject, UploadPart};
use crate::ports::{ByteStream, ListOrder, ListQuery, ProjectId, Record, StorageError};
use futures::StreamExt;
use serde::{Deserialize, Serialize};
use std::collections::HashSet;
use std::sync::Arc;

/// The `Idempotency-Key` scopes of creating and of completing an upload.
const CREATE_SCOPE: &str = "uploads";
const COMPLETE_SCOPE: &str = "upload_completions";

#[derive(Debug, Clone, Serialize, Deserialize)]
struct StoredPart {
    part: UploadPart,
    bytes: u64,
    blob_key: String,
}

/// Parts live under `uploads/` (not the project's prefix) so that one bucket lifecycle rule can
/// expire whatever an interrupted upload leaves behind.
fn parts_prefix(project: &ProjectId, upload_id: &str) -> String {
    format!("uploads/{project}/{upload_id}/parts")
}

fn upload_not_found(id: &str) -> FilesError {
    FilesError::NotFound {
        what: "Upload",
        id: id.to_owned(),
    }
}

impl FilesService {
    pub async fn create_upload(
        &self,
        project: &ProjectId,
        request: CreateUploadRequest,
    ) -> Result<UploadObject, FilesError> {
        self.create_upload_once(project, request, None).await
    }

    /// [`FilesService::create_upload`] with an `Idempotency-Key`: a retry with the same key and
    /// parameters answers with the upload the first request created, as it is now (pending,
    /// completed with its `file`, cancelled or expired); other parameters are refused
    /// ([`FilesError::KeyReused`]).
    pub(crate) async fn create_upload_once(
        &self,
        project: &ProjectId,
        request: CreateUploadRequest,
        idempotency_key: Option<&str>,
    ) -> Result<UploadObject, FilesError> {
        let purpose = parse_purpose(&request.purpose)?;
        check_filename(&request.filename, purpose).map_err(|err| match err {
            FilesError::Invalid { message, .. } => FilesError::invalid(message, "filename"),
            other => other,
        })?;
        if request.mime_type.trim().is_empty() {
            return Err(FilesError::invalid("'mime_type' must not be empty.", "mime_type"));
        }
        if request.bytes > max_bytes_for(purpose) {
            return Err(too_large(purpose));
        }
        if let Some(after) = request.expires_after.clone() {
            // Checked now so that a bad value fails before any bytes are sent.
            super::limits::expires_at(0, purpose, Some(after))?;
        }
        let (mut id, mut created_ms) = self.mint("upload_");
        if let Some(key) = idempotency_key {
            let print = fingerprint(&[
                &request.filename,
                &request.purpose,
                &request.bytes.to_string(),
                &request.mime_type,
                &serde_json::to_string(&request.expires_after).map_err(|e| StorageError::Invalid(e.to_string()))?,
            ]);
            match self
                .idempotency()
                .reserve(project, CREATE_SCOPE, key, &id, &print)
                .await?
            {
                Reservation::New => {}
                Reservation::Existing {
                    same_request: false, ..
                } => return Err(FilesError::KeyReused),
                Reservation::Existing { resource_id, .. } => {
                    if let Some(record) = self.owned_record(UPLOAD_KIND, &resource_id, project).await? {
                        return Ok(self.as_now(decode::<StoredUpload>(&record)?.upload));
                    }
                    // The first request reserved the id but did not get to create the upload.
                    created_ms =
                        cursor_for_id("upload_", &resource_id).map_or(created_ms, |cursor| cursor.created_at_ms);
                    id = resource_id;
                }
            }
        }
        let created_at = created_ms.div_euclid(1000);
        let upload = UploadObject {
            id: id.clone(),
            object: "upload".to_owned(),
            bytes: request.bytes,
            created_at,
            filename: request.filename,
            purpose,
            status: "pending".to_owned(),
            expires_at: created_at + UPLOAD_TTL_S,
            file: None,
        };
        Janitor::new(self)
            .schedule(
                JanitorTask::ExpireUpload {
                    project: project.clone(),
                    upload_id: id.clone(),
                },
                upload.expires_at * 1000,
            )
            .await?;
        let record = crate::records::new_record(
            UPLOAD_KIND,
            id,
            project.to_string(),
            created_ms,
            Some(upload.expires_at + 7 * 24 * 3600),
            &StoredUpload {
                upload: upload.clone(),
                expires_after: request.expires_after,
            },
        )?;
        match self.state.create(&record).await {
            Ok(()) => Ok(upload),
            // A concurrent request with the same key created it first: answer with that upload.
            Err(StorageError::Conflict) if idempotency_key.is_some() => {
                match self.owned_record(UPLOAD_KIND, &record.id, project).await? {
                    Some(existing) => Ok(self.as_now(decode::<StoredUpload>(&existing)?.upload)),
                    None => Err(StorageError::Conflict.into()),
                }
            }
            Err(err) => Err(err.into()),
        }
    }

    fn idempotency(&self) -> IdempotencyKeys {
        IdempotencyKeys::new(Arc::clone(&self.state), Arc::clone(&self.clock))
    }

    /// An upload as it stands now: a pending one past its expiry is expired (the sweep may not
    /// have marked it yet).
    fn as_now(&self, mut upload: UploadObject) -> UploadObject {
        if upload.status == "pending" && upload.expires_at <= self.now_s() {
            "expired".clone_into(&mut upload.status);
        }
        upload
    }

    /// The upload, which must still take parts (pending and not expired).
    async fn pending_upload(&self, project: &ProjectId, id: &str) -> Result<(Record, StoredUpload), FilesError> {
        let record = self
            .owned_record(UPLOAD_KIND, id, project)
            .await?
            .ok_or_else(|| upload_not_found(id))?;
        let stored: StoredUpload = decode(&record)?;
        let status = if stored.upload.status == "pending" && stored.upload.expires_at <= self.now_s() {
            "expired"
        } else {
            stored.upload.status.as_str()
        };
        if status != "pending" {
            return Err(FilesError::invalid(
                format!("Upload {id} is {status}: it accepts no more changes."),
                "upload_id",
            ));
        }
        Ok((record, stored))
    }

    pub(crate) async fn add_upload_part(
        &self,
        project: &ProjectId,
        upload_id: &str,
        data: ByteStream,
    ) -> Result<UploadPart, FilesError> {
        self.pending_upload(project, upload_id).await?;
        let (part_id, created_ms) = self.mint("part_");
        let blob_key = format!("{}/{part_id}", parts_prefix(project, upload_id));
        let (data, flag) = limited(data, MAX_PART_BYTES);
        let bytes = match self.blobs.put_stream(&blob_key, data).await {
            Ok(bytes) => bytes,
            Err(err) => {
                let _ = self.blobs.delete(&blob_key).await;
                return Err(if flag.refused() {
                    FilesError::TooLarge {
                        message: format!("An upload part may be at most {} MB.", MAX_PART_BYTES / 1024 / 1024),
                    }
                } else {
                    err.into()
                });
            }
        };
        let part = UploadPart {
            id: part_id.clone(),
            object: "upload.part".to_owned(),
            created_at: created_ms.div_euclid(1000),
            upload_id: upload_id.to_owned(),
        };
        let record = crate::records::new_record(
            PART_KIND,
            part_id,
            upload_id,
            created_ms,
            None,
            &StoredPart {
                part: part.clone(),
                bytes,
                blob_key: blob_key.clone(),
            },
        )?;
        self.state.create(&record).await?;
        // Completed or cancelled meanwhile: this part will never be used.
        if let Err(err) = self.pending_upload(project, upload_id).await {
            self.blobs.delete(&blob_key).await?;
            self.state.delete(PART_KIND, &record.id, None).await?;
            return Err(err);
        }
        Ok(part)
    }

    /// [`FilesService::complete_upload`] with an `Idempotency-Key`: a retry with the same key,
    /// upload, parts and MD5 answers with the completed upload (a first attempt that did not
    /// finish is finished now); other parameters are refused ([`FilesError::KeyReused`]).
    pub(crate) async fn complete_upload_once(
        &self,
        project: &ProjectId,
        upload_id: &str,
        part_ids: &[String],
        md5: Option<&str>,
        idempotency_key: Option<&str>,
    ) -> Result<UploadObject, FilesError> {
        if let Some(key) = idempotency_key {
            let mut print: Vec<&str> = vec![upload_id, md5.unwrap_or_default()];
            print.extend(part_ids.iter().map(String::as_str));
            match self
                .idempotency()
                .reserve(project, COMPLETE_SCOPE, key, upload_id, &fingerprint(&print))
                .await?
            {
                Reservation::New => {}
                Reservation::Existing {
                    same_request: false, ..
                } => return Err(FilesError::KeyReused),
                Reservation::Existing { .. } => {
                    if let Some(record) = self.owned_record(UPLOAD_KIND, upload_id, project).await? {
                        let stored: StoredUpload = decode(&record)?;
                        if stored.upload.status == "completed" {
                            return Ok(stored.upload);
                        }
                    }
                }
            }
        }
        self.complete_upload(project, upload_id, part_ids, md5).await
    }

    pub async fn complete_upload(
        &self,
        project: &ProjectId,
        upload_id: &str,
        part_ids: &[String],
        md5: Option<&str>,
    ) -> Result<UploadObject, FilesError> {
        let (record, stored) = self.pending_upload(project, upload_id).await?;
        if part_ids.is_empty() {
            return Err(FilesError::invalid(
                "'part_ids' must list at least one part.",
                "part_ids",
            ));
        }
        let mut seen = HashSet::new();
        let mut parts = Vec::with_capacity(part_ids.len());
        for part_id in part_ids {
            if !seen.insert(part_id.as_str()) {
                return Err(FilesError::invalid(
                    format!("Part {} is listed twice.", crate::user_text::excerpt(part_id)),
                    "part_ids",
                ));
            }
            let part = self
                .state
                .get(PART_KIND, part_id)
                .await?
                .filter(|r| r.owner == upload_id)
                .ok_or_else(|| {
                    FilesError::invalid(
                        format!(
                            "Part {} is not a part of upload {upload_id}.",
                            crate::user_text::excerpt(part_id)
                        ),
                        "part_ids",
                    )
                })?;
            parts.push(decode::<StoredPart>(&part)?);
        }
        let total: u64 = parts.iter().map(|p| p.bytes).sum();
        if total != stored.upload.bytes {
            return Err(FilesError::invalid(
                format!(
                    "The parts hold {total} bytes but the upload was created with bytes={}.",
                    stored.upload.bytes
                ),
                "part_ids",
            ));
        }

        let (file_id, file_created_ms) = self.mint("file-");
        let blob_key = format!("{}/files/{file_id}", project_prefix(project));
        let janitor = Janitor::new(self);
        let guard = janitor.guard_blob(super::FILE_KIND, &file_id, &blob_key).await?;
        let blobs = self.blobs.clone();
        let keys: Vec<String> = parts.iter().map(|p| p.blob_key.clone()).collect();
        let joined: ByteStream = futures::stream::iter(keys)
            .then(move |key| {
                let blobs = blobs.clone();
                async move { blobs.get_stream(&key).await }
            })
            .flat_map(|opened| match opened {
                Ok(stream) => stream,
                Err(err) => futures::stream::once(async move { Err::<bytes::Bytes, StorageError>(err) }).boxed(),
            })
            .boxed();
        let (joined, digest) = md5_tapped(joined);
        let assembled = self.blobs.put_stream(&blob_key, joined).await;
        let fail = |err: FilesError| async {
            let _ = self.blobs.delete(&blob_key).await;
            let _ = janitor.cancel(&guard).await;
            Err::<UploadObject, FilesError>(err)
        };
        let written = match assembled {
            Ok(written) => written,
            Err(err) => {
                // A concurrent cancel or completion removed the parts: report the upload's state.
                let err = match self.pending_upload(project, upload_id).await {
                    Err(changed) => changed,
                    Ok(_) => err.into(),
                };
                return fail(err).await;
            }
        };
        if written != total {
            return fail(FilesError::Storage(StorageError::Backend(format!(
                "assembled {written} bytes, expected {total}"
            ))))
            .await;
        }
        if let Some(expected) = md5 {
            if !digest.hex().eq_ignore_ascii_case(expected.trim()) {
                return fail(FilesError::invalid(
                    format!(
                        "The MD5 of the assembled file is {}, not the expected {expected}.",
                        digest.hex()
                    ),
                    "md5",
                ))
                .await;
            }
        }
        let created_at = file_created_ms.div_euclid(1000);
        let file = FileObject {
            id: file_id.clone(),
            object: "file".to_owned(),
            bytes: written,
            created_at,
            filename: stored.upload.filename.clone(),
            purpose: stored.upload.purpose,
            status: "processed".to_owned(),
            expires_at: super::limits::expires_at(created_at, stored.upload.purpose, stored.expires_after.clone())?,
            status_details: None,
        };
        let mut completed = stored.clone();
        completed.upload.status = "completed".to_owned();
        completed.upload.file = Some(file.clone());
        self.insert_file(
            project,
            file_created_ms,
            StoredFile {
                file,
                blob_key: blob_key.clone(),
                declared_bytes: None,
                declared_sha256: None,
            },
        )
        .await?;
        if let Err(err) = self.replace_body(&record, &completed).await {
            // Completed or cancelled concurrently: undo this file.
            let _ = self.state.delete(super::FILE_KIND, &file_id, None).await;
            return fail(match err {
                StorageError::Conflict => {
                    FilesError::invalid(format!("Upload {upload_id} changed while completing."), "upload_id")
                }
                other => other.into(),
            })
            .await;
        }
        janitor.cancel(&guard).await?;
        self.discard_parts(project, upload_id).await?;
        Ok(completed.upload)
    }

    pub async fn cancel_upload(&self, project: &ProjectId, upload_id: &str) -> Result<UploadObject, FilesError> {
        let (record, stored) = self.pending_upload(project, upload_id).await?;
        let mut cancelled = stored;
        cancelled.upload.status = "cancelled".to_owned();
        match self.replace_body(&record, &cancelled).await {
            Ok(()) => {}
            Err(StorageError::Conflict) => {
                return Err(FilesError::invalid(
                    format!("Upload {upload_id} changed while cancelling."),
                    "upload_id",
                ))
            }
            Err(err) => return Err(err.into()),
        }
        self.discard_parts(project, upload_id).await?;
        Ok(cancelled.upload)
    }

    /// Delete every part's bytes and records.
    pub(crate) async fn discard_parts(&self, project: &ProjectId, upload_id: &str) -> Result<(), FilesError> {
        self.blobs.delete_prefix(&parts_prefix(project, upload_id)).await?;
        let mut after = None;
        loop {
            let page = self
                .state
                .list_by_owner(&ListQuery {
                    kind: PART_KIND.to_owned(),
                    owner: upload_id.to_owned(),
                    after: after.take(),
                    limit: 500,
                    order: ListOrder::Asc,
                })
                .await?;
            after = page.records.last().map(Record::cursor);
            for part in &page.records {
                self.state.delete(PART_KIND, &part.id, None).await?;
            }
            if !page.has_more {
                return Ok(());
            }
        }
    }

    /// Mark a pending upload expired and drop its parts (the sweep calls this when it is due).
    pub(crate) async fn expire_upload(&self, project: &ProjectId, upload_id: &str) -> Result<(), FilesError> {
        let Some(record) = self.owned_record(UPLOAD_KIND, upload_id, project).await? else {
            return Ok(());
        };
        let mut stored: StoredUpload = decode(&record)?;
        if stored.upload.status == "pending" {
            stored.upload.status = "expired".to_owned();
            match self.replace_body(&record, &stored).await {
                Ok(()) => {}
                // Completed or cancelled at the last moment: their own clean-up runs.
                Err(StorageError::Conflict) => return Ok(()),
                Err(err) => return Err(err.into()),
            }
        }
        if stored.upload.status != "completed" {
            self.discard_parts(project, upload_id).await?;
        }
        Ok(())
    }
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub(crate) struct StoredUpload {
    upload: UploadObject,
    #[serde(default)]
    expires_after: Option<crate::openai::files::ExpiresAfter>,
}
