//! One server per data directory: `nimbus serve` holds an exclusive lock on `<data dir>/nimbus.lock`
//! for its lifetime (the OS drops it when the process dies, even on `kill -9`). Holding it proves
//! that no other worker uses the directory's state, which lets the server take over at once what
//! a previous process left running.

use crate::ports::SoleWorkerGuard;
use std::fs::{File, OpenOptions, TryLockError};
use std::io::{Read, Seek, SeekFrom, Write};
use std::path::{Path, PathBuf};

const LOCK_FILE: &str = "nimbus.lock";

/// Why the data directory could not be locked.
#[derive(Debug, thiserror::Error)]
pub enum DataDirLockError {
    #[error(
        "another `nimbus serve`{holder} already uses the data directory {dir}; stop it, or give this one another directory (--data-dir)"
    )]
    Busy { dir: PathBuf, holder: String },
    #[error("cannot lock the data directory {dir}: {source}")]
    Io { dir: PathBuf, source: std::io::Error },
}

/// The exclusive lock on a data directory, held until dropped.
#[derive(Debug)]
pub struct DataDirLock {
    dir: PathBuf,
    _file: File,
}

impl DataDirLock {
    /// Lock `dir` (created if missing), or fail at once if another process holds it.
    pub fn acquire(dir: &Path) -> Result<Self, DataDirLockError> {
        let io = |source| DataDirLockError::Io {
            dir: dir.to_path_buf(),
            source,
        };
        std::fs::create_dir_all(dir).map_err(io)?;
        let mut file = OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .open(dir.join(LOCK_FILE))
            .map_err(io)?;
        match file.try_lock() {
            Ok(()) => {}
            Err(TryLockError::WouldBlock) => {
                let mut pid = String::new();
                let holder = match file.read_to_string(&mut pid) {
                    Ok(_) if !pid.trim().is_empty() => format!(" (pid {})", pid.trim()),
                    _ => String::new(),
                };
                return Err(DataDirLockError::Busy {
                    dir: dir.to_path_buf(),
                    holder,
                });
            }
            Err(TryLockError::Error(err)) => return Err(io(err)),
        }
        // Who holds it, for the message a second server prints.
        file.set_len(0).map_err(io)?;
        file.seek(SeekFrom::Start(0)).map_err(io)?;
        file.write_all(std::process::id().to_string().as_bytes()).map_err(io)?;
        Ok(Self {
            dir: dir.to_path_buf(),
            _file: file,
        })
    }

    /// The locked directory.
    pub fn dir(&self) -> &Path {
        &self.dir
    }
}

/// Holding the lock proves that no other worker uses the directory's state.
impl SoleWorkerGuard for DataDirLock {}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_second_lock_on_the_same_directory_is_refused_until_the_first_is_dropped() {
        let dir = tempfile::tempdir().unwrap();
        let first = DataDirLock::acquire(dir.path()).unwrap();
        let err = DataDirLock::acquire(dir.path()).unwrap_err();
        assert!(matches!(err, DataDirLockError::Busy { .. }), "{err:?}");
        let message = err.to_string();
        assert!(message.contains("already uses the data directory"), "{message}");
        assert!(message.contains(&format!("pid {}", std::process::id())), "{message}");
        drop(first);
        let again = DataDirLock::acquire(dir.path()).unwrap();
        assert_eq!(again.dir(), dir.path());
    }
}
