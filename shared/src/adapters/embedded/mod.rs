//! Embedded adapters: local files, SQLite (crash-safe, WAL), an in-process queue, a local key
//! file sealing credentials at rest, and provider keys as files (`parameters/`).

mod data_dir_lock;
mod file_blobs;
#[cfg(feature = "embedded")]
mod local_parameters;
#[cfg(feature = "embedded")]
mod local_sealer;
mod memory_queue;
mod prometheus_metrics;
mod queue_workers;
#[cfg(feature = "embedded")]
mod sqlite_state;

pub use data_dir_lock::DataDirLock;
pub use file_blobs::FileBlobStore;
#[cfg(feature = "embedded")]
pub(crate) use local_parameters::LocalParameters;
#[cfg(feature = "embedded")]
pub use local_sealer::LocalSealer;
pub use memory_queue::MemoryQueue;
pub use prometheus_metrics::PrometheusMetrics;
pub use queue_workers::spawn_queue_workers;
#[cfg(feature = "embedded")]
pub use sqlite_state::SqliteStateStore;
