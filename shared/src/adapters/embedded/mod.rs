//! Embedded adapters: local files, SQLite (crash-safe, WAL), and an in-process queue.

mod data_dir_lock;
mod file_blobs;
mod memory_queue;
mod queue_workers;
#[cfg(feature = "embedded")]
mod sqlite_state;

pub use data_dir_lock::{DataDirLock, DataDirLockError};
pub use file_blobs::FileBlobStore;
pub use memory_queue::MemoryQueue;
pub use queue_workers::spawn_queue_workers;
#[cfg(feature = "embedded")]
pub use sqlite_state::SqliteStateStore;
