//! Byte stream wrappers: a size limit and a digest (MD5, SHA-256) computed while the bytes pass through.

use crate::ports::{ByteStream, StorageError};
use futures::StreamExt;
use md5::{Digest, Md5};
use sha2::Sha256;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};

/// Set when a wrapped stream refused its bytes (over its limit, or not the declared digest).
#[derive(Debug, Clone, Default)]
pub(crate) struct RefusedFlag(Arc<AtomicBool>);

impl RefusedFlag {
    pub fn refused(&self) -> bool {
        self.0.load(Ordering::SeqCst)
    }
}

/// Fail the stream (and so the write) as soon as more than `max` bytes went through.
pub(crate) fn limited(stream: ByteStream, max: u64) -> (ByteStream, RefusedFlag) {
    let flag = RefusedFlag::default();
    let seen = Arc::new(std::sync::atomic::AtomicU64::new(0));
    let marker = flag.clone();
    let limited = stream
        .map(move |chunk| {
            let chunk = chunk?;
            let total = seen.fetch_add(chunk.len() as u64, Ordering::SeqCst) + chunk.len() as u64;
            if total > max {
                marker.0.store(true, Ordering::SeqCst);
                Err(StorageError::Invalid(format!("more than {max} bytes")))
            } else {
                Ok(chunk)
            }
        })
        .boxed();
    (limited, flag)
}

/// The digest of everything that went through, read after the stream ended.
#[derive(Clone, Default)]
pub struct DigestTap<D>(Arc<Mutex<D>>);

/// The MD5 of a stream (the server checks an upload's parts with it; `nimbus batch submit`, the
/// bytes it checked).
pub(crate) type Md5Tap = DigestTap<Md5>;

impl<D: Digest + Clone> DigestTap<D> {
    /// The digest's bytes (empty if a hashing thread panicked).
    pub fn digest(&self) -> Vec<u8> {
        self.0
            .lock()
            .map(|hasher| hasher.clone().finalize().to_vec())
            .unwrap_or_default()
    }

    pub fn hex(&self) -> String {
        hex::encode(self.digest())
    }
}

/// `stream` as it was, and the digest `D` of what it let through.
pub(crate) fn digest_tapped<D: Digest + Clone + Default + Send + 'static>(
    stream: ByteStream,
) -> (ByteStream, DigestTap<D>) {
    let tap = DigestTap::<D>::default();
    let hasher = tap.clone();
    let tapped = stream
        .map(move |chunk| {
            if let Ok(bytes) = &chunk {
                if let Ok(mut h) = hasher.0.lock() {
                    h.update(bytes);
                }
            }
            chunk
        })
        .boxed();
    (tapped, tap)
}

/// Fail the stream (and so the write, before anything becomes visible) at its end when the bytes'
/// SHA-256 is not `expected`.
pub(crate) fn sha256_checked(stream: ByteStream, expected: [u8; 32]) -> (ByteStream, RefusedFlag) {
    let flag = RefusedFlag::default();
    let marker = flag.clone();
    let (tapped, tap) = digest_tapped::<Sha256>(stream);
    let verdict = futures::stream::once(async move {
        if tap.digest() == expected {
            None
        } else {
            marker.0.store(true, Ordering::SeqCst);
            Some(Err(StorageError::Invalid(
                "the bytes are not the declared SHA-256".to_owned(),
            )))
        }
    })
    .filter_map(futures::future::ready);
    (tapped.chain(verdict).boxed(), flag)
}

/// `stream` as it was, and the MD5 of what it let through.
pub fn md5_tapped(stream: ByteStream) -> (ByteStream, Md5Tap) {
    digest_tapped::<Md5>(stream)
}
