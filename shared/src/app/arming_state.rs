//! The state store of a function that writes due work: after each write of work due within
//! [`ARM_HORIZON_MS`] (a due-index entry, a janitor task, an unfinished batch's marker) it arms the
//! poller's schedule ([`Arming::arm`]), so no code path that makes work can forget to.

use crate::batches::ACTIVE_BATCH_KIND;
use crate::files::sweep::JANITOR_KIND;
use crate::ports::{Clock, ListQuery, Page, Record, StateStore, StorageError};
use crate::scheduler::{Arming, ARM_HORIZON_MS, DUE_WORK_KIND};
use async_trait::async_trait;
use std::sync::Arc;

/// The kinds of record that are work for the poller.
const WORK_KINDS: &[&str] = &[DUE_WORK_KIND, JANITOR_KIND, ACTIVE_BATCH_KIND];

/// `inner`, arming the poller's schedule after writes of work soon due.
pub struct ArmingState {
    inner: Arc<dyn StateStore>,
    arming: Arming,
    clock: Arc<dyn Clock>,
}

impl ArmingState {
    /// `arming` must write its record through `inner` (or the store `inner` wraps), not through this.
    pub fn new(inner: Arc<dyn StateStore>, arming: Arming, clock: Arc<dyn Clock>) -> Self {
        Self { inner, arming, clock }
    }

    fn is_work_soon(&self, record: &Record) -> bool {
        WORK_KINDS.contains(&record.kind.as_str())
            && record.created_at_ms <= self.clock.now_unix_ms().saturating_add(ARM_HORIZON_MS)
    }

    /// Arm after the work was written. A failure is logged, not returned: the work is stored, and
    /// the hourly heartbeat pass turns the schedule on for it.
    async fn arm_for<'a>(&self, mut written: impl Iterator<Item = &'a Record>) {
        if written.any(|record| self.is_work_soon(record)) {
            if let Err(err) = self.arming.arm().await {
                tracing::error!(error = %err, "could not arm the poller's schedule; the hourly pass will");
            }
        }
    }
}

#[async_trait]
impl StateStore for ArmingState {
    async fn create(&self, record: &Record) -> Result<(), StorageError> {
        self.inner.create(record).await?;
        self.arm_for(std::iter::once(record)).await;
        Ok(())
    }

    async fn get(&self, kind: &str, id: &str) -> Result<Option<Record>, StorageError> {
        self.inner.get(kind, id).await
    }

    async fn update(&self, record: &Record, expected_version: u64) -> Result<(), StorageError> {
        self.inner.update(record, expected_version).await?;
        self.arm_for(std::iter::once(record)).await;
        Ok(())
    }

    async fn update_all(&self, updates: &[(Record, u64)]) -> Result<(), StorageError> {
        self.inner.update_all(updates).await?;
        self.arm_for(updates.iter().map(|(record, _)| record)).await;
        Ok(())
    }

    async fn delete(&self, kind: &str, id: &str, expected_version: Option<u64>) -> Result<bool, StorageError> {
        self.inner.delete(kind, id, expected_version).await
    }

    async fn list_by_owner(&self, query: &ListQuery) -> Result<Page, StorageError> {
        self.inner.list_by_owner(query).await
    }

    async fn list_heads_by_owner(&self, query: &ListQuery) -> Result<Page, StorageError> {
        self.inner.list_heads_by_owner(query).await
    }
}
