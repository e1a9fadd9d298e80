//! A record's payload: inline in the state record, or in a blob when its JSON is large.

use crate::ports::{BlobStore, StorageError};
use bytes::Bytes;
use serde::de::DeserializeOwned;
use serde::Serialize;
use serde_json::{Map, Value};

/// A payload whose JSON is larger than this (256 KiB) goes to the blob store.
pub const SPILL_THRESHOLD_BYTES: usize = 256 * 1024;

const INLINE: &str = "payload";
const IN_BLOB: &str = "payload_blob";

/// Put `payload` into `body`: inline, or written to `blob_key` first and named there. Whether it
/// went to the blob.
pub(super) async fn stash(
    blobs: &dyn BlobStore,
    blob_key: &str,
    payload: &impl Serialize,
    body: &mut Map<String, Value>,
) -> Result<bool, StorageError> {
    let bytes = serde_json::to_vec(payload).map_err(|e| StorageError::Invalid(format!("record payload: {e}")))?;
    if bytes.len() > SPILL_THRESHOLD_BYTES {
        blobs.put(blob_key, Bytes::from(bytes)).await?;
        body.insert(IN_BLOB.to_owned(), Value::String(blob_key.to_owned()));
        return Ok(true);
    }
    let value = serde_json::from_slice(&bytes).map_err(|e| StorageError::Invalid(format!("record payload: {e}")))?;
    body.insert(INLINE.to_owned(), value);
    Ok(false)
}

/// The payload of a stored `body`; [`StorageError::NotFound`] when its blob is gone.
pub(super) async fn unstash<T: DeserializeOwned>(blobs: &dyn BlobStore, body: &Value) -> Result<T, StorageError> {
    let corrupt = |e: serde_json::Error| StorageError::Backend(format!("corrupt record payload: {e}"));
    if let Some(key) = body.get(IN_BLOB).and_then(Value::as_str) {
        let bytes = blobs.get(key).await?;
        return serde_json::from_slice(&bytes).map_err(corrupt);
    }
    match body.get(INLINE) {
        Some(value) => T::deserialize(value).map_err(corrupt),
        None => Err(StorageError::Backend("record without payload".into())),
    }
}

/// The string field `name` of a stored body.
pub(super) fn body_str<'a>(body: &'a Value, name: &str) -> Option<&'a str> {
    body.get(name).and_then(Value::as_str)
}
