//! Blob storage: object bytes by key (S3, or local files).

use super::StorageError;
use async_trait::async_trait;
use bytes::Bytes;
use futures::stream::BoxStream;
use std::time::Duration;

/// A stream of byte chunks read from a blob.
pub type ByteStream = BoxStream<'static, Result<Bytes, StorageError>>;

/// Object storage addressed by `/`-separated keys such as `projects/p1/files/file-…`.
#[async_trait]
pub trait BlobStore: Send + Sync {
    /// Store `body` under `key`, replacing any object there.
    async fn put(&self, key: &str, body: Bytes) -> Result<(), StorageError>;

    /// Store a stream under `key` without holding it whole in memory; returns the bytes written.
    /// If the stream yields an error, nothing becomes visible under `key`.
    async fn put_stream(&self, key: &str, body: ByteStream) -> Result<u64, StorageError>;

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

    /// Remove every object whose key starts with `prefix/`; returns how many.
    async fn delete_prefix(&self, prefix: &str) -> Result<u64, StorageError>;

    /// A URL that downloads the object for `ttl`, for stores that have one (S3); `None` otherwise.
    async fn presign_get(&self, key: &str, ttl: Duration, filename: &str) -> Result<Option<String>, StorageError>;

    /// A URL that uploads the object with one HTTP PUT for `ttl` (S3); `None` where the store has
    /// none. The URL is good for exactly the body `put` describes (its length, and its SHA-256 when
    /// given, are signed) and only while nothing is stored under `key`: once the bytes landed, the
    /// URL cannot replace them.
    async fn presign_put(
        &self,
        key: &str,
        ttl: Duration,
        put: &OneTimePut,
    ) -> Result<Option<PresignedPut>, StorageError>;
}

/// The body a presigned PUT is good for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct OneTimePut {
    /// The exact length in bytes.
    pub bytes: u64,
    /// The SHA-256 digest of the body, when the client declared it.
    pub sha256: Option<[u8; 32]>,
}

/// A presigned PUT: the URL, and the headers the client must send with it exactly as given (they
/// are signed; `Content-Length` is not among them, the client's HTTP library sends it).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PresignedPut {
    pub url: String,
    pub headers: Vec<(String, String)>,
}

/// Reject keys that could escape a prefix or that S3 and file systems treat differently.
pub(crate) fn validate_key(key: &str) -> Result<(), StorageError> {
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
