//! The embedded stack under one data directory: `state.sqlite3`, `blobs/`, in-process queue, and
//! `sealing.key` (the key sealing credentials at rest, made on first use).

use super::Adapters;
use crate::adapters::embedded::{FileBlobStore, LocalSealer, MemoryQueue, PrometheusMetrics, SqliteStateStore};
use crate::ports::StorageError;
use std::path::Path;
use std::sync::Arc;

pub fn state_store(data_dir: &Path) -> Result<SqliteStateStore, StorageError> {
    SqliteStateStore::open(&data_dir.join("state.sqlite3"))
}

pub fn blob_store(data_dir: &Path) -> Result<FileBlobStore, StorageError> {
    FileBlobStore::open(data_dir.join("blobs"))
}

pub fn adapters(data_dir: &Path) -> Result<Adapters, StorageError> {
    Ok(Adapters::new(
        Arc::new(state_store(data_dir)?),
        Arc::new(blob_store(data_dir)?),
        Arc::new(MemoryQueue::new()),
    )
    .with_sealer(Arc::new(LocalSealer::in_data_dir(data_dir)))
    .with_metrics(Arc::new(PrometheusMetrics::new()))
    .with_record_retention_days(super::limits::record_retention_days_from_env().map_err(StorageError::Invalid)?)
    .with_due_index_shards(super::limits::due_index_shards_from_env().map_err(StorageError::Invalid)?))
}
