//! Direct uploads: the client PUTs the bytes straight to storage (a presigned S3 URL), skipping the
//! API and Lambda's payload limit. The file exists at once with status `uploaded` and becomes
//! `processed` once its bytes have landed (checked whenever it is read, and by the sweep).

use super::limits::{check_new_file, expires_at};
use super::streams::limited;
use super::sweep::{Janitor, JanitorTask};
use super::{project_prefix, FilesError, FilesService, StoredFile, FILE_KIND};
use crate::openai::files::{ExpiresAfter, FileObject, FilePurpose};
use crate::ports::{ByteStream, Record, StorageError};
use std::time::Duration;

/// How long the upload URL is valid; an upload that has not landed by then is removed.
pub const DIRECT_UPLOAD_TTL: Duration = Duration::from_secs(3600);

/// Where to send the bytes. `upload_url` is `None` for stores without presigned URLs (the local
/// server then takes the bytes itself at `PUT /v1/files/{id}/content`).
pub struct DirectUploadTarget {
    pub file: FileObject,
    pub upload_url: Option<String>,
    pub expires_at: i64,
}

impl FilesService {
    pub async fn create_direct_upload(
        &self,
        project: &str,
        filename: String,
        purpose: FilePurpose,
        bytes: u64,
        expires_after: Option<ExpiresAfter>,
    ) -> Result<DirectUploadTarget, FilesError> {
        check_new_file(&filename, purpose, bytes)?;
        let (id, created_ms) = self.mint("file-");
        let created_at = created_ms.div_euclid(1000);
        let expires = expires_at(created_at, purpose, expires_after)?;
        let blob_key = format!("{}/files/{id}", project_prefix(project));
        let deadline = created_at + i64::try_from(DIRECT_UPLOAD_TTL.as_secs()).unwrap_or(3600);
        // If the bytes never land, the sweep removes the file after the URL expired.
        Janitor::new(self)
            .schedule(
                JanitorTask::DirectUploadDeadline {
                    project: project.to_owned(),
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
        let upload_url = self.blobs.presign_put(&blob_key, DIRECT_UPLOAD_TTL, bytes).await?;
        self.insert_file(
            project,
            created_ms,
            StoredFile {
                file: file.clone(),
                blob_key,
                declared_bytes: Some(bytes),
            },
        )
        .await?;
        Ok(DirectUploadTarget {
            file,
            upload_url,
            expires_at: deadline,
        })
    }

    /// The bytes of a direct upload, for stores without presigned URLs (the local server).
    pub async fn put_direct_content(
        &self,
        project: &str,
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
        let (body, flag) = limited(body, declared);
        if let Err(err) = self.blobs.put_stream(&stored.blob_key, body).await {
            let _ = self.blobs.delete(&stored.blob_key).await;
            return Err(if flag.exceeded() {
                FilesError::TooLarge {
                    message: format!("File {id} was declared as {declared} bytes; more were sent."),
                }
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
                Some(current) => super::decode(&current),
                None => Err(FilesError::file_not_found(&record.id)),
            },
            Err(err) => Err(err.into()),
        }
    }
}
