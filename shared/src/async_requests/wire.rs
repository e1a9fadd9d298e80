//! Baseten's shapes: the status object (`GET /async_request/{id}`, with what Nimbus keeps beyond
//! Baseten: attempts, times, the webhook's attempts and the output) and the webhook body.

use super::stored::{Attempt, ErrorEntry, StoredRequest};
use super::submit::AsyncEndpoint;
use crate::ports::inference_records::rfc3339;
use crate::webhooks::delivery::DeliveryAttempt;
use serde::Serialize;
use serde_json::{json, Value};

/// One request's status.
#[derive(Debug, Clone, PartialEq, Serialize, utoipa::ToSchema)]
pub struct AsyncRequestView {
    pub request_id: String,
    pub model_id: String,
    /// Nimbus has no deployments: always null (kept for code that reads it).
    pub deployment_id: Option<String>,
    pub status: &'static str,
    pub webhook_status: super::WebhookStatus,
    pub created_at: String,
    pub status_at: String,
    pub errors: Vec<ErrorEntry>,
    pub endpoint: AsyncEndpoint,
    pub priority: u8,
    pub max_time_in_queue_seconds: u64,
    pub started_at: Option<String>,
    pub finished_at: Option<String>,
    pub attempts: Vec<AttemptView>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub webhook: Option<WebhookView>,
    /// The output, inline when small enough (and asked for).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub output: Option<Value>,
    /// A time-limited link to a large output (Lambda), or this API's own link to it.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub output_url: Option<String>,
    /// When the request and its output are deleted.
    pub expires_at: Option<String>,
}

#[derive(Debug, Clone, PartialEq, Serialize, utoipa::ToSchema)]
pub struct AttemptView {
    pub started_at: String,
    pub finished_at: Option<String>,
    pub error: Option<ErrorEntry>,
}

impl From<&Attempt> for AttemptView {
    fn from(attempt: &Attempt) -> Self {
        Self {
            started_at: rfc3339(attempt.started_at_ms),
            finished_at: attempt.finished_at_ms.map(rfc3339),
            error: attempt.error.clone(),
        }
    }
}

/// The webhook's delivery: where, each attempt, and the next one.
#[derive(Debug, Clone, PartialEq, Serialize, utoipa::ToSchema)]
pub struct WebhookView {
    pub url: String,
    pub webhook_id: Option<String>,
    pub attempts: Vec<DeliveryAttemptView>,
    pub next_attempt_at: Option<String>,
}

#[derive(Debug, Clone, PartialEq, Serialize, utoipa::ToSchema)]
pub struct DeliveryAttemptView {
    pub at: String,
    pub status_code: Option<u16>,
    pub error: Option<String>,
    pub duration_ms: u64,
}

impl From<&DeliveryAttempt> for DeliveryAttemptView {
    fn from(attempt: &DeliveryAttempt) -> Self {
        Self {
            at: rfc3339(attempt.at_ms),
            status_code: attempt.status,
            error: attempt.error.clone(),
            duration_ms: attempt.duration_ms,
        }
    }
}

/// A page of a project's requests, newest first.
#[derive(Debug, Clone, PartialEq, Serialize, utoipa::ToSchema)]
pub struct AsyncRequestPage {
    pub object: &'static str,
    pub data: Vec<AsyncRequestView>,
    pub first_id: Option<String>,
    pub last_id: Option<String>,
    pub has_more: bool,
}

impl AsyncRequestView {
    pub(crate) fn of(request: &StoredRequest, expires_at: Option<i64>) -> Self {
        Self {
            request_id: request.request_id.clone(),
            model_id: request.model_id.clone(),
            deployment_id: None,
            status: request.status.as_str(),
            webhook_status: request.webhook_status(),
            created_at: rfc3339(request.created_at_ms),
            status_at: rfc3339(request.status_at_ms),
            errors: request.errors.clone(),
            endpoint: request.endpoint,
            priority: request.priority.level(),
            max_time_in_queue_seconds: request.max_time_in_queue_s,
            started_at: request.started_at_ms.map(rfc3339),
            finished_at: request.finished_at_ms.map(rfc3339),
            attempts: request.attempts.iter().map(AttemptView::from).collect(),
            webhook: request.webhook_endpoint.as_ref().map(|url| WebhookView {
                url: url.to_string(),
                webhook_id: request.delivery.as_ref().map(|d| d.webhook_id.clone()),
                attempts: request
                    .delivery
                    .iter()
                    .flat_map(|d| d.attempts.iter().map(DeliveryAttemptView::from))
                    .collect(),
                next_attempt_at: request
                    .delivery
                    .as_ref()
                    .filter(|_| request.delivery_pending())
                    .and_then(|d| d.next_attempt_at_ms)
                    .map(rfc3339),
            }),
            output: None,
            output_url: None,
            expires_at: expires_at.map(|s| rfc3339(s.saturating_mul(1000))),
        }
    }
}

/// The webhook body Baseten sends: the output under `data`, or `data: null` and the errors;
/// `time` is when the request ended (`at_ms`). Built once per request: retries resend it.
pub(crate) fn webhook_body(request: &StoredRequest, output: Option<&Value>, at_ms: i64) -> String {
    json!({
        "request_id": request.request_id,
        "model_id": request.model_id,
        "deployment_id": null,
        "type": "async_request_completed",
        "time": rfc3339(at_ms),
        "data": output.map(|output| json!({"output": output})),
        "errors": request.errors,
    })
    .to_string()
}
