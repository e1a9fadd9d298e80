//! Blobs as files under a root folder. Writes go to a temporary file then rename, so a crash never
//! leaves a half-written object visible.

use crate::ports::blob::validate_key;
use crate::ports::{BlobStore, ByteStream, OneTimePut, PresignedPut, StorageError};
use async_trait::async_trait;
use bytes::Bytes;
use futures::StreamExt;
use std::io::SeekFrom;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;
use tokio::io::{AsyncReadExt, AsyncSeekExt, AsyncWriteExt};
use tokio::sync::RwLock;
use tokio_stream::wrappers::ReceiverStream;

/// Blob store rooted at a local directory.
#[derive(Debug, Clone)]
pub struct FileBlobStore {
    root: PathBuf,
    /// Puts place their files under it shared, a prefix delete removes folders under it alone:
    /// a put never finds its folder removed between making it and moving its file in, and a
    /// removal never finds a file appearing in a folder it empties (as with an object store,
    /// both succeed whatever the order).
    folders: Arc<RwLock<()>>,
}

impl FileBlobStore {
    /// Use (and create) `root` as the store's directory.
    pub fn open(root: impl Into<PathBuf>) -> Result<Self, StorageError> {
        let root = root.into();
        std::fs::create_dir_all(root.join(".tmp")).map_err(io_error)?;
        Ok(Self {
            root,
            folders: Arc::new(RwLock::new(())),
        })
    }

    /// Remove temporary files of interrupted writes that are older than `older_than` (every one
    /// with zero: only when no writer can be alive, e.g. under the data directory's lock).
    /// Returns how many were removed.
    pub async fn remove_temp_files(&self, older_than: Duration) -> Result<u64, StorageError> {
        let mut entries = match tokio::fs::read_dir(self.root.join(".tmp")).await {
            Ok(entries) => entries,
            Err(err) if err.kind() == std::io::ErrorKind::NotFound => return Ok(0),
            Err(err) => return Err(io_error(err)),
        };
        let now = std::time::SystemTime::now();
        let mut removed = 0;
        while let Some(entry) = entries.next_entry().await.map_err(io_error)? {
            let Ok(meta) = entry.metadata().await else {
                continue;
            };
            let age = meta
                .modified()
                .ok()
                .and_then(|modified| now.duration_since(modified).ok())
                .unwrap_or(Duration::ZERO);
            if meta.is_file() && age >= older_than {
                match tokio::fs::remove_file(entry.path()).await {
                    Ok(()) => removed += 1,
                    Err(err) if err.kind() == std::io::ErrorKind::NotFound => {}
                    Err(err) => return Err(io_error(err)),
                }
            }
        }
        Ok(removed)
    }

    fn path_of(&self, key: &str) -> Result<PathBuf, StorageError> {
        validate_key(key)?;
        Ok(self.root.join("objects").join(key))
    }
}

fn io_error(err: std::io::Error) -> StorageError {
    if err.kind() == std::io::ErrorKind::NotFound {
        StorageError::NotFound
    } else {
        StorageError::Backend(err.to_string())
    }
}

/// Move a written temporary file to its key's path (its folder made first), or remove it.
async fn place(tmp: &Path, path: &Path) -> Result<(), StorageError> {
    let made = match path.parent() {
        Some(parent) => tokio::fs::create_dir_all(parent).await,
        None => Ok(()),
    };
    let moved = match made {
        Ok(()) => tokio::fs::rename(tmp, path).await,
        Err(err) => Err(err),
    };
    if let Err(err) = moved {
        let _ = tokio::fs::remove_file(tmp).await;
        return Err(io_error(err));
    }
    Ok(())
}

async fn open_existing(path: &Path) -> Result<tokio::fs::File, StorageError> {
    tokio::fs::File::open(path).await.map_err(io_error)
}

#[async_trait]
impl BlobStore for FileBlobStore {
    async fn put(&self, key: &str, body: Bytes) -> Result<(), StorageError> {
        let path = self.path_of(key)?;
        let tmp = self.root.join(".tmp").join(uuid::Uuid::now_v7().simple().to_string());
        let mut file = tokio::fs::File::create(&tmp).await.map_err(io_error)?;
        file.write_all(&body).await.map_err(io_error)?;
        file.sync_all().await.map_err(io_error)?;
        drop(file);
        let _shared = self.folders.read().await;
        place(&tmp, &path).await
    }

    async fn put_stream(&self, key: &str, mut body: ByteStream) -> Result<u64, StorageError> {
        let path = self.path_of(key)?;
        let tmp = self.root.join(".tmp").join(uuid::Uuid::now_v7().simple().to_string());
        let mut file = tokio::fs::File::create(&tmp).await.map_err(io_error)?;
        let mut written: u64 = 0;
        let result: Result<(), StorageError> = async {
            while let Some(chunk) = body.next().await {
                let chunk = chunk?;
                file.write_all(&chunk).await.map_err(io_error)?;
                written += chunk.len() as u64;
            }
            file.sync_all().await.map_err(io_error)
        }
        .await;
        drop(file);
        if let Err(err) = result {
            let _ = tokio::fs::remove_file(&tmp).await;
            return Err(err);
        }
        let _shared = self.folders.read().await;
        place(&tmp, &path).await?;
        Ok(written)
    }

    async fn get(&self, key: &str) -> Result<Bytes, StorageError> {
        let path = self.path_of(key)?;
        tokio::fs::read(&path).await.map(Bytes::from).map_err(io_error)
    }

    async fn get_range(&self, key: &str, start: u64, end: u64) -> Result<Bytes, StorageError> {
        let path = self.path_of(key)?;
        let mut file = open_existing(&path).await?;
        let size = file.metadata().await.map_err(io_error)?.len();
        let end = end.min(size);
        if start >= end {
            return Ok(Bytes::new());
        }
        file.seek(SeekFrom::Start(start)).await.map_err(io_error)?;
        let len = usize::try_from(end - start).map_err(|_| StorageError::Invalid("range too large".into()))?;
        let mut buf = vec![0u8; len];
        file.read_exact(&mut buf).await.map_err(io_error)?;
        Ok(Bytes::from(buf))
    }

    async fn get_stream(&self, key: &str) -> Result<ByteStream, StorageError> {
        let path = self.path_of(key)?;
        let mut file = open_existing(&path).await?;
        let (tx, rx) = tokio::sync::mpsc::channel::<Result<Bytes, StorageError>>(4);
        tokio::spawn(async move {
            let mut buf = vec![0u8; 256 * 1024];
            loop {
                match file.read(&mut buf).await {
                    Ok(0) => break,
                    Ok(n) => {
                        if tx.send(Ok(Bytes::copy_from_slice(&buf[..n]))).await.is_err() {
                            break;
                        }
                    }
                    Err(err) => {
                        let _ = tx.send(Err(io_error(err))).await;
                        break;
                    }
                }
            }
        });
        Ok(ReceiverStream::new(rx).boxed())
    }

    async fn size(&self, key: &str) -> Result<Option<u64>, StorageError> {
        let path = self.path_of(key)?;
        match tokio::fs::metadata(&path).await {
            Ok(meta) => Ok(Some(meta.len())),
            Err(err) if err.kind() == std::io::ErrorKind::NotFound => Ok(None),
            Err(err) => Err(io_error(err)),
        }
    }

    async fn delete(&self, key: &str) -> Result<(), StorageError> {
        let path = self.path_of(key)?;
        match tokio::fs::remove_file(&path).await {
            Ok(()) => Ok(()),
            Err(err) if err.kind() == std::io::ErrorKind::NotFound => Ok(()),
            Err(err) => Err(io_error(err)),
        }
    }

    async fn delete_prefix(&self, prefix: &str) -> Result<u64, StorageError> {
        let path = self.path_of(prefix)?;
        let _alone = self.folders.write().await;
        let count = count_files(&path).await?;
        match tokio::fs::remove_dir_all(&path).await {
            Ok(()) => Ok(count),
            Err(err) if err.kind() == std::io::ErrorKind::NotFound => Ok(0),
            Err(err) => Err(io_error(err)),
        }
    }

    async fn presign_get(&self, key: &str, _ttl: Duration, _filename: &str) -> Result<Option<String>, StorageError> {
        validate_key(key)?;
        Ok(None)
    }

    async fn presign_put(
        &self,
        key: &str,
        _ttl: Duration,
        _put: &OneTimePut,
    ) -> Result<Option<PresignedPut>, StorageError> {
        validate_key(key)?;
        Ok(None)
    }
}

/// Regular files below `dir` (0 when it does not exist).
async fn count_files(dir: &Path) -> Result<u64, StorageError> {
    let mut count = 0;
    let mut pending = vec![dir.to_path_buf()];
    while let Some(current) = pending.pop() {
        let mut entries = match tokio::fs::read_dir(&current).await {
            Ok(entries) => entries,
            Err(err) if err.kind() == std::io::ErrorKind::NotFound => continue,
            Err(err) => return Err(io_error(err)),
        };
        while let Some(entry) = entries.next_entry().await.map_err(io_error)? {
            let kind = entry.file_type().await.map_err(io_error)?;
            if kind.is_dir() {
                pending.push(entry.path());
            } else {
                count += 1;
            }
        }
    }
    Ok(count)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn temp_file(store_root: &Path, name: &str, age: Duration) -> PathBuf {
        let path = store_root.join(".tmp").join(name);
        let file = std::fs::File::create(&path).unwrap();
        file.set_modified(std::time::SystemTime::now() - age).unwrap();
        path
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_put_succeeds_while_its_folder_is_deleted_under_it() {
        let dir = tempfile::tempdir().unwrap();
        let store = std::sync::Arc::new(FileBlobStore::open(dir.path()).unwrap());
        let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
        let deleter = {
            let (store, stop) = (std::sync::Arc::clone(&store), std::sync::Arc::clone(&stop));
            tokio::spawn(async move {
                while !stop.load(std::sync::atomic::Ordering::SeqCst) {
                    store.delete_prefix("results/batch").await.unwrap();
                    tokio::task::yield_now().await;
                }
            })
        };
        for i in 0..300 {
            let key = format!("results/batch/segment-{i}.jsonl");
            store.put(&key, Bytes::from_static(b"line\n")).await.unwrap();
            let stream = futures::stream::iter([Ok(Bytes::from_static(b"line\n"))]).boxed();
            store.put_stream(&format!("{key}.s"), stream).await.unwrap();
        }
        stop.store(true, std::sync::atomic::Ordering::SeqCst);
        deleter.await.unwrap();
    }

    #[tokio::test]
    async fn temp_files_of_interrupted_writes_are_removed_by_age_or_all_at_once() {
        let dir = tempfile::tempdir().unwrap();
        let store = FileBlobStore::open(dir.path()).unwrap();
        store
            .put("projects/p/files/f1", Bytes::from_static(b"kept"))
            .await
            .unwrap();
        let old = temp_file(dir.path(), "old", Duration::from_secs(2 * 3600));
        let fresh = temp_file(dir.path(), "fresh", Duration::ZERO);

        assert_eq!(store.remove_temp_files(Duration::from_secs(3600)).await.unwrap(), 1);
        assert!(!old.exists() && fresh.exists());
        assert_eq!(store.remove_temp_files(Duration::ZERO).await.unwrap(), 1);
        assert!(!fresh.exists());
        assert_eq!(
            store.get("projects/p/files/f1").await.unwrap(),
            Bytes::from_static(b"kept")
        );
    }
}
