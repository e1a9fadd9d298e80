//! The one lease of the records work holds: until when one worker holds a record's work (a
//! chunk, a batch's finalization, a provider-native part, an async request, a webhook
//! delivery, a run's share of a model's slots), so that no other worker starts it meanwhile. A worker that dies leaves a lease
//! that expires on its own; a lease is taken and given up with the record's conditional write.
//!
//! Stored as the milliseconds it ends at, 0 when nobody holds it. An absent or `null` value (what
//! async requests wrote before) reads as nobody.

use serde::{Deserialize, Deserializer, Serialize, Serializer};

/// Until when a worker holds a record's work (ms since the epoch); [`LeaseUntil::NONE`]: nobody.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) struct LeaseUntil(i64);

impl LeaseUntil {
    /// Nobody holds it.
    pub(crate) const NONE: Self = Self(0);

    /// Held until `until_ms`.
    pub(crate) fn until(until_ms: i64) -> Self {
        Self(until_ms.max(0))
    }

    /// Whether a worker still holds it at `now_ms` (a lease that ended is nobody's).
    pub(crate) fn held_at(self, now_ms: i64) -> bool {
        self.0 > now_ms
    }

    /// When it ends, if it is held at `now_ms`.
    pub(crate) fn held_until(self, now_ms: i64) -> Option<i64> {
        self.held_at(now_ms).then_some(self.0)
    }

    /// Whether one was taken and not given up (it may have ended since).
    pub(crate) fn is_set(self) -> bool {
        self.0 > 0
    }

    /// When it ends (or ended), if one was taken and not given up.
    pub(crate) fn until_ms(self) -> Option<i64> {
        self.is_set().then_some(self.0)
    }
}

impl Serialize for LeaseUntil {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.serialize_i64(self.0)
    }
}

impl<'de> Deserialize<'de> for LeaseUntil {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        Ok(Self::until(Option::<i64>::deserialize(deserializer)?.unwrap_or(0)))
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[derive(Debug, PartialEq, Serialize, Deserialize)]
    struct Holder {
        #[serde(default)]
        lease_until_ms: LeaseUntil,
    }

    #[test]
    fn a_lease_is_held_until_it_ends_and_nobody_holds_none() {
        let lease = LeaseUntil::until(1_000);
        assert!(lease.held_at(999));
        assert!(!lease.held_at(1_000), "a lease ending now is over");
        assert_eq!(lease.held_until(500), Some(1_000));
        assert_eq!(lease.held_until(2_000), None);
        assert_eq!(lease.until_ms(), Some(1_000), "taken, though ended");
        assert!(!LeaseUntil::NONE.held_at(0));
        assert!(!LeaseUntil::NONE.is_set());
        assert_eq!(LeaseUntil::NONE.until_ms(), None);
    }

    #[test]
    fn it_is_stored_as_milliseconds_and_reads_what_every_record_wrote_before() {
        let stored = serde_json::to_value(Holder {
            lease_until_ms: LeaseUntil::until(42),
        })
        .unwrap();
        assert_eq!(stored, serde_json::json!({"lease_until_ms": 42}));
        for (json, lease) in [
            (r#"{"lease_until_ms": 42}"#, LeaseUntil::until(42)),
            (r#"{"lease_until_ms": 0}"#, LeaseUntil::NONE),
            (r#"{"lease_until_ms": null}"#, LeaseUntil::NONE),
            (r#"{}"#, LeaseUntil::NONE),
        ] {
            assert_eq!(
                serde_json::from_str::<Holder>(json).unwrap().lease_until_ms,
                lease,
                "{json}"
            );
        }
    }
}
