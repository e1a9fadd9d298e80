//! Arming the poller: its every-minute schedule runs only while there is due work, so an idle stack
//! costs nothing. An hourly heartbeat pass (always on) finds work that came due within the next
//! [`ARM_HORIZON_MS`] and turns the schedule back on.
//!
//! One record (kind [`ARM_KIND`]) says whether the schedule should be on; it is written before the
//! switch is flipped, with a conditional write on its version, so a writer that saw "armed" can
//! trust that the poller re-checks for work after turning the schedule off:
//! - whoever writes due work soon due calls [`Arming::arm`] after the write: one read while armed;
//!   while disarmed, the record is written "armed" and the schedule turned on;
//! - a poller pass ends with [`Arming::settle`]: with work soon due, the record says "armed" and the
//!   schedule is turned on (again: a flip lost to a crash heals within the hour); without, the record
//!   says "disarmed", the schedule is turned off, and after [`Arming::with_settle`]'s pause (the
//!   owner index is eventually consistent) the record and the work are looked at once more: a
//!   record moved on since the disarming write means a creator armed (and its `EnableRule` may have
//!   come before this pass's `DisableRule`), work found means a creator wrote it having read
//!   "armed" before the disarming write; either way the schedule is turned on again.
//!
//! A writer that dies between its "armed" write and the switch, or a poller that dies between the
//! switch and its re-check, leaves work waiting for the next heartbeat: at most an hour late.

use super::Scheduler;
use crate::ports::{Record, ScheduleSwitch, StateStore, StorageError, SwitchError};
use crate::records::{put, PutDecision, PutOutcome};
use serde::Serialize;
use serde_json::json;
use std::sync::Arc;
use std::time::Duration;

/// The kind of the one record that says whether the poller's schedule should be on.
pub(crate) const ARM_KIND: &str = "scheduler_arm";
const ARM_ID: &str = "poller";
/// Work due within this keeps the schedule on: more than the heartbeat's hour, so work due before
/// the next heartbeat is never missed.
pub(crate) const ARM_HORIZON_MS: i64 = 65 * 60 * 1000;
/// Conditional-write races one change of the record retries before giving up with the conflict.
const WRITE_ATTEMPTS: u32 = 5;
/// The pause between turning the schedule off and looking for work once more.
const DEFAULT_SETTLE: Duration = Duration::from_secs(2);

/// Why arming or disarming failed.
#[derive(Debug, thiserror::Error)]
pub enum ArmError {
    #[error(transparent)]
    Storage(#[from] StorageError),
    #[error(transparent)]
    Switch(#[from] SwitchError),
}

/// What a pass's [`Arming::settle`] left the schedule as.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum ScheduleState {
    /// Work is due within the horizon: the schedule stays on.
    On,
    /// Idle: the schedule is off until new work or the heartbeat.
    Off,
    /// Turned off, then work was found on the second look: on again.
    OnAgain,
}

/// Arms and disarms the poller's schedule through the arm record and the switch.
#[derive(Clone)]
pub struct Arming {
    state: Arc<dyn StateStore>,
    switch: Arc<dyn ScheduleSwitch>,
    settle: Duration,
}

/// Whether the arm record says "armed" (a record that cannot be read as one does not).
fn is_armed(record: &Record) -> bool {
    record
        .body
        .get("armed")
        .and_then(serde_json::Value::as_bool)
        .unwrap_or(false)
}

/// The arm record saying `armed` (its version is set when it is written).
fn arm_record(armed: bool) -> Record {
    Record {
        kind: ARM_KIND.to_owned(),
        id: ARM_ID.to_owned(),
        owner: ARM_ID.to_owned(),
        created_at_ms: 0,
        version: 0,
        expires_at: None,
        body: json!({ "armed": armed }),
    }
}

impl Arming {
    pub fn new(state: Arc<dyn StateStore>, switch: Arc<dyn ScheduleSwitch>) -> Self {
        Self {
            state,
            switch,
            settle: DEFAULT_SETTLE,
        }
    }

    /// The pause before the second look for work after disarming.
    pub fn with_settle(mut self, settle: Duration) -> Self {
        self.settle = settle;
        self
    }

    /// Due work was just written: make sure the schedule runs. One read while armed.
    pub(crate) async fn arm(&self) -> Result<(), ArmError> {
        if self.record(true).await?.wrote {
            self.switch.set_enabled(true).await?;
        }
        Ok(())
    }

    /// The end of a poller pass: on while `scheduler` has work within the horizon, else off (with
    /// the second look described in the module's documentation).
    pub async fn settle(&self, scheduler: &Scheduler, now_ms: i64) -> Result<ScheduleState, ArmError> {
        if scheduler.has_work_before(now_ms + ARM_HORIZON_MS).await {
            self.turn_on().await?;
            return Ok(ScheduleState::On);
        }
        let disarmed = self.record(false).await?;
        self.switch.set_enabled(false).await?;
        tokio::time::sleep(self.settle).await;
        // A creator that armed after the disarming write may have switched the rule on before
        // this pass switched it off: the record, moved on, says so.
        let current = self.state.get(ARM_KIND, ARM_ID).await?;
        let rearmed = current.is_none_or(|record| record.version != disarmed.version || is_armed(&record));
        if rearmed || scheduler.has_work_before(now_ms + ARM_HORIZON_MS).await {
            self.turn_on().await?;
            return Ok(ScheduleState::OnAgain);
        }
        Ok(ScheduleState::Off)
    }

    /// The record says "armed" and the schedule is on, whatever they said before.
    async fn turn_on(&self) -> Result<(), ArmError> {
        self.record(true).await?;
        self.switch.set_enabled(true).await?;
        Ok(())
    }

    /// Make the record say `armed`.
    async fn record(&self, armed: bool) -> Result<PutOutcome, StorageError> {
        put(self.state.as_ref(), ARM_KIND, ARM_ID, WRITE_ATTEMPTS, |current| {
            Ok(match current {
                Some(current) if is_armed(current) == armed => PutDecision::Keep,
                _ => PutDecision::Write(arm_record(armed)),
            })
        })
        .await
    }
}
