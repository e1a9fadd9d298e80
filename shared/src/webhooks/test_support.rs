//! A clock the tests move by hand, an in-memory state store and a sealer, for the webhooks unit
//! tests.

use crate::adapters::embedded::{LocalSealer, SqliteStateStore};
use crate::ports::{Clock, CredentialSealer, StateStore};
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

/// A local-key sealer (one key per test process, in the temporary directory).
pub fn test_sealer() -> Arc<dyn CredentialSealer> {
    let dir = std::env::temp_dir().join(format!("nimbus-webhooks-tests-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("a temporary directory");
    Arc::new(LocalSealer::in_data_dir(&dir))
}
