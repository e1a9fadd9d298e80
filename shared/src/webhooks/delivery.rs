//! One webhook delivery: its signed attempts and its retry schedule.
//!
//! Every attempt sends the same `webhook-id` (the receiver's idempotency key) and body bytes, with
//! the attempt's own `webhook-timestamp` and signatures. Only a 2xx succeeds. Timeouts, connection
//! errors, refusals by the address guard (DNS answers change), 429 and 5xx are retried on
//! [`RETRY_DELAYS`]; any other status (3xx included: redirects are not followed, 410 Gone
//! included) fails the delivery at once.

use super::signing::{baseten_signature, standard_signature, SigningSecret};
use crate::backoff::Jitter;
use crate::ports::webhook_url::WebhookUrl;
use crate::ports::{PostOutcome, WebhookTransport};
use bytes::Bytes;
use serde::{Deserialize, Serialize};
use std::time::{Duration, Instant};

/// The wait after failed attempt n (1-based) before attempt n + 1 (`[webhooks] retry_delays_s`
/// by default); after the last, the delivery fails.
pub use crate::config::DEFAULT_WEBHOOK_RETRY_DELAYS as RETRY_DELAYS;
/// Attempts before a delivery fails for good: the first and one per [`RETRY_DELAYS`] entry.
#[cfg(test)]
pub(crate) const MAX_ATTEMPTS: usize = RETRY_DELAYS.len() + 1;
/// The longest `Retry-After` honoured; a receiver asking for more gets this.
pub const MAX_RETRY_AFTER: Duration = Duration::from_secs(24 * 3600);
/// The `user-agent` of every webhook request.
pub(crate) const USER_AGENT: &str = "Nimbus-Webhooks/1";

#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, utoipa::ToSchema)]
#[serde(rename_all = "SCREAMING_SNAKE_CASE")]
pub(crate) enum DeliveryState {
    Pending,
    Succeeded,
    Failed,
    Canceled,
}

/// Which signature headers a delivery carries.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, utoipa::ToSchema)]
pub(crate) enum SignatureStyle {
    /// `webhook-signature` (Standard Webhooks) only.
    Standard,
    /// Also Baseten's `x-baseten-signature` and `x-baseten-request-id`.
    StandardAndBaseten,
}

/// The record of one attempt.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, utoipa::ToSchema)]
pub(crate) struct DeliveryAttempt {
    pub at_ms: i64,
    /// The receiver's status, when it answered.
    pub status: Option<u16>,
    /// What went wrong, when something did.
    pub error: Option<String>,
    pub duration_ms: u64,
}

/// One webhook message on its way to one URL.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, utoipa::ToSchema)]
pub(crate) struct Delivery {
    /// The `webhook-id` of every attempt; must not contain `.`.
    pub webhook_id: String,
    pub url: WebhookUrl,
    /// The exact bytes sent and signed.
    pub body: String,
    pub style: SignatureStyle,
    /// The `x-baseten-request-id` header (Baseten style only).
    pub baseten_request_id: Option<String>,
    pub state: DeliveryState,
    pub attempts: Vec<DeliveryAttempt>,
    /// When the next attempt is due; `None` once the delivery is final.
    pub next_attempt_at_ms: Option<i64>,
}

/// How an attempt's outcome counts.
enum Verdict {
    Succeeded,
    FailedForGood,
    Retry { retry_after: Option<Duration> },
}

impl Delivery {
    /// A pending delivery, due at `now_ms`.
    pub fn new(
        webhook_id: String,
        url: WebhookUrl,
        body: String,
        style: SignatureStyle,
        baseten_request_id: Option<String>,
        now_ms: i64,
    ) -> Self {
        Self {
            webhook_id,
            url,
            body,
            style,
            baseten_request_id,
            state: DeliveryState::Pending,
            attempts: Vec::new(),
            next_attempt_at_ms: Some(now_ms),
        }
    }

    pub(crate) fn is_final(&self) -> bool {
        self.state != DeliveryState::Pending
    }

    /// Stops a pending delivery (a final one keeps its state).
    pub fn cancel(&mut self) {
        if !self.is_final() {
            self.state = DeliveryState::Canceled;
            self.next_attempt_at_ms = None;
        }
    }

    /// The headers of an attempt made at `timestamp_s`, signed with every secret (unsigned when
    /// there are none). Names are lowercase, as HTTP sends them.
    pub fn headers(&self, secrets: &[SigningSecret], timestamp_s: i64) -> Vec<(String, String)> {
        let body = self.body.as_bytes();
        let mut headers = vec![
            ("content-type".to_owned(), "application/json".to_owned()),
            ("user-agent".to_owned(), USER_AGENT.to_owned()),
            ("webhook-id".to_owned(), self.webhook_id.clone()),
            ("webhook-timestamp".to_owned(), timestamp_s.to_string()),
        ];
        if !secrets.is_empty() {
            let signature = standard_signature(secrets, &self.webhook_id, timestamp_s, body);
            headers.push(("webhook-signature".to_owned(), signature));
        }
        if self.style == SignatureStyle::StandardAndBaseten {
            if !secrets.is_empty() {
                headers.push(("x-baseten-signature".to_owned(), baseten_signature(secrets, body)));
            }
            if let Some(request_id) = &self.baseten_request_id {
                headers.push(("x-baseten-request-id".to_owned(), request_id.clone()));
            }
        }
        headers
    }

    /// One attempt on the default schedule ([`RETRY_DELAYS`]): see [`Delivery::attempt_on`].
    pub async fn attempt(
        &mut self,
        transport: &dyn WebhookTransport,
        secrets: &[SigningSecret],
        now_ms: i64,
    ) -> DeliveryState {
        self.attempt_on(transport, secrets, now_ms, &RETRY_DELAYS).await
    }

    /// One attempt: sign with every secret (unsigned when `secrets` is empty), post, record the
    /// attempt, then Succeeded / Failed / Pending with `next_attempt_at_ms` from `delays` (the
    /// wait after failed attempt n is `delays[n - 1]`; after the last, the delivery fails). A final
    /// delivery is left as it is.
    pub(crate) async fn attempt_on(
        &mut self,
        transport: &dyn WebhookTransport,
        secrets: &[SigningSecret],
        now_ms: i64,
        delays: &[Duration],
    ) -> DeliveryState {
        if self.is_final() {
            return self.state;
        }
        let headers = self.headers(secrets, now_ms.div_euclid(1000));
        let started = Instant::now();
        let outcome = transport
            .post(&self.url, &headers, Bytes::from(self.body.clone()))
            .await;
        let duration_ms = u64::try_from(started.elapsed().as_millis()).unwrap_or(u64::MAX);
        let (verdict, status, error) = judge(outcome);
        self.record(verdict, status, error, now_ms, duration_ms, delays)
    }

    /// Record an attempt that could not be sent at all (e.g. no secret to sign with) as a
    /// retryable failure on `delays`.
    pub(crate) fn record_failure(&mut self, reason: &str, now_ms: i64, delays: &[Duration]) -> DeliveryState {
        if self.is_final() {
            return self.state;
        }
        let verdict = Verdict::Retry { retry_after: None };
        self.record(verdict, None, Some(reason.to_owned()), now_ms, 0, delays)
    }

    fn record(
        &mut self,
        verdict: Verdict,
        status: Option<u16>,
        error: Option<String>,
        now_ms: i64,
        duration_ms: u64,
        delays: &[Duration],
    ) -> DeliveryState {
        self.attempts.push(DeliveryAttempt {
            at_ms: now_ms,
            status,
            error,
            duration_ms,
        });
        match verdict {
            Verdict::Succeeded => self.finish(DeliveryState::Succeeded),
            Verdict::FailedForGood => self.finish(DeliveryState::Failed),
            Verdict::Retry { retry_after } => match delays.get(self.attempts.len() - 1) {
                None => self.finish(DeliveryState::Failed),
                Some(delay) => {
                    let scheduled = Jitter::UpToATenthMore.apply(*delay, rand::random::<f64>());
                    let wait = retry_after.map_or(scheduled, |asked| asked.min(MAX_RETRY_AFTER).max(scheduled));
                    let wait_ms = i64::try_from(wait.as_millis()).unwrap_or(i64::MAX);
                    self.next_attempt_at_ms = Some(now_ms.saturating_add(wait_ms));
                }
            },
        }
        self.state
    }

    fn finish(&mut self, state: DeliveryState) {
        self.state = state;
        self.next_attempt_at_ms = None;
    }
}

/// The verdict on an outcome, with the status and error an attempt records.
fn judge(outcome: PostOutcome) -> (Verdict, Option<u16>, Option<String>) {
    match outcome {
        PostOutcome::Response { status, .. } if (200..300).contains(&status) => {
            (Verdict::Succeeded, Some(status), None)
        }
        PostOutcome::Response { status, retry_after } if status == 429 || (500..600).contains(&status) => {
            let error = format!("the receiver answered {status}");
            (Verdict::Retry { retry_after }, Some(status), Some(error))
        }
        PostOutcome::Response { status, .. } => {
            let error = match status {
                300..=399 => format!("the receiver answered {status}; redirects are not followed"),
                410 => "the receiver answered 410 Gone".to_owned(),
                _ => format!("the receiver answered {status}, which is not retried"),
            };
            (Verdict::FailedForGood, Some(status), Some(error))
        }
        PostOutcome::Refused { reason } => (
            Verdict::Retry { retry_after: None },
            None,
            Some(format!("refused: {reason}")),
        ),
        PostOutcome::Failed { reason, .. } => (Verdict::Retry { retry_after: None }, None, Some(reason)),
    }
}

#[cfg(test)]
#[path = "delivery_tests.rs"]
mod tests;
