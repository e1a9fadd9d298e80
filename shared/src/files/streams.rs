//! Byte stream wrappers: a size limit and an MD5 digest computed while the bytes pass through.

use crate::ports::{ByteStream, StorageError};
use futures::StreamExt;
use md5::{Digest, Md5};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};

/// Set when a limited stream went over its limit.
#[derive(Debug, Clone, Default)]
pub(crate) struct LimitFlag(Arc<AtomicBool>);

impl LimitFlag {
    pub fn exceeded(&self) -> bool {
        self.0.load(Ordering::SeqCst)
    }
}

/// Fail the stream (and so the write) as soon as more than `max` bytes went through.
pub(crate) fn limited(stream: ByteStream, max: u64) -> (ByteStream, LimitFlag) {
    let flag = LimitFlag::default();
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

/// The MD5 of everything that went through, read after the stream ended.
#[derive(Clone, Default)]
pub struct Md5Tap(Arc<Mutex<Md5>>);

impl Md5Tap {
    pub fn hex(&self) -> String {
        self.0
            .lock()
            .map(|hasher| hex::encode(hasher.clone().finalize()))
            .unwrap_or_default()
    }
}

/// `stream` as it was, and the MD5 of what it let through (the server checks an upload's parts
/// with it; `nimbus batch submit`, the bytes it checked).
pub fn md5_tapped(stream: ByteStream) -> (ByteStream, Md5Tap) {
    let tap = Md5Tap::default();
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
