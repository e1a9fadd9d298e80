//! The end of a run and the webhook: the final status is saved first (conditional write), then
//! the webhook is attempted, then its outcome saved. A receiver that reads the request when the
//! webhook arrives sees what the webhook says. A worker that dies between the two saves leaves
//! the delivery due on the index a little later ([`FIRST_ATTEMPT_GRACE_MS`]), so it is still sent.
//!
//! The body is built once, when the request ends, and every attempt sends those exact bytes (only
//! `webhook-timestamp` and the signatures change): small bodies live in the delivery, larger ones
//! ([`INLINE_BODY_MAX`]) in a blob beside the output.

use super::jobs::{wait_until, AsyncJobs};
use super::lifecycle::expect_due_move;
use super::stored::{webhook_body_key, StoredRequest, KIND};
use super::wire::webhook_body;
use super::AsyncStatus;
use crate::ports::{JobOutcome, StorageError};
use crate::records::Loaded;
use crate::webhooks::delivery::DeliveryState;
use bytes::Bytes;
use serde_json::Value;

/// A body up to this size is kept in the request's record; a larger one in a blob.
const INLINE_BODY_MAX: usize = 16 * 1024;
/// After the final status is saved, the scheduler looks at the delivery this long later, in
/// case the worker dies before recording its first attempt (the transport gives up after 10 s).
const FIRST_ATTEMPT_GRACE_MS: i64 = 60_000;

impl AsyncJobs {
    /// Save a concluded request (with the webhook body it owes, if any), then make the first
    /// webhook attempt and save its outcome, and schedule what comes next.
    pub(super) async fn finish(
        &self,
        mut loaded: Loaded<StoredRequest>,
        output: Option<Value>,
        now: i64,
    ) -> Result<JobOutcome, StorageError> {
        let requests = &self.requests;
        let owes = loaded.body.delivery_pending();
        let body = match output.as_ref().filter(|_| owes) {
            Some(output) => Some(self.keep_webhook_body(&mut loaded.body, output).await?),
            None => loaded.body.delivery.as_ref().map(|d| d.body.clone()),
        };
        expect_due_move(&mut loaded.body);
        let body = body.filter(|_| owes);
        if body.is_some() {
            // First the scheduler's look at the delivery, a little later: a crash after the save
            // below leaves the delivery due (one before it, a run the next look concludes).
            requests
                .move_due_entry(&loaded.body, now + FIRST_ATTEMPT_GRACE_MS)
                .await?;
        }
        match loaded.save(requests.deps.state.as_ref()).await {
            Ok(()) => requests.count_status(loaded.body.status),
            // Someone else concluded it meanwhile: theirs stands.
            Err(StorageError::Conflict) => return Ok(JobOutcome::Done),
            Err(err) => return Err(err),
        }
        let Some(body) = body else {
            requests.schedule_next_look(&loaded.body, now).await?;
            return Ok(JobOutcome::Done);
        };
        self.attempt_and_save(loaded, body).await
    }

    /// Put the output in the webhook body the request owes: in the delivery when small, else in
    /// its blob. Returns the body.
    async fn keep_webhook_body(&self, request: &mut StoredRequest, output: &Value) -> Result<String, StorageError> {
        let body = webhook_body(request, Some(output), request.status_at_ms);
        let saved = body.len() > INLINE_BODY_MAX;
        if saved {
            let key = webhook_body_key(&request.project, &request.request_id);
            self.requests
                .deps
                .blobs
                .put(&key, Bytes::from(body.clone().into_bytes()))
                .await?;
        }
        request.webhook_body_saved = saved;
        if let Some(delivery) = request.delivery.as_mut() {
            delivery.body = if saved { String::new() } else { body.clone() };
        }
        Ok(body)
    }

    /// The bytes every attempt of the request's delivery sends.
    async fn body_to_send(&self, request: &StoredRequest) -> Result<String, StorageError> {
        if let Some(body) = request.delivery.as_ref().map(|d| &d.body).filter(|b| !b.is_empty()) {
            return Ok(body.clone());
        }
        let requests = &self.requests;
        if request.webhook_body_saved {
            let key = webhook_body_key(&request.project, &request.request_id);
            if let Some(saved) = requests.saved_output(&key).await? {
                return String::from_utf8(saved.to_vec()).map_err(|e| StorageError::Backend(e.to_string()));
            }
        }
        // A record from before bodies were kept (or a lost blob): built again from the output.
        let output = match request.saved_output_key() {
            Some(key) => requests
                .saved_output(&key)
                .await?
                .and_then(|saved| serde_json::from_slice::<Value>(&saved).ok()),
            None => None,
        };
        Ok(webhook_body(request, output.as_ref(), request.status_at_ms))
    }

    /// One webhook attempt with `body`, then save its outcome and schedule the next look.
    async fn attempt_and_save(
        &self,
        mut loaded: Loaded<StoredRequest>,
        body: String,
    ) -> Result<JobOutcome, StorageError> {
        let requests = &self.requests;
        let now = requests.now_ms();
        self.attempt_delivery(&mut loaded.body, body, now).await;
        expect_due_move(&mut loaded.body);
        match loaded.save(requests.deps.state.as_ref()).await {
            Ok(()) => {}
            Err(StorageError::Conflict) => return Ok(JobOutcome::Done),
            Err(err) => return Err(err),
        }
        requests.schedule_next_look(&loaded.body, now).await?;
        Ok(JobOutcome::Done)
    }

    /// One webhook attempt for a concluded request (when it owes one), signed with the project's
    /// secrets.
    async fn attempt_delivery(&self, request: &mut StoredRequest, body: String, now: i64) {
        if !request.delivery_pending() {
            return;
        }
        let secrets = match self.secrets.signing_secrets(&request.project).await {
            Ok(secrets) => Some(secrets),
            Err(err) => {
                tracing::warn!(error = %err, "could not read the project's webhook secrets");
                None
            }
        };
        let allow_unsigned = self.requests.settings.allow_unsigned_webhooks;
        let delays = &self.requests.settings.webhook_retry_delays;
        let keep_inline = !request.webhook_body_saved;
        if secrets.as_ref().is_some_and(|s| s.is_empty() && !allow_unsigned) {
            self.requests.await_secret(request, now).await;
        }
        let Some(delivery) = request.delivery.as_mut() else {
            return;
        };
        delivery.body = body;
        match secrets {
            Some(secrets) if !secrets.is_empty() || allow_unsigned => {
                delivery
                    .attempt_on(self.transport.as_ref(), &secrets, now, delays)
                    .await;
            }
            Some(_) => {
                delivery.record_failure(
                    "The project has no webhook secret and unsigned webhooks are not allowed: create one with POST /v1/webhook_secrets.",
                    now,
                    delays,
                );
            }
            None => {
                delivery.record_failure("The project's webhook secrets could not be read.", now, delays);
            }
        }
        if !keep_inline {
            // It is in its blob; the record stays small.
            delivery.body.clear();
        }
        if delivery.state == DeliveryState::Failed && request.status == AsyncStatus::Succeeded {
            request.status = AsyncStatus::WebhookFailed;
            request.status_at_ms = now;
        }
    }

    /// A later webhook attempt (the `async_deliver` job).
    pub(super) async fn deliver(&self, request_id: &str, attempt: u32) -> Result<JobOutcome, StorageError> {
        let requests = &self.requests;
        let state = requests.deps.state.as_ref();
        let Some(loaded) = Loaded::<StoredRequest>::get(state, KIND, request_id).await? else {
            return Ok(JobOutcome::Done);
        };
        let now = requests.now_ms();
        let request = &loaded.body;
        let Some(delivery) = request.delivery.as_ref().filter(|_| request.delivery_pending()) else {
            return Ok(JobOutcome::Done);
        };
        if delivery.attempts.len() + 1 != attempt as usize {
            // Stale: that attempt was made (or this message is a duplicate).
            return Ok(JobOutcome::Done);
        }
        if let Some(at) = delivery.next_attempt_at_ms.filter(|at| *at > now + 1000) {
            return Ok(wait_until(at, now));
        }
        let body = self.body_to_send(request).await?;
        self.attempt_and_save(loaded, body).await
    }
}
