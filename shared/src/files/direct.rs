//! Direct uploads: the client PUTs the bytes straight to storage (a presigned S3 URL), skipping the
//! API and Lambda's payload limit. The file exists at once with status `uploaded` and becomes
//! `processed` once its bytes have landed (checked whenever it is read, and by the sweep).

use super::limits::{check_new_file, expires_at};
use super::streams::{limited, sha256_checked};
use super::sweep::{Janitor, JanitorTask};
use super::{project_prefix, FilesError, FilesService, StoredFile, FILE_KIND};
use crate::openai::files::{ExpiresAfter, FileObject, FilePurpose};
use crate::ports::{ByteStream, OneTimePut, ProjectId, Record, StorageError};
use crate::user_text::excerpt;
use std::time::Duration;

/// How long the upload URL is valid; an upload that has not landed by then is removed.
pub(crate) const DIRECT_UPLOAD_TTL: Duration = Duration::from_secs(3600);

/// Where to send the bytes. `upload_url` is `None` for stores without presigned URLs (the local
/// server then takes the bytes itself at `PUT /v1/files/{id}/content`); `upload_headers` are the
/// headers the PUT must carry as given (signed into the URL).
pub(crate) struct DirectUploadTarget {
    pub file: FileObject,
    pub upload_url: Option<String>,
    pub upload_headers: Vec<(String, String)>,
    pub expires_at: i64,
}

/// What the client declares of a direct upload's bytes.
pub(crate) struct DeclaredBytes {
    pub bytes: u64,
    /// The SHA-256 as 64 hex digits (what `sha256sum` prints), when declared.
    pub sha256: Option<String>,
}

/// The declared SHA-256's 32 bytes, or a 400 naming `sha256`.
fn parse_sha256(hex_digits: &str) -> Result<[u8; 32], FilesError> {
    let mut digest = [0u8; 32];
    hex::decode_to_slice(hex_digits, &mut digest).map_err(|_| {
        FilesError::invalid(
            format!(
                "'sha256' must be 64 hexadecimal digits (as sha256sum prints them), not '{}'.",
                excerpt(hex_digits)
            ),
            "sha256",
        )
    })?;
    Ok(digest)
}

impl FilesService {
    pub(crate) async fn create_direct_upload(
        &self,
        project: &ProjectId,
        filename: String,
        purpose: FilePurpose,
        declared: DeclaredBytes,
        expires_after: Option<ExpiresAfter>,
    ) -> Result<DirectUploadTarget, FilesError> {
        let bytes = declared.bytes;
        check_new_file(&filename, purpose, bytes)?;
        let sha256 = declared.sha256.as_deref().map(parse_sha256).transpose()?;
        let (id, created_ms) = self.mint("file-");
        let created_at = created_ms.div_euclid(1000);
        let expires = expires_at(created_at, purpose, expires_after)?;
        let blob_key = format!("{}/files/{id}", project_prefix(project));
        let deadline = created_at + i64::try_from(DIRECT_UPLOAD_TTL.as_secs()).unwrap_or(3600);
        // If the bytes never land, the sweep removes the file after the URL expired.
        Janitor::new(self)
            .schedule(
                JanitorTask::DirectUploadDeadline {
                    project: project.clone(),
                    file_id: id.clone(),
                },
                (deadline + 60) * 1000,
            )
            .await?;
        let file = FileObject {
            id,
            object: "file".to_owned(),
            bytes,
            created_at,
            filename,
            purpose,
            status: "uploaded".to_owned(),
            expires_at: expires,
            status_details: None,
        };
        let presigned = self
            .blobs
            .presign_put(&blob_key, DIRECT_UPLOAD_TTL, &OneTimePut { bytes, sha256 })
            .await?;
        self.insert_file(
            project,
            created_ms,
            StoredFile {
                file: file.clone(),
                blob_key,
                declared_bytes: Some(bytes),
                declared_sha256: sha256.map(hex::encode),
            },
        )
        .await?;
        let (upload_url, upload_headers) = match presigned {
            Some(put) => (Some(put.url), put.headers),
            None => (None, Vec::new()),
        };
        Ok(DirectUploadTarget {
            file,
            upload_url,
            upload_headers,
            expires_at: deadline,
        })
    }

    /// The bytes of a direct upload, for stores without presigned URLs (the local server). Where
    /// the store presigns (S3), the bytes go to the presigned URL only: it alone stores them once
    /// with the declared checksum, so this path refuses.
    pub(crate) async fn put_direct_content(
        &self,
        project: &ProjectId,
        id: &str,
        body: ByteStream,
    ) -> Result<FileObject, FilesError> {
        let (record, stored) = self.live_file(project, id).await?;
        let declared = match (stored.file.status.as_str(), stored.declared_bytes) {
            ("uploaded", Some(declared)) => declared,
            _ => {
                return Err(FilesError::invalid(
                    format!(
                        "File {id} is not waiting for a direct upload (status '{}').",
                        stored.file.status
                    ),
                    "id",
                ))
            }
        };
        let probe = OneTimePut {
            bytes: declared,
            sha256: None,
        };
        if self
            .blobs
            .presign_put(&stored.blob_key, DIRECT_UPLOAD_TTL, &probe)
            .await?
            .is_some()
        {
            return Err(FilesError::invalid(
                format!("File {id} takes its bytes at the upload_url its direct upload returned, not here."),
                "id",
            ));
        }
        // Bytes already landed (the status is settled when the file is next read): never replaced.
        if self.blobs.size(&stored.blob_key).await?.is_some() {
            let settled = self.settle_direct_upload(record, stored).await?;
            return Err(FilesError::invalid(
                format!(
                    "File {id} has its bytes already (status '{}'); a direct upload is sent once.",
                    settled.file.status
                ),
                "id",
            ));
        }
        let (body, too_long) = limited(body, declared);
        // Checked before the bytes become visible, as S3 checks a presigned PUT's signed checksum.
        let (body, other_digest) = match stored.declared_sha256.as_deref() {
            Some(expected) => {
                let (body, flag) = sha256_checked(body, parse_sha256(expected)?);
                (body, Some(flag))
            }
            None => (body, None),
        };
        // A failed write leaves nothing under the key (`BlobStore::put_stream`): nothing to delete,
        // and so nothing another upload stored is ever deleted here.
        if let Err(err) = self.blobs.put_stream(&stored.blob_key, body).await {
            return Err(if too_long.refused() {
                FilesError::TooLarge {
                    message: format!("File {id} was declared as {declared} bytes; more were sent."),
                }
            } else if other_digest.is_some_and(|flag| flag.refused()) {
                FilesError::invalid(
                    format!("The bytes sent for file {id} do not have the declared SHA-256; nothing was stored."),
                    "sha256",
                )
            } else {
                err.into()
            });
        }
        Ok(self.settle_direct_upload(record, stored).await?.file)
    }

    /// Turn an `uploaded` file whose bytes have landed into `processed` (or `error` when the size
    /// differs from the declared one). Other files come back unchanged.
    pub(crate) async fn settle_direct_upload(
        &self,
        record: Record,
        stored: StoredFile,
    ) -> Result<StoredFile, FilesError> {
        let (Some(declared), "uploaded") = (stored.declared_bytes, stored.file.status.as_str()) else {
            return Ok(stored);
        };
        let Some(size) = self.blobs.size(&stored.blob_key).await? else {
            return Ok(stored);
        };
        let mut settled = stored.clone();
        if size == declared {
            settled.file.status = "processed".to_owned();
        } else {
            settled.file.status = "error".to_owned();
            settled.file.status_details = Some(format!(
                "Expected {declared} bytes but {size} arrived; the bytes were discarded."
            ));
            self.blobs.delete(&stored.blob_key).await?;
        }
        match self.replace_body(&record, &settled).await {
            Ok(()) => Ok(settled),
            // Someone else settled it first: theirs is the same answer.
            Err(StorageError::Conflict) => match self.state.get(FILE_KIND, &record.id).await? {
                Some(current) => Ok(super::decode(&current)?),
                None => Err(FilesError::file_not_found(&record.id)),
            },
            Err(err) => Err(err.into()),
        }
    }
}
