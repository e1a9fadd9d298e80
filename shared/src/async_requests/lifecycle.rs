//! How a request ends, and what comes due after: the final status, its errors and output, the
//! webhook delivery it owes, and the scheduler's next look at it.

use super::requests::AsyncRequests;
use super::stored::{ErrorEntry, StoredRequest};
use super::wire::webhook_body;
use super::{AsyncStatus, DUE_LANE};
use crate::jobs::JobMessage;
use crate::ports::{AsyncRequestId, StorageError};
use crate::records::LeaseUntil;
use crate::webhooks::delivery::{Delivery, SignatureStyle};
use std::time::Duration;

/// Deliveries due within this long get a delayed queue message (SQS delays stop at 15 minutes);
/// later ones wait for the scheduler.
pub(crate) const MAX_QUEUE_DELAY: Duration = Duration::from_secs(900);

impl AsyncRequests {
    /// After `request` was saved concluded by the API or the scheduler (not a worker): queue its
    /// first delivery, and put its next look on the due index (a lease later: the message covers
    /// it until then, and a scheduler pass meanwhile would only send a duplicate).
    pub(crate) async fn queue_first_delivery(&self, request: &StoredRequest, now: i64) -> Result<(), StorageError> {
        if request.delivery_pending() {
            self.due
                .set(DUE_LANE, &request.request_id, now + self.lease_ms())
                .await?;
            let job = JobMessage::AsyncDeliver {
                request_id: AsyncRequestId::new(request.request_id.clone()),
                attempt: 1,
            };
            self.deps
                .queue
                .send_priority(&job.to_body(), request.priority, Duration::ZERO)
                .await?;
            Ok(())
        } else {
            self.schedule_next_look(request, now).await
        }
    }

    /// Put the scheduler's next look at `request` on the due index: its next delivery attempt, or
    /// the end of its retention (purge). An attempt due soon gets a delayed message, and the
    /// scheduler looks only a lease after it (in case the message is lost), not at the same time
    /// (which would queue a second message for the same attempt).
    pub(crate) async fn schedule_next_look(&self, request: &StoredRequest, now: i64) -> Result<(), StorageError> {
        let next_delivery = request
            .delivery
            .as_ref()
            .filter(|_| request.delivery_pending())
            .and_then(|delivery| delivery.next_attempt_at_ms.map(|at| (at, delivery.attempts.len())));
        match next_delivery {
            Some((at, made)) => {
                let wait = Duration::from_millis(u64::try_from(at - now).unwrap_or(0));
                let by_message = wait <= MAX_QUEUE_DELAY;
                // The scheduler stands in for a lost message only: it looks once the message had
                // as long again as it waited (at least 1 s, at most a lease) to be handled.
                let grace = (at - now).clamp(1000, self.lease_ms());
                let look_at = if by_message { at + grace } else { at };
                self.move_due_entry(request, look_at).await?;
                if by_message {
                    let job = JobMessage::AsyncDeliver {
                        request_id: AsyncRequestId::new(request.request_id.clone()),
                        attempt: u32::try_from(made + 1).unwrap_or(u32::MAX),
                    };
                    self.deps
                        .queue
                        .send_priority(&job.to_body(), request.priority, wait)
                        .await?;
                }
                Ok(())
            }
            None => {
                let purge_at = self.expires_at_s(request.created_at_ms).saturating_mul(1000);
                self.move_due_entry(request, purge_at).await
            }
        }
    }

    /// Move the request's due-index entry to `at`: one write when the record knows the entry's
    /// version (it was saved with the version this move makes, see [`StoredRequest::due_version`]).
    pub(crate) async fn move_due_entry(&self, request: &StoredRequest, at: i64) -> Result<(), StorageError> {
        match request.due_version {
            Some(version) if version > 1 => {
                self.due
                    .reschedule(DUE_LANE, &request.request_id, at, version - 1)
                    .await
            }
            _ => self.due.set(DUE_LANE, &request.request_id, at).await,
        }
    }
}

/// Before saving a request whose due-index entry is about to move: the version that move makes.
pub(crate) fn expect_due_move(request: &mut StoredRequest) {
    request.due_version = request.due_version.map(|version| version + 1);
}

impl AsyncRequests {
    /// How long a worker holds a request, in milliseconds.
    pub(crate) fn lease_ms(&self) -> i64 {
        i64::try_from(self.settings.lease.as_millis()).unwrap_or(i64::MAX / 2)
    }
}

/// The webhook id of a request's delivery: the same on every attempt, so receivers can
/// de-duplicate.
pub(crate) fn webhook_id(request_id: &str) -> String {
    format!("msg_{request_id}")
}

impl StoredRequest {
    /// End the request with `status` at `now`: close its open attempt, keep `error` and the size
    /// of its saved output,
    /// and owe a webhook delivery when it has a webhook.
    pub(crate) fn conclude(
        &mut self,
        status: AsyncStatus,
        error: Option<ErrorEntry>,
        output_bytes: Option<u64>,
        now: i64,
    ) {
        let request = self;
        request.status = status;
        request.status_at_ms = now;
        request.finished_at_ms = Some(now);
        if let Some(attempt) = request.attempts.last_mut().filter(|a| a.finished_at_ms.is_none()) {
            attempt.finished_at_ms = Some(now);
            if attempt.error.is_none() {
                attempt.error.clone_from(&error);
            }
        }
        if let Some(error) = error {
            request.errors = vec![error];
        }
        if output_bytes.is_some() {
            request.output_bytes = output_bytes;
        }
        request.lease_until_ms = LeaseUntil::NONE;
        request.next_run_at_ms = None;
        // The body every attempt sends (a saved output is put in it before the first attempt).
        let body = webhook_body(request, None, now);
        request.webhook_body_saved = false;
        request.delivery = request.webhook_endpoint.clone().map(|url| {
            Delivery::new(
                webhook_id(&request.request_id),
                url,
                body,
                SignatureStyle::StandardAndBaseten,
                Some(request.request_id.clone()),
                now,
            )
        });
    }
}
