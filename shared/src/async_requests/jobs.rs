//! The worker's side: `async_run` runs a request (slots, retries, saved output, then the first
//! webhook attempt in `deliver.rs`), `async_deliver` makes a later webhook attempt.
//!
//! Crash safety: the output is saved to the blob store before the record says so and before any
//! webhook is sent. A worker that dies leaves an open attempt; the next run of the message finds
//! the saved output (then only concludes and delivers) or runs the model again (nothing was
//! saved). Every state change is a conditional write, so two deliveries of one message never
//! both win.

use super::classify::{RunFailure, API_KEY_REVOKED, ASYNC_REQUEST_EXPIRED, MODEL_PREDICT_ERROR};
use super::endpoint_calls::EndpointCalls;
use super::requests::AsyncRequests;
use super::stored::{output_key, Attempt, ErrorEntry, StoredRequest, KIND};
use super::AsyncStatus;
use crate::auth::RevokedKeys;
use crate::jobs::{JobMessage, JobRunner};
use crate::model_slots::{self, Acquired, SlotRequest, Waiting};
use crate::ports::{AsyncRequestId, JobOutcome, Priority, StorageError, WebhookTransport};
use crate::records::LeaseUntil;
use crate::records::Loaded;
use crate::webhooks::SecretSource;
use async_trait::async_trait;
use bytes::Bytes;
use serde_json::Value;
use std::sync::Arc;
use std::time::Duration;
use tokio::time::Instant;

/// The shortest and longest waits for a free slot of the request's model before trying again.
const SLOT_WAIT_MIN: Duration = Duration::from_secs(2);
const SLOT_WAIT_MAX: Duration = Duration::from_secs(60);

/// Runs the async jobs.
pub struct AsyncJobs {
    pub(super) requests: Arc<AsyncRequests>,
    /// Runs a request's model input.
    endpoint_calls: EndpointCalls,
    /// Whether the key that submitted a request was revoked since.
    revoked_keys: RevokedKeys,
    pub(super) transport: Arc<dyn WebhookTransport>,
    pub(super) secrets: Arc<dyn SecretSource>,
}

impl AsyncJobs {
    pub fn new(
        requests: Arc<AsyncRequests>,
        endpoint_calls: EndpointCalls,
        transport: Arc<dyn WebhookTransport>,
        secrets: Arc<dyn SecretSource>,
    ) -> Self {
        let deps = &requests.deps;
        let revoked_keys = RevokedKeys::new(Arc::clone(&deps.state), Arc::clone(&deps.clock), Arc::clone(&deps.ids));
        Self {
            requests,
            endpoint_calls,
            revoked_keys,
            transport,
            secrets,
        }
    }
}

#[async_trait]
impl JobRunner for AsyncJobs {
    async fn run(&self, job: &JobMessage, _deadline: Instant) -> JobOutcome {
        let result = match job {
            JobMessage::AsyncRun { request_id } => self.run_request(request_id.as_str()).await,
            JobMessage::AsyncDeliver { request_id, attempt } => self.deliver(request_id.as_str(), *attempt).await,
            _ => Ok(JobOutcome::Done),
        };
        result.unwrap_or_else(|err| {
            tracing::warn!(?job, error = %err, "async job failed; it will be retried");
            JobOutcome::Retry {
                retry_after: Duration::from_secs(5),
            }
        })
    }
}

/// The wait for a model slot of a request that has waited `waited_ms` since it was submitted: a
/// tenth of that in whole seconds, from [`SLOT_WAIT_MIN`] to [`SLOT_WAIT_MAX`].
fn slot_wait(waited_ms: i64) -> Duration {
    Duration::from_secs(u64::try_from(waited_ms / 10_000).unwrap_or(0)).clamp(SLOT_WAIT_MIN, SLOT_WAIT_MAX)
}

/// How long a waiting request stays listed after a look: past its next look (`wait` away) with
/// room for a late message.
fn waiting_listed_ms(wait: Duration) -> i64 {
    i64::try_from(wait.as_millis()).unwrap_or(i64::MAX / 4) * 2 + 30_000
}

pub(super) fn wait_until(at_ms: i64, now_ms: i64) -> JobOutcome {
    JobOutcome::Retry {
        retry_after: Duration::from_millis(u64::try_from(at_ms - now_ms).unwrap_or(0).max(100)),
    }
}

impl AsyncJobs {
    async fn run_request(&self, request_id: &str) -> Result<JobOutcome, StorageError> {
        let requests = &self.requests;
        let state = requests.deps.state.as_ref();
        let Some(mut loaded) = Loaded::<StoredRequest>::get(state, KIND, request_id).await? else {
            return Ok(JobOutcome::Done);
        };
        let now = requests.now_ms();
        let request = &loaded.body;
        if request.status.is_final() {
            // Woken while waiting for a slot after it ended (cancelled): off the list.
            self.leave_waiting_list(request).await;
            return Ok(JobOutcome::Done);
        }
        if let Some(until) = request.lease_until_ms.held_until(now) {
            return Ok(wait_until(until, now));
        }
        if request.status == AsyncStatus::Queued && now >= request.queue_deadline_ms() {
            self.leave_waiting_list(request).await;
            let error = expired_error(request.max_time_in_queue_s);
            loaded.body.conclude(AsyncStatus::Expired, Some(error), None, now);
            return self.finish(loaded, None, now).await;
        }
        if let Some(at) = request.next_run_at_ms.filter(|at| *at > now) {
            return Ok(wait_until(at, now));
        }
        if request.open_attempt().is_some() {
            // A worker died running it. If it saved the output, the model is not called again.
            let key = output_key(&request.project, request_id);
            if let Some(saved) = requests.saved_output(&key).await? {
                let bytes = saved.len() as u64;
                let output = serde_json::from_slice::<Value>(&saved).ok();
                loaded.body.conclude(AsyncStatus::Succeeded, None, Some(bytes), now);
                return self.finish(loaded, output, now).await;
            }
            if let Some(attempt) = loaded.body.attempts.last_mut() {
                attempt.finished_at_ms = Some(now);
                attempt.error = Some(ErrorEntry {
                    code: MODEL_PREDICT_ERROR.to_owned(),
                    message: "The worker running this attempt stopped before it finished.".to_owned(),
                });
            }
        }
        let request = &loaded.body;
        // Not run for a key revoked since it was submitted (the saved output of a run that
        // finished before is still concluded above).
        if let Some(key_id) = &request.key_id {
            if self.revoked_keys.is_revoked(key_id).await? {
                self.leave_waiting_list(request).await;
                let error = ErrorEntry {
                    code: API_KEY_REVOKED.to_owned(),
                    message: "The API key that submitted this request was revoked before it ran.".to_owned(),
                };
                loaded.body.conclude(AsyncStatus::Failed, Some(error), None, now);
                return self.finish(loaded, None, now).await;
            }
        }
        if request.attempts.len() >= request.retry.max_attempts as usize {
            self.leave_waiting_list(request).await;
            let error = request.attempts.last().and_then(|a| a.error.clone());
            loaded.body.conclude(AsyncStatus::Failed, error, None, now);
            return self.finish(loaded, None, now).await;
        }
        // The model's concurrency, shared with batch lines: no slot it may take, so it waits in
        // the model's list (a release wakes it) and looks again later by itself.
        let lease_until = now + requests.lease_ms();
        let slot_model = requests
            .settings
            .model_limits
            .get(&request.model_id)
            .map(|limit| (request.model_id.clone(), *limit));
        if let Some((model, limit)) = &slot_model {
            let wait = slot_wait(now - request.created_at_ms);
            let request = SlotRequest {
                model,
                limit: *limit,
                want: 1,
                token: request_id,
                now_ms: now,
                until_ms: lease_until,
                waiting: Some(Waiting {
                    priority: request.priority,
                    created_at_ms: request.created_at_ms,
                    until_ms: now + waiting_listed_ms(wait),
                    look_at_ms: now + i64::try_from(wait.as_millis()).unwrap_or(i64::MAX),
                }),
            };
            match model_slots::acquire_or_wait(state, request).await? {
                Acquired::Granted(_) => {}
                // A wake that lost its slot to a better-ranked run, or a duplicate: the look
                // already queued comes (one delayed message per waiter, never more).
                Acquired::Waiting { look_queued: true } => return Ok(JobOutcome::Done),
                Acquired::Waiting { look_queued: false } => {
                    return Ok(self.run_again_after(request_id, loaded.body.priority, wait).await);
                }
            }
        }
        match self.claim(&mut loaded, now, lease_until).await {
            Ok(true) => self.execute(loaded, slot_model.as_ref()).await,
            Ok(false) => {
                self.release_slot(slot_model.as_ref(), request_id).await;
                Ok(JobOutcome::Retry {
                    retry_after: Duration::from_secs(1),
                })
            }
            Err(err) => {
                self.release_slot(slot_model.as_ref(), request_id).await;
                Err(err)
            }
        }
    }

    /// Hand back the model slot the run took, if it took one (waking the request owed it).
    async fn release_slot(&self, slot: Option<&(String, u32)>, request_id: &str) {
        if let Some((model, _)) = slot {
            self.requests.release_slot(model, request_id).await;
        }
    }

    async fn leave_waiting_list(&self, request: &StoredRequest) {
        self.requests.leave_waiting_list(request).await;
    }

    /// Done with this message, the run queued again to start after `wait`. A wait for a model
    /// slot may last long: retrying the same message would count every look toward the queue's
    /// dead-letter limit, and the request would then expire unrun. If the send fails, the same
    /// message comes back after `wait` instead.
    async fn run_again_after(&self, request_id: &str, priority: Priority, wait: Duration) -> JobOutcome {
        let job = JobMessage::AsyncRun {
            request_id: AsyncRequestId::new(request_id),
        };
        match self
            .requests
            .deps
            .queue
            .send_priority(&job.to_body(), priority, wait)
            .await
        {
            Ok(_) => JobOutcome::Done,
            Err(err) => {
                tracing::warn!(error = %err, "could not queue the run again; the message will be retried");
                JobOutcome::Retry { retry_after: wait }
            }
        }
    }

    /// Mark the request `IN_PROGRESS` with a new attempt, held until `lease_until`. False when
    /// someone else changed it first.
    async fn claim(
        &self,
        loaded: &mut Loaded<StoredRequest>,
        now: i64,
        lease_until: i64,
    ) -> Result<bool, StorageError> {
        let request = &mut loaded.body;
        if request.status == AsyncStatus::Queued {
            request.status = AsyncStatus::InProgress;
            request.status_at_ms = now;
        }
        request.started_at_ms.get_or_insert(now);
        request.attempts.push(Attempt {
            started_at_ms: now,
            finished_at_ms: None,
            error: None,
        });
        request.lease_until_ms = LeaseUntil::until(lease_until);
        request.next_run_at_ms = None;
        match loaded.save(self.requests.deps.state.as_ref()).await {
            Ok(()) => Ok(true),
            Err(StorageError::Conflict) => Ok(false),
            Err(err) => Err(err),
        }
    }

    /// Run the claimed request's model, hand back its model slot (the webhook must not hold
    /// it), and record what came of it.
    async fn execute(
        &self,
        mut loaded: Loaded<StoredRequest>,
        slot: Option<&(String, u32)>,
    ) -> Result<JobOutcome, StorageError> {
        let requests = &self.requests;
        let request = &loaded.body;
        let result = self
            .endpoint_calls
            .run(&request.project, request.endpoint, &request.model_input)
            .await;
        self.release_slot(slot, &request.request_id).await;
        let now = requests.now_ms();
        match result {
            Ok(output) => {
                let key = output_key(&request.project, &request.request_id);
                let body = serde_json::to_vec(&output).map_err(|e| StorageError::Invalid(e.to_string()))?;
                let bytes = body.len() as u64;
                // Saved before anything says so: a crash from here on never runs the model again.
                requests.deps.blobs.put(&key, Bytes::from(body)).await?;
                loaded.body.conclude(AsyncStatus::Succeeded, None, Some(bytes), now);
                self.finish(loaded, Some(output), now).await
            }
            Err(failure) => self.failed_attempt(loaded, failure, now).await,
        }
    }

    async fn failed_attempt(
        &self,
        mut loaded: Loaded<StoredRequest>,
        failure: RunFailure,
        now: i64,
    ) -> Result<JobOutcome, StorageError> {
        let requests = &self.requests;
        let request = &mut loaded.body;
        let made = request.attempts.len();
        let can_retry = failure.retryable && made < request.retry.max_attempts as usize;
        if !can_retry {
            request.conclude(AsyncStatus::Failed, Some(failure.error), None, now);
            return self.finish(loaded, None, now).await;
        }
        if let Some(attempt) = request.attempts.last_mut() {
            attempt.finished_at_ms = Some(now);
            attempt.error = Some(failure.error);
        }
        let backoff = request.retry.delay_after(u32::try_from(made).unwrap_or(u32::MAX));
        let asked = failure
            .retry_after
            .map_or(0, |wait| u64::try_from(wait.as_millis()).unwrap_or(u64::MAX));
        let wait_ms = backoff
            .max(asked)
            .min(super::lifecycle::MAX_QUEUE_DELAY.as_millis() as u64);
        request.next_run_at_ms = Some(now + i64::try_from(wait_ms).unwrap_or(0));
        request.lease_until_ms = LeaseUntil::NONE;
        match loaded.save(requests.deps.state.as_ref()).await {
            Ok(()) | Err(StorageError::Conflict) => Ok(JobOutcome::Retry {
                retry_after: Duration::from_millis(wait_ms),
            }),
            Err(err) => Err(err),
        }
    }
}

/// The error of a request that waited too long.
pub(crate) fn expired_error(max_time_in_queue_s: u64) -> ErrorEntry {
    ErrorEntry {
        code: ASYNC_REQUEST_EXPIRED.to_owned(),
        message: format!("The request was not started within max_time_in_queue_seconds ({max_time_in_queue_s} s)."),
    }
}
