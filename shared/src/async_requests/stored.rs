//! What an async request stores: one `async_request` record (owner: the project), kept for the
//! retention period (the record's TTL), and its output as a blob.

use super::submit::{AsyncEndpoint, RetryConfig};
use crate::ports::webhook_url::WebhookUrl;
use crate::ports::{Priority, ProjectId};
use crate::records::LeaseUntil;
use crate::webhooks::delivery::{Delivery, DeliveryState};
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

pub(crate) const KIND: &str = "async_request";

/// Baseten's request statuses.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "SCREAMING_SNAKE_CASE")]
pub(crate) enum AsyncStatus {
    Queued,
    InProgress,
    Succeeded,
    Failed,
    Expired,
    Canceled,
    WebhookFailed,
}

impl AsyncStatus {
    pub(crate) fn is_final(self) -> bool {
        !matches!(self, Self::Queued | Self::InProgress)
    }

    pub fn as_str(self) -> &'static str {
        match self {
            Self::Queued => "QUEUED",
            Self::InProgress => "IN_PROGRESS",
            Self::Succeeded => "SUCCEEDED",
            Self::Failed => "FAILED",
            Self::Expired => "EXPIRED",
            Self::Canceled => "CANCELED",
            Self::WebhookFailed => "WEBHOOK_FAILED",
        }
    }

    pub fn parse(text: &str) -> Option<Self> {
        serde_json::from_value(Value::String(text.to_ascii_uppercase())).ok()
    }
}

/// Baseten's webhook statuses.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(rename_all = "SCREAMING_SNAKE_CASE")]
pub enum WebhookStatus {
    Pending,
    Succeeded,
    Failed,
    Canceled,
    NoWebhookProvided,
}

/// One error of a request, Baseten's `{"code", "message"}`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct ErrorEntry {
    pub code: String,
    pub message: String,
}

/// One run of the model.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub(crate) struct Attempt {
    pub started_at_ms: i64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub finished_at_ms: Option<i64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<ErrorEntry>,
}

/// An `async_request` record's body.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub(crate) struct StoredRequest {
    pub request_id: String,
    pub project: ProjectId,
    pub model_id: String,
    pub endpoint: AsyncEndpoint,
    pub model_input: Map<String, Value>,
    pub priority: Priority,
    pub max_time_in_queue_s: u64,
    pub retry: RetryConfig,
    #[serde(default)]
    pub webhook_endpoint: Option<WebhookUrl>,
    pub status: AsyncStatus,
    pub created_at_ms: i64,
    pub status_at_ms: i64,
    #[serde(default)]
    pub started_at_ms: Option<i64>,
    #[serde(default)]
    pub finished_at_ms: Option<i64>,
    #[serde(default)]
    pub attempts: Vec<Attempt>,
    /// While a worker runs it (or its delivery): until when that worker holds it.
    #[serde(default)]
    pub lease_until_ms: LeaseUntil,
    /// After a failed attempt: not run again before this.
    #[serde(default)]
    pub next_run_at_ms: Option<i64>,
    #[serde(default)]
    pub errors: Vec<ErrorEntry>,
    /// The saved output's size (its blob is at [`output_key`]).
    #[serde(default)]
    pub output_bytes: Option<u64>,
    /// The webhook delivery, once there is a result to deliver. Its body is built once, when the
    /// request ends, and every attempt sends those bytes: kept in the delivery when small,
    /// else in a blob at [`webhook_body_key`] (then `webhook_body_saved`).
    #[serde(default)]
    pub delivery: Option<Delivery>,
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub webhook_body_saved: bool,
    /// The version of this request's due-index entry, as far as this record knows (it saves a
    /// read when the entry moves; a stale value only costs that read).
    #[serde(default)]
    pub due_version: Option<u64>,
    /// The id of the API key that submitted it (none on an open server): a run checks it was
    /// not revoked since, and the request fails with [`API_KEY_REVOKED`] if it was.
    ///
    /// [`API_KEY_REVOKED`]: super::classify::API_KEY_REVOKED
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub key_id: Option<String>,
}

impl StoredRequest {
    /// When a request still queued expires.
    pub(crate) fn queue_deadline_ms(&self) -> i64 {
        self.created_at_ms
            .saturating_add(i64::try_from(self.max_time_in_queue_s).unwrap_or(i64::MAX / 2000) * 1000)
    }

    /// The attempt a worker started and never finished (it died), if any.
    pub(crate) fn open_attempt(&self) -> Option<&Attempt> {
        self.attempts.last().filter(|attempt| attempt.finished_at_ms.is_none())
    }

    pub fn webhook_status(&self) -> WebhookStatus {
        if self.webhook_endpoint.is_none() {
            return WebhookStatus::NoWebhookProvided;
        }
        match self.delivery.as_ref().map(|delivery| delivery.state) {
            None | Some(DeliveryState::Pending) => WebhookStatus::Pending,
            Some(DeliveryState::Succeeded) => WebhookStatus::Succeeded,
            Some(DeliveryState::Failed) => WebhookStatus::Failed,
            Some(DeliveryState::Canceled) => WebhookStatus::Canceled,
        }
    }

    /// The blob key of the saved output, once there is one.
    pub(crate) fn saved_output_key(&self) -> Option<String> {
        self.output_bytes.map(|_| output_key(&self.project, &self.request_id))
    }

    /// Whether a webhook delivery still has attempts to make.
    pub(crate) fn delivery_pending(&self) -> bool {
        self.delivery
            .as_ref()
            .is_some_and(|delivery| delivery.state == DeliveryState::Pending)
    }
}

/// The blob key of a request's webhook body, when too large to keep in its record.
pub(crate) fn webhook_body_key(project: &ProjectId, request_id: &str) -> String {
    format!("async/{project}/{request_id}/webhook.json")
}

/// The blob key of a request's output.
pub(crate) fn output_key(project: &ProjectId, request_id: &str) -> String {
    format!("async/{project}/{request_id}/output.json")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn statuses_read_and_print_as_baseten_spells_them() {
        assert_eq!(AsyncStatus::parse("queued"), Some(AsyncStatus::Queued));
        assert_eq!(AsyncStatus::parse("WEBHOOK_FAILED"), Some(AsyncStatus::WebhookFailed));
        assert_eq!(AsyncStatus::parse("done"), None);
        assert_eq!(
            serde_json::to_value(AsyncStatus::InProgress).unwrap(),
            Value::String("IN_PROGRESS".into())
        );
        assert_eq!(AsyncStatus::InProgress.as_str(), "IN_PROGRESS");
        assert_eq!(
            serde_json::to_value(WebhookStatus::NoWebhookProvided).unwrap(),
            Value::String("NO_WEBHOOK_PROVIDED".into())
        );
    }
}
