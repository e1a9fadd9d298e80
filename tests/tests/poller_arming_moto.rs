//! The poller's arming on the AWS adapters (DynamoDB and EventBridge on moto): an idle pass turns
//! the every-minute rule off, due work written through a function's store turns it on, and a
//! pass with that work keeps it on (shared/src/app/arming_tests.rs covers the races and crashes).

use async_trait::async_trait;
use nimbus_integration_tests::moto::{create_schedule_rule, create_state_table, rule_enabled, MotoServer};
use nimbus_shared::adapters::aws::{DynamoDbStateStore, EventBridgeSwitch};
use nimbus_shared::app::arming_state::ArmingState;
use nimbus_shared::ports::{Clock, StateStore, SystemClock};
use nimbus_shared::scheduler::{Arming, DueIndex, ScheduleError, ScheduleState, ScheduledTask, Scheduler};
use std::sync::Arc;
use std::time::Duration;

const LANE: &str = "moto_work";

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

#[tokio::test]
async fn the_rule_is_on_only_while_there_is_due_work() {
    let moto = MotoServer::start().unwrap();
    let config = moto.sdk_config().await;
    create_state_table(&config, "nimbus-arming").await.unwrap();
    let rule = create_schedule_rule(&config, "nimbus-poller-test").await.unwrap();
    let state: Arc<dyn StateStore> = Arc::new(DynamoDbStateStore::new(&config, "nimbus-arming"));
    let arming = Arming::new(Arc::clone(&state), Arc::new(EventBridgeSwitch::new(&config, &rule)))
        .with_settle(Duration::from_millis(100));
    let poller = Scheduler::new(Arc::new(SystemClock))
        .with_task(Arc::new(LaneTask(DueIndex::new(Arc::clone(&state)))))
        .with_arming(arming.clone());

    assert!(rule_enabled(&config, &rule).await.unwrap(), "enabled as deployed");
    assert_eq!(poller.run_once().await.schedule, Some(ScheduleState::Off));
    assert!(!rule_enabled(&config, &rule).await.unwrap());

    let creator = DueIndex::new(Arc::new(ArmingState::new(
        Arc::clone(&state),
        arming,
        Arc::new(SystemClock),
    )));
    creator
        .create(LANE, "req-1", SystemClock.now_unix_ms() + 5_000)
        .await
        .unwrap();
    assert!(rule_enabled(&config, &rule).await.unwrap(), "due work armed it");
    assert_eq!(poller.run_once().await.schedule, Some(ScheduleState::On));
    assert!(rule_enabled(&config, &rule).await.unwrap());

    creator.clear(LANE, "req-1").await.unwrap();
    assert_eq!(poller.run_once().await.schedule, Some(ScheduleState::Off));
    assert!(!rule_enabled(&config, &rule).await.unwrap());
}
