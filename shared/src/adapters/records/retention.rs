//! How long inference and feedback records (and their payload blobs) are kept: a number of days
//! from the record's id time, 0 = forever. The records carry it as their `expires_at` (the
//! state store's TTL attribute; DynamoDB deletes them within a few days of it) and reads treat a
//! record past it as gone, so an expired record is a 404 whether or not it was deleted yet. The
//! blobs (`inferences/`, `feedback/`) expire by the bucket's lifecycle rules with the same number
//! of days (`RecordRetentionDays` in the template).

use crate::ports::Clock;
use std::sync::Arc;

/// The default retention: 90 days.
pub(crate) const DEFAULT_RECORD_RETENTION_DAYS: u32 = 90;

/// The longest retention accepted (10 years); longer is "forever" (0).
pub(crate) const MAX_RECORD_RETENTION_DAYS: u32 = 3650;

const DAY_S: i64 = 24 * 3600;

/// Days to keep records, 0 = forever, and the clock that says what "now" is.
#[derive(Clone)]
pub struct RecordRetention {
    days: u32,
    clock: Arc<dyn Clock>,
}

impl RecordRetention {
    pub fn new(days: u32, clock: Arc<dyn Clock>) -> Self {
        Self { days, clock }
    }

    /// The `expires_at` (unix seconds) of a record created at `created_at_ms`; `None` = forever.
    pub(crate) fn expires_at(&self, created_at_ms: i64) -> Option<i64> {
        (self.days > 0).then(|| {
            created_at_ms
                .div_euclid(1000)
                .saturating_add(i64::from(self.days) * DAY_S)
        })
    }

    /// Whether a record created at `created_at_ms` is past its retention now (its `expires_at`
    /// as written, or as this retention says when it was written without one).
    pub(crate) fn is_past(&self, expires_at: Option<i64>, created_at_ms: i64) -> bool {
        let now_s = self.clock.now_unix_ms().div_euclid(1000);
        expires_at
            .or_else(|| self.expires_at(created_at_ms))
            .is_some_and(|at| at <= now_s)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ports::SystemClock;

    #[test]
    fn records_expire_the_configured_days_after_their_creation_or_never() {
        let retention = RecordRetention::new(90, Arc::new(SystemClock));
        assert_eq!(retention.expires_at(1_000_500), Some(1_000 + 90 * DAY_S));
        let forever = RecordRetention::new(0, Arc::new(SystemClock));
        assert_eq!(forever.expires_at(1_000_500), None);
        let now_ms = SystemClock.now_unix_ms();
        assert!(retention.is_past(None, now_ms - 91 * DAY_S * 1000));
        assert!(!retention.is_past(None, now_ms - 89 * DAY_S * 1000));
        assert!(retention.is_past(Some(now_ms / 1000 - 1), now_ms));
        assert!(!forever.is_past(None, 0));
    }
}
