//! Time and identifiers. The business layer mints every id and timestamp through these.

use std::time::{SystemTime, UNIX_EPOCH};
use uuid::Uuid;

/// Wall-clock time source.
pub trait Clock: Send + Sync {
    /// Milliseconds since the Unix epoch.
    fn now_unix_ms(&self) -> i64;

    /// Seconds since the Unix epoch (what OpenAI objects carry).
    fn now_unix_s(&self) -> i64 {
        self.now_unix_ms().div_euclid(1000)
    }
}

/// Identifier source. Ids are UUIDv7 so that they sort by creation time.
pub trait IdSource: Send + Sync {
    /// A fresh UUIDv7.
    fn new_uuid(&self) -> Uuid;

    /// A fresh id with an OpenAI-style prefix, e.g. `chatcmpl-0190…`.
    fn prefixed(&self, prefix: &str) -> String {
        format!("{prefix}{}", self.new_uuid().simple())
    }
}

/// Milliseconds since the epoch encoded in a UUIDv7 (0 for ids without a timestamp).
pub(crate) fn uuid_unix_ms(uuid: &Uuid) -> i64 {
    uuid.get_timestamp()
        .map(|t| {
            let (secs, nanos) = t.to_unix();
            i64::try_from(secs).unwrap_or(0) * 1000 + i64::from(nanos / 1_000_000)
        })
        .unwrap_or(0)
}

/// The system clock.
#[derive(Debug, Default, Clone, Copy)]
pub struct SystemClock;

impl Clock for SystemClock {
    fn now_unix_ms(&self) -> i64 {
        SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map(|d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX))
            .unwrap_or(0)
    }
}

/// UUIDv7 ids from the system clock and the OS random source.
#[derive(Debug, Default, Clone, Copy)]
pub struct UuidV7Ids;

impl IdSource for UuidV7Ids {
    fn new_uuid(&self) -> Uuid {
        Uuid::now_v7()
    }
}

/// A clock shifted by a fixed offset: runs scheduled work "as of" another time (ops and tests).
pub struct OffsetClock<C> {
    pub inner: C,
    pub offset_ms: i64,
}

impl<C: Clock> Clock for OffsetClock<C> {
    fn now_unix_ms(&self) -> i64 {
        self.inner.now_unix_ms() + self.offset_ms
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_are_v7_and_time_ordered() {
        let ids = UuidV7Ids;
        let a = ids.new_uuid();
        let b = ids.new_uuid();
        assert_eq!(a.get_version_num(), 7);
        assert!(a < b);
        assert!(ids.prefixed("file-").starts_with("file-"));
    }

    #[test]
    fn seconds_derive_from_millis() {
        struct Fixed;
        impl Clock for Fixed {
            fn now_unix_ms(&self) -> i64 {
                1_700_000_000_999
            }
        }
        assert_eq!(Fixed.now_unix_s(), 1_700_000_000);
    }
}
