//! The poller's every-minute schedule as an EventBridge rule, turned on and off by name.

use super::describe_sdk_error;
use crate::ports::{ScheduleSwitch, SwitchError};
use async_trait::async_trait;

/// The environment variable naming the rule (set by template.yaml).
pub(crate) const POLLER_RULE_ENV: &str = "NIMBUS_POLLER_RULE";

/// `EnableRule` / `DisableRule` on one rule of the default event bus.
pub struct EventBridgeSwitch {
    client: aws_sdk_eventbridge::Client,
    rule: String,
}

impl EventBridgeSwitch {
    pub fn new(sdk_config: &aws_config::SdkConfig, rule: impl Into<String>) -> Self {
        Self {
            client: aws_sdk_eventbridge::Client::new(sdk_config),
            rule: rule.into(),
        }
    }
}

#[async_trait]
impl ScheduleSwitch for EventBridgeSwitch {
    async fn set_enabled(&self, enabled: bool) -> Result<(), SwitchError> {
        let failed = |detail: String| SwitchError(format!("rule {}: {detail}", self.rule));
        if enabled {
            self.client
                .enable_rule()
                .name(&self.rule)
                .send()
                .await
                .map_err(|err| failed(describe_sdk_error(&err)))?;
        } else {
            self.client
                .disable_rule()
                .name(&self.rule)
                .send()
                .await
                .map_err(|err| failed(describe_sdk_error(&err)))?;
        }
        Ok(())
    }
}
