//! Blob storage: object bytes by key (S3, or local files).

use super::StorageError;
use async_trait::async_trait;
use bytes::Bytes;
use futures::stream::BoxStream;

/// A stream of byte chunks read from a blob.
pub type ByteStream = BoxStream<'static, Result<Bytes, StorageError>>;

/// Object storage addressed by `/`-separated keys such as `projects/p1/files/file-…`.
#[async_trait]
pub trait BlobStore: Send + Sync {
    /// Store `body` under `key`, replacing any object there.
    async fn put(&self, key: &str, body: Bytes) -> Result<(), StorageError>;

    /// The whole object. Prefer [`BlobStore::get_stream`] for objects of unbounded size.
    async fn get(&self, key: &str) -> Result<Bytes, StorageError>;

    /// Bytes `start..end` (end exclusive) of the object, clamped to its size.
    async fn get_range(&self, key: &str, start: u64, end: u64) -> Result<Bytes, StorageError>;

    /// The object as a stream of chunks, never held whole in memory.
    async fn get_stream(&self, key: &str) -> Result<ByteStream, StorageError>;

    /// The object's size in bytes, or `None` when it does not exist.
    async fn size(&self, key: &str) -> Result<Option<u64>, StorageError>;

    /// Remove the object. Deleting a missing object succeeds.
    async fn delete(&self, key: &str) -> Result<(), StorageError>;
}

/// Reject keys that could escape a prefix or that S3 and file systems treat differently.
pub fn validate_key(key: &str) -> Result<(), StorageError> {
    let bad = key.is_empty()
        || key.len() > 1024
        || key.starts_with('/')
        || key.ends_with('/')
        || key.contains('\\')
        || key.contains('\0')
        || key
            .split('/')
            .any(|part| part.is_empty() || part == "." || part == "..");
    if bad {
        Err(StorageError::Invalid(format!("blob key `{key}`")))
    } else {
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::validate_key;

    #[test]
    fn keys_cannot_escape_or_be_empty() {
        assert!(validate_key("projects/p/files/f1").is_ok());
        for bad in ["", "/abs", "a//b", "a/../b", "a/./b", "trailing/", "a\\b"] {
            assert!(validate_key(bad).is_err(), "{bad} should be rejected");
        }
    }
}
