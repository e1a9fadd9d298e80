//! The embedded stack under one data directory: `state.sqlite3`, `blobs/`, in-process queue,
//! `sealing.key` (the key sealing credentials at rest, made on first use), and `parameters/` (the
//! providers' `ssm::` keys, one file each).

use super::Adapters;
use crate::adapters::embedded::{
    FileBlobStore, LocalParameters, LocalSealer, MemoryQueue, PrometheusMetrics, SqliteStateStore,
};
use crate::ports::StorageError;
use std::path::Path;
use std::sync::Arc;

pub fn state_store(data_dir: &Path) -> Result<SqliteStateStore, StorageError> {
    SqliteStateStore::open(&data_dir.join("state.sqlite3"))
}

pub fn blob_store(data_dir: &Path) -> Result<FileBlobStore, StorageError> {
    FileBlobStore::open(data_dir.join("blobs"))
}

/// The sealer of `data_dir`'s key file (made on first use).
pub fn sealer(data_dir: &Path) -> LocalSealer {
    LocalSealer::in_data_dir(data_dir)
}

pub fn adapters(data_dir: &Path) -> Result<Adapters, StorageError> {
    Ok(Adapters::new(
        Arc::new(state_store(data_dir)?),
        Arc::new(blob_store(data_dir)?),
        Arc::new(MemoryQueue::new()),
    )
    .with_sealer(Arc::new(sealer(data_dir)))
    .with_provider_secrets(Arc::new(LocalParameters::in_data_dir(data_dir)))
    .with_metrics(Arc::new(PrometheusMetrics::new()))
    .with_record_retention_days(
        super::limits::record_retention_days_from_env().map_err(|e| StorageError::Invalid(e.to_string()))?,
    )
    .with_due_index_shards(
        super::limits::due_index_shards_from_env().map_err(|e| StorageError::Invalid(e.to_string()))?,
    ))
}
