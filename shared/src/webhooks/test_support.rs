//! A clock the tests move by hand and an in-memory state store, for the webhooks unit tests.

use crate::adapters::embedded::SqliteStateStore;
use crate::ports::{Clock, StateStore};
use std::sync::atomic::{AtomicI64, Ordering};
use std::sync::Arc;

/// Starts at a fixed time; [`ManualClock::advance_ms`] moves it.
pub struct ManualClock(AtomicI64);

impl ManualClock {
    pub const START_MS: i64 = 1_750_000_000_000;

    pub fn new() -> Arc<Self> {
        Arc::new(Self(AtomicI64::new(Self::START_MS)))
    }

    pub fn advance_ms(&self, ms: i64) {
        self.0.fetch_add(ms, Ordering::SeqCst);
    }
}

impl Clock for ManualClock {
    fn now_unix_ms(&self) -> i64 {
        self.0.load(Ordering::SeqCst)
    }
}

pub fn memory_state() -> Arc<dyn StateStore> {
    Arc::new(SqliteStateStore::in_memory().expect("in-memory SQLite"))
}
