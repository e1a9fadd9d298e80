//! The poller's arming (scheduler::Arming, ArmingState) on the embedded state store, with a
//! switch that records its flips and can fail: idle passes turn the schedule off, work written
//! through ArmingState turns it on, the second look after disarming catches work written by someone
//! who read "armed" just before, and a crash at any step leaves work at most one heartbeat late.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use super::arming_state::ArmingState;
use crate::adapters::embedded::SqliteStateStore;
use crate::ports::{Clock, ScheduleSwitch, StateStore, SwitchError, SystemClock};
use crate::scheduler::{
    Arming, DueIndex, ScheduleError, ScheduleState, ScheduledTask, Scheduler, ARM_HORIZON_MS, ARM_KIND,
};
use async_trait::async_trait;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

const LANE: &str = "test_work";

/// A switch that remembers every flip; `fail` makes the next flips fail (a crash before the
/// flip); `on_disable` runs once, right after a flip to off (another process acting meanwhile).
#[derive(Default)]
struct FakeSwitch {
    flips: Mutex<Vec<bool>>,
    fail: AtomicBool,
    on_disable: Mutex<Option<tokio::sync::oneshot::Sender<()>>>,
}

impl FakeSwitch {
    fn is_on(&self) -> Option<bool> {
        self.flips.lock().unwrap().last().copied()
    }

    fn flips(&self) -> usize {
        self.flips.lock().unwrap().len()
    }
}

#[async_trait]
impl ScheduleSwitch for FakeSwitch {
    async fn set_enabled(&self, enabled: bool) -> Result<(), SwitchError> {
        if self.fail.load(Ordering::SeqCst) {
            return Err(SwitchError("injected".to_owned()));
        }
        self.flips.lock().unwrap().push(enabled);
        if !enabled {
            if let Some(signal) = self.on_disable.lock().unwrap().take() {
                let _ = signal.send(());
            }
        }
        Ok(())
    }
}

/// The due work of one lane, as the real tasks find theirs.
struct LaneTask(DueIndex);

#[async_trait]
impl ScheduledTask for LaneTask {
    fn name(&self) -> &'static str {
        "lane"
    }

    async fn run(&self, _now_ms: i64) -> Result<serde_json::Value, ScheduleError> {
        Ok(serde_json::json!({}))
    }

    async fn next_due(&self) -> Result<Option<i64>, ScheduleError> {
        Ok(self.0.next_due(LANE).await?)
    }
}

struct Stack {
    state: Arc<dyn StateStore>,
    switch: Arc<FakeSwitch>,
    arming: Arming,
    /// A creator's store: writes of work through it arm.
    creator: DueIndex,
    poller: Scheduler,
}

fn stack() -> Stack {
    let state: Arc<dyn StateStore> = Arc::new(SqliteStateStore::in_memory().unwrap());
    let switch = Arc::new(FakeSwitch::default());
    let arming = Arming::new(Arc::clone(&state), switch.clone()).with_settle(Duration::ZERO);
    let creator_state: Arc<dyn StateStore> = Arc::new(ArmingState::new(
        Arc::clone(&state),
        arming.clone(),
        Arc::new(SystemClock),
    ));
    let poller = Scheduler::new(Arc::new(SystemClock))
        .with_task(Arc::new(LaneTask(DueIndex::new(Arc::clone(&state)))))
        .with_arming(arming.clone());
    Stack {
        creator: DueIndex::new(creator_state),
        state,
        switch,
        arming,
        poller,
    }
}

fn now() -> i64 {
    SystemClock.now_unix_ms()
}

async fn armed(state: &Arc<dyn StateStore>) -> Option<bool> {
    let record = state.get(ARM_KIND, "poller").await.unwrap()?;
    record.body["armed"].as_bool()
}

#[tokio::test]
async fn an_idle_pass_turns_the_schedule_off_and_work_turns_it_on() {
    let s = stack();
    let report = s.poller.run_once().await;
    assert_eq!(report.schedule, Some(ScheduleState::Off));
    assert_eq!((s.switch.is_on(), armed(&s.state).await), (Some(false), Some(false)));

    s.creator.create(LANE, "job-1", now() + 1_000).await.unwrap();
    assert_eq!((s.switch.is_on(), armed(&s.state).await), (Some(true), Some(true)));

    let report = s.poller.run_once().await;
    assert_eq!(report.schedule, Some(ScheduleState::On));
    assert_eq!(s.switch.is_on(), Some(true));
    let json = serde_json::to_value(&report).unwrap();
    assert_eq!(json["schedule"], "on");
}

#[tokio::test]
async fn while_armed_a_creator_pays_one_read_and_no_flip() {
    let s = stack();
    s.creator.create(LANE, "job-1", now()).await.unwrap();
    let flips = s.switch.flips();
    for n in 2..10 {
        s.creator.create(LANE, &format!("job-{n}"), now()).await.unwrap();
    }
    assert_eq!(s.switch.flips(), flips, "already armed: no flip");
}

#[tokio::test]
async fn work_beyond_the_horizon_neither_arms_nor_keeps_the_schedule_on() {
    let s = stack();
    s.creator
        .create(LANE, "next-month", now() + 30 * 24 * 3600 * 1000)
        .await
        .unwrap();
    assert_eq!(
        (s.switch.is_on(), armed(&s.state).await),
        (None, None),
        "no arming for far work"
    );
    assert_eq!(s.poller.run_once().await.schedule, Some(ScheduleState::Off));
    // Within the horizon (the hourly heartbeat's pass sees it coming): on.
    s.creator
        .create(LANE, "within-the-hour", now() + ARM_HORIZON_MS - 60_000)
        .await
        .unwrap();
    assert_eq!(s.poller.run_once().await.schedule, Some(ScheduleState::On));
}

#[tokio::test]
async fn other_records_do_not_arm() {
    let s = stack();
    let creator_state = ArmingState::new(Arc::clone(&s.state), s.arming.clone(), Arc::new(SystemClock));
    let mut record = crate::ports::Record {
        kind: "inference".to_owned(),
        id: "inf-1".to_owned(),
        owner: "p".to_owned(),
        created_at_ms: now(),
        version: 1,
        expires_at: None,
        body: serde_json::json!({}),
    };
    creator_state.create(&record).await.unwrap();
    record.version = 2;
    creator_state.update(&record, 1).await.unwrap();
    assert_eq!(s.switch.flips(), 0);
}

/// A creator wrote its work and read "armed" just before the poller wrote "disarmed": the poller's
/// second look finds the work and turns the schedule on again.
#[tokio::test]
async fn the_second_look_catches_work_written_under_an_armed_record() {
    let s = stack();
    s.arming.arm().await.unwrap();
    let (signal, disabled) = tokio::sync::oneshot::channel();
    *s.switch.on_disable.lock().unwrap() = Some(signal);
    // The late creator writes straight to the store: its arming read happened before the
    // disarming write, so it did not arm.
    let late = DueIndex::new(Arc::clone(&s.state));
    let writer = tokio::spawn(async move {
        disabled.await.unwrap();
        late.create(LANE, "late", now()).await.unwrap();
    });
    let arming = Arming::new(Arc::clone(&s.state), s.switch.clone()).with_settle(Duration::from_millis(200));
    let poller = Scheduler::new(Arc::new(SystemClock))
        .with_task(Arc::new(LaneTask(DueIndex::new(Arc::clone(&s.state)))))
        .with_arming(arming);
    let report = poller.run_once().await;
    writer.await.unwrap();
    assert_eq!(report.schedule, Some(ScheduleState::OnAgain));
    assert_eq!((s.switch.is_on(), armed(&s.state).await), (Some(true), Some(true)));
}

/// A switch whose first flip to off first lets a creator arm, write and finish its work: the
/// creator's `EnableRule` lands before the poller's `DisableRule`.
struct RacingSwitch {
    flips: FakeSwitch,
    creator: tokio::sync::Mutex<Option<futures::future::BoxFuture<'static, ()>>>,
}

#[async_trait]
impl ScheduleSwitch for RacingSwitch {
    async fn set_enabled(&self, enabled: bool) -> Result<(), SwitchError> {
        if !enabled {
            let creator = self.creator.lock().await.take();
            if let Some(creator) = creator {
                creator.await;
            }
        }
        self.flips.set_enabled(enabled).await
    }
}

/// The creator armed after the disarming write and switched the rule on just before the poller
/// switched it off; its work was done before the second look. The record, moved on, tells the
/// poller to switch it on again.
#[tokio::test]
async fn a_creator_that_armed_during_the_disarming_is_not_switched_off() {
    let state: Arc<dyn StateStore> = Arc::new(SqliteStateStore::in_memory().unwrap());
    let switch = Arc::new(RacingSwitch {
        flips: FakeSwitch::default(),
        creator: tokio::sync::Mutex::new(None),
    });
    let arming = Arming::new(Arc::clone(&state), switch.clone()).with_settle(Duration::ZERO);
    let creator = DueIndex::new(Arc::new(ArmingState::new(
        Arc::clone(&state),
        arming.clone(),
        Arc::new(SystemClock),
    )));
    *switch.creator.lock().await = Some(Box::pin(async move {
        creator.create(LANE, "quick", now()).await.unwrap();
        creator.clear(LANE, "quick").await.unwrap();
    }));
    let poller = Scheduler::new(Arc::new(SystemClock))
        .with_task(Arc::new(LaneTask(DueIndex::new(Arc::clone(&state)))))
        .with_arming(arming);
    assert_eq!(poller.run_once().await.schedule, Some(ScheduleState::OnAgain));
    assert_eq!(*switch.flips.flips.lock().unwrap(), vec![true, false, true]);
    assert_eq!(armed(&state).await, Some(true));
    // The next pass, idle, turns it off for good.
    assert_eq!(poller.run_once().await.schedule, Some(ScheduleState::Off));
}

/// A creator that comes after the disarming write sees "disarmed" and arms itself, whatever the
/// poller's switch does meanwhile.
#[tokio::test]
async fn a_creator_after_the_disarming_write_arms_itself() {
    let s = stack();
    assert_eq!(s.poller.run_once().await.schedule, Some(ScheduleState::Off));
    s.creator.create(LANE, "after", now()).await.unwrap();
    assert_eq!((s.switch.is_on(), armed(&s.state).await), (Some(true), Some(true)));
}

/// Crash injection: the switch fails (the process died before flipping it) at each step.
#[tokio::test]
async fn a_crash_at_any_step_leaves_work_at_most_one_heartbeat_late() {
    // (1) A creator dies between its "armed" write and turning the schedule on: its work is
    // stored, the record says armed, the schedule is off.
    let s = stack();
    assert_eq!(s.poller.run_once().await.schedule, Some(ScheduleState::Off));
    s.switch.fail.store(true, Ordering::SeqCst);
    s.creator.create(LANE, "stored", now()).await.unwrap();
    assert_eq!((s.switch.is_on(), armed(&s.state).await), (Some(false), Some(true)));
    // Later creators see "armed" and do not flip; the next pass (the heartbeat's) turns it on.
    s.switch.fail.store(false, Ordering::SeqCst);
    s.creator.create(LANE, "stored-2", now()).await.unwrap();
    assert_eq!(s.switch.is_on(), Some(false));
    assert_eq!(s.poller.run_once().await.schedule, Some(ScheduleState::On));
    assert_eq!(s.switch.is_on(), Some(true));

    // (2) The poller dies between its "disarmed" write and turning the schedule off: the schedule
    // stays on (the next pass decides again) and a creator arms as usual.
    let s = stack();
    s.arming.arm().await.unwrap();
    s.switch.fail.store(true, Ordering::SeqCst);
    let report = s.poller.run_once().await;
    assert_eq!((report.schedule, report.errors), (None, 1));
    assert_eq!((s.switch.is_on(), armed(&s.state).await), (Some(true), Some(false)));
    s.switch.fail.store(false, Ordering::SeqCst);
    s.creator.create(LANE, "new", now()).await.unwrap();
    assert_eq!((s.switch.is_on(), armed(&s.state).await), (Some(true), Some(true)));
    assert_eq!(s.poller.run_once().await.schedule, Some(ScheduleState::On));
}
