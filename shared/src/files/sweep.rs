//! The janitor: markers of work due at a time (expiry, abandoned uploads, blobs written before their
//! record). Markers are records of kind `janitor` under one owner, created with `created_at_ms` =
//! the due time, so listing them in order yields exactly the due ones first. The sweep (the
//! poller's schedule in AWS, a timer locally) runs due tasks; every task is idempotent, so two
//! sweeps at once or a sweep that crashed half-way are harmless.

use super::{decode, FilesError, FilesService, StoredFile, FILE_KIND};
use crate::ports::state::earliest_created_at;
use crate::ports::{ListOrder, ListQuery, ProjectId, Record, StorageError};
use crate::scheduler::{ScheduleError, ScheduledTask};
use async_trait::async_trait;
use serde::{Deserialize, Serialize};

/// The kind of a janitor task (its `created_at_ms` is when it is due).
pub(crate) const JANITOR_KIND: &str = "janitor";
const KIND: &str = JANITOR_KIND;
const OWNER: &str = "_due";
/// A blob written before its record: if no record exists this long after, the blob is removed.
const BLOB_GUARD_GRACE_MS: i64 = 2 * 3600 * 1000;

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "task", rename_all = "snake_case")]
pub(crate) enum JanitorTask {
    /// Delete a file (record, then bytes) once it expired.
    ExpireFile { project: ProjectId, file_id: String },
    /// Expire a pending upload and delete its parts.
    ExpireUpload { project: ProjectId, upload_id: String },
    /// Settle a direct upload, or remove it if its bytes never arrived.
    DirectUploadDeadline { project: ProjectId, file_id: String },
    /// Delete `blob_key` unless the record `kind`/`id` exists.
    BlobGuard { kind: String, id: String, blob_key: String },
    /// Delete the bytes of a deleted file that a holder (a batch) kept past the longest window.
    DeleteHeldBytes { file_id: String, blob_key: String },
}

/// What one sweep did.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct SweepReport {
    pub tasks_run: u64,
    pub tasks_failed: u64,
}

/// Marker handle returned by [`Janitor::guard_blob`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Marker(String);

pub(crate) struct Janitor<'a> {
    files: &'a FilesService,
}

impl<'a> Janitor<'a> {
    pub fn new(files: &'a FilesService) -> Self {
        Self { files }
    }

    /// Run `task` at (or after) `due_ms`.
    pub async fn schedule(&self, task: JanitorTask, due_ms: i64) -> Result<Marker, FilesError> {
        let id = self.files.ids.prefixed("job_");
        let record = crate::records::new_record(KIND.to_owned(), id.clone(), OWNER.to_owned(), due_ms, None, &task)?;
        self.files.state.create(&record).await?;
        Ok(Marker(id))
    }

    /// Protect a blob about to be written: removed later unless its record appears.
    pub(crate) async fn guard_blob(&self, kind: &str, id: &str, blob_key: &str) -> Result<Marker, FilesError> {
        let task = JanitorTask::BlobGuard {
            kind: kind.to_owned(),
            id: id.to_owned(),
            blob_key: blob_key.to_owned(),
        };
        self.schedule(task, self.files.clock.now_unix_ms() + BLOB_GUARD_GRACE_MS)
            .await
    }

    /// The marker's work is no longer needed.
    pub async fn cancel(&self, marker: &Marker) -> Result<(), FilesError> {
        self.files.state.delete(KIND, &marker.0, None).await?;
        Ok(())
    }
}

impl FilesService {
    /// Run every janitor task due by now (at most `max_tasks`).
    pub async fn sweep(&self, max_tasks: usize) -> Result<SweepReport, FilesError> {
        self.sweep_due(self.clock.now_unix_ms(), max_tasks).await
    }

    /// When the earliest janitor task is due, `None` without any.
    pub(crate) async fn next_janitor_task_due(&self) -> Result<Option<i64>, StorageError> {
        earliest_created_at(self.state.as_ref(), KIND, OWNER).await
    }

    /// Run every janitor task due by `now_ms` (at most `max_tasks`).
    pub(crate) async fn sweep_due(&self, now_ms: i64, max_tasks: usize) -> Result<SweepReport, FilesError> {
        let mut report = SweepReport::default();
        let mut after = None;
        while (report.tasks_run + report.tasks_failed) < max_tasks as u64 {
            // Heads first: a task's body is read only once it is due (DynamoDB's owner index
            // holds no bodies, so each is one item read).
            let page = self
                .state
                .list_heads_by_owner(&ListQuery {
                    kind: KIND.to_owned(),
                    owner: OWNER.to_owned(),
                    after: after.take(),
                    limit: 100,
                    order: ListOrder::Asc,
                })
                .await?;
            after = page.records.last().map(Record::cursor);
            for head in &page.records {
                if head.created_at_ms > now_ms {
                    return Ok(report);
                }
                let Some(marker) = self.state.get(KIND, &head.id).await? else {
                    // Done by a concurrent sweep.
                    continue;
                };
                if marker.created_at_ms > now_ms {
                    continue;
                }
                let result = match decode::<JanitorTask>(&marker) {
                    Ok(task) => self.run_task(task).await,
                    Err(err) => Err(err.into()),
                };
                match result {
                    Ok(()) => {
                        self.state.delete(KIND, &marker.id, None).await?;
                        report.tasks_run += 1;
                    }
                    Err(err) => {
                        tracing::warn!(marker = %marker.id, error = %err, "janitor task failed; it stays due");
                        report.tasks_failed += 1;
                    }
                }
            }
            if !page.has_more {
                break;
            }
        }
        Ok(report)
    }

    async fn run_task(&self, task: JanitorTask) -> Result<(), FilesError> {
        match task {
            JanitorTask::ExpireFile { project, file_id } => {
                let Some(record) = self.owned_record(FILE_KIND, &file_id, &project).await? else {
                    return Ok(());
                };
                let stored: StoredFile = decode(&record)?;
                if stored.file.expires_at.is_some_and(|at| at <= self.now_s()) {
                    match self.state.delete(FILE_KIND, &file_id, Some(record.version)).await {
                        Ok(_) | Err(StorageError::Conflict) => {}
                        Err(err) => return Err(err.into()),
                    }
                    self.delete_unheld_bytes(&file_id, &stored.blob_key).await?;
                }
                Ok(())
            }
            JanitorTask::ExpireUpload { project, upload_id } => self.expire_upload(&project, &upload_id).await,
            JanitorTask::DirectUploadDeadline { project, file_id } => {
                let Some(record) = self.owned_record(FILE_KIND, &file_id, &project).await? else {
                    return Ok(());
                };
                let stored = self.settle_direct_upload(record.clone(), decode(&record)?).await?;
                if stored.file.status == "uploaded" {
                    self.state.delete(FILE_KIND, &file_id, None).await?;
                    self.blobs.delete(&stored.blob_key).await?;
                }
                Ok(())
            }
            JanitorTask::DeleteHeldBytes { file_id, blob_key } => self.delete_held_bytes(&file_id, &blob_key).await,
            JanitorTask::BlobGuard { kind, id, blob_key } => {
                if self.state.get(&kind, &id).await?.is_none() {
                    self.blobs.delete(&blob_key).await?;
                }
                Ok(())
            }
        }
    }
}

/// The janitor's sweep as a scheduled task (`files_sweep` in the scheduler's report).
pub(crate) struct FilesSweep {
    files: FilesService,
}

impl FilesSweep {
    /// The most janitor tasks one pass runs; the rest wait for the next pass.
    pub(crate) const MAX_TASKS_PER_PASS: usize = 10_000;

    pub fn new(files: FilesService) -> Self {
        Self { files }
    }
}

#[async_trait]
impl ScheduledTask for FilesSweep {
    fn name(&self) -> &'static str {
        "files_sweep"
    }

    async fn run(&self, now_ms: i64) -> Result<serde_json::Value, ScheduleError> {
        let report = self
            .files
            .sweep_due(now_ms, Self::MAX_TASKS_PER_PASS)
            .await
            .map_err(|err| match err {
                FilesError::Storage(err) => ScheduleError::Storage(err),
                other => ScheduleError::Task(other.to_string()),
            })?;
        serde_json::to_value(report).map_err(|e| ScheduleError::Task(e.to_string()))
    }

    async fn next_due(&self) -> Result<Option<i64>, ScheduleError> {
        Ok(self.files.next_janitor_task_due().await?)
    }
}
