//! The switch of the poller's every-minute schedule (an EventBridge rule in AWS): on while there
//! is due work, off while the stack is idle, so an idle stack is not invoked every minute.

use async_trait::async_trait;

/// Why the switch could not be flipped.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("the poller's schedule could not be switched: {0}")]
pub struct SwitchError(pub String);

/// Turns the poller's frequent schedule on or off. Both are idempotent.
#[async_trait]
pub trait ScheduleSwitch: Send + Sync {
    async fn set_enabled(&self, enabled: bool) -> Result<(), SwitchError>;
}
