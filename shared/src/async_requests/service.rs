//! The async API: submit, get, list, cancel. Every id and timestamp is minted here.

use super::error::AsyncError;
use super::execute::AsyncExecutor;
use super::stored::{output_key, AsyncStatus, ErrorEntry, StoredRequest, KIND};
use super::submit::parse_submission;
use super::wire::{AsyncRequestPage, AsyncRequestView};
use super::DUE_LANE;
use crate::auth::RevokedKeys;
use crate::config::Config;
use crate::jobs::JobMessage;
use crate::paging::{PageBounds, PageLimit};
use crate::ports::webhook_url::{UrlPolicy, WebhookUrl};
use crate::ports::{
    BlobStore, Clock, IdSource, JobQueue, ListOrder, ListQuery, MetricUnit, MetricsSink, NoMetrics, ProjectId, Record,
    StateStore, StorageError,
};
use crate::records::LeaseUntil;
use crate::records::{decode, encode, Loaded};
use crate::scheduler::DueIndex;
use crate::user_text::excerpt;
use serde_json::{Map, Value};
use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

/// How async requests are kept and delivered.
#[derive(Debug, Clone)]
pub struct AsyncSettings {
    /// How long a request and its output are kept after it was submitted.
    pub retention: Duration,
    /// How long a worker holds a request it runs (longer than one run and one delivery).
    pub lease: Duration,
    /// Outputs up to this size are returned inline by `GET /async_request/{id}`; larger ones by
    /// a link.
    pub inline_output_limit: u64,
    /// Which webhook URLs are accepted.
    pub url_policy: UrlPolicy,
    /// Whether a project with no webhook secret gets unsigned webhooks (else its deliveries fail).
    pub allow_unsigned_webhooks: bool,
    /// Models with a `max_concurrency`: their slots are shared with batch lines.
    pub model_limits: HashMap<String, u32>,
    /// The wait after each failed webhook attempt (`[webhooks] retry_delays_s`).
    pub webhook_retry_delays: Vec<Duration>,
}

impl AsyncSettings {
    /// The configured settings; `url_policy` says whether plain-HTTP loopback webhooks are
    /// accepted (the local server's choice, never Lambda's).
    pub fn from_config(config: &Config, url_policy: UrlPolicy) -> Self {
        Self {
            retention: Duration::from_secs(u64::from(config.async_requests.retention_days) * 24 * 3600),
            allow_unsigned_webhooks: config.webhooks.allow_unsigned,
            webhook_retry_delays: config.webhooks.retry_delays(),
            url_policy,
            model_limits: config
                .models
                .iter()
                .filter_map(|(name, model)| model.max_concurrency.map(|limit| (name.clone(), limit)))
                .collect(),
            ..Self::default()
        }
    }
}

impl Default for AsyncSettings {
    fn default() -> Self {
        Self {
            retention: Duration::from_secs(7 * 24 * 3600),
            lease: Duration::from_secs(6 * 60),
            inline_output_limit: 1024 * 1024,
            url_policy: UrlPolicy {
                allow_loopback_http: false,
            },
            allow_unsigned_webhooks: false,
            model_limits: HashMap::new(),
            webhook_retry_delays: crate::webhooks::delivery::RETRY_DELAYS.to_vec(),
        }
    }
}

/// What the async API needs.
#[derive(Clone)]
pub struct AsyncDeps {
    pub state: Arc<dyn StateStore>,
    pub blobs: Arc<dyn BlobStore>,
    pub queue: Arc<dyn JobQueue>,
    pub clock: Arc<dyn Clock>,
    pub ids: Arc<dyn IdSource>,
    pub executor: AsyncExecutor,
}

pub struct AsyncService {
    pub(crate) deps: AsyncDeps,
    pub(crate) settings: AsyncSettings,
    pub(crate) due: DueIndex,
    /// Whether the key that submitted a request was revoked since.
    pub(crate) revoked_keys: RevokedKeys,
    /// Requests reaching a status are counted here.
    metrics: Arc<dyn MetricsSink>,
}

/// How many requests a page of `GET /async_requests` lists: 1 to 100, 20 by default.
pub const ASYNC_PAGE: PageBounds = PageBounds::new(20, 100);

/// `GET /async_requests`' query.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ListAsyncRequests {
    pub limit: PageLimit,
    pub after: Option<String>,
    pub status: Option<String>,
}

impl Default for ListAsyncRequests {
    fn default() -> Self {
        Self {
            limit: ASYNC_PAGE.default_limit(),
            after: None,
            status: None,
        }
    }
}

/// What `DELETE /async_request/{id}` did.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, utoipa::ToSchema)]
pub struct CancelOutcome {
    pub request_id: String,
    pub canceled: bool,
    pub message: String,
}

impl AsyncService {
    pub fn new(deps: AsyncDeps, settings: AsyncSettings) -> Self {
        let due = DueIndex::new(Arc::clone(&deps.state));
        let revoked_keys = RevokedKeys::new(Arc::clone(&deps.state), Arc::clone(&deps.clock), Arc::clone(&deps.ids));
        Self {
            deps,
            settings,
            due,
            revoked_keys,
            metrics: Arc::new(NoMetrics),
        }
    }

    /// Count requests by status into `metrics`.
    pub fn with_metrics(mut self, metrics: Arc<dyn MetricsSink>) -> Self {
        self.metrics = metrics;
        self
    }

    /// Spread each due-work lane over `shards` owners ([`DueIndex::with_shards`]).
    pub fn with_due_index_shards(mut self, shards: u32) -> Self {
        self.due = self.due.with_shards(shards);
        self
    }

    /// A request reached `status` (`async_requests` by status: queued at submit, then its end).
    pub(crate) fn count_status(&self, status: AsyncStatus) {
        self.metrics
            .record("async_requests", MetricUnit::Count, 1.0, &[("status", status.as_str())]);
    }

    pub(crate) fn now_ms(&self) -> i64 {
        self.deps.clock.now_unix_ms()
    }

    /// Accept a request: check it, store it `QUEUED`, schedule its expiry, and queue it at its
    /// priority. Returns its id.
    pub async fn submit(
        &self,
        project: &ProjectId,
        body: Map<String, Value>,
        path_model: Option<&str>,
    ) -> Result<String, AsyncError> {
        self.submit_by(project, None, body, path_model).await
    }

    /// [`Self::submit`] for the API key `key_id` (recorded: the request fails unrun with
    /// `API_KEY_REVOKED` if that key is revoked before it runs).
    pub async fn submit_by(
        &self,
        project: &ProjectId,
        key_id: Option<&str>,
        body: Map<String, Value>,
        path_model: Option<&str>,
    ) -> Result<String, AsyncError> {
        let submission = parse_submission(body, path_model)?;
        let executor = &self.deps.executor;
        if !executor.knows(submission.endpoint, &submission.model_id, &submission.model_input) {
            let field = match (path_model, submission.model_input.contains_key("function_name")) {
                (Some(_), _) => "model",
                (None, true) => "model_input.function_name",
                (None, false) if submission.model_input.contains_key("model_name") => "model_input.model_name",
                (None, false) => "model_input.model",
            };
            return Err(AsyncError::UnknownModel {
                field: field.to_owned(),
                model: submission.model_id,
            });
        }
        executor
            .check(submission.endpoint, &submission.model_input)
            .map_err(|(field, message)| {
                let field = field.map_or_else(|| "model_input".to_owned(), |f| format!("model_input.{f}"));
                AsyncError::invalid(field, message)
            })?;
        let webhook_endpoint = match &submission.webhook_endpoint {
            None => None,
            Some(url) => Some(
                WebhookUrl::parse(url, &self.settings.url_policy)
                    .map_err(|err| AsyncError::invalid("webhook_endpoint", err.to_string()))?,
            ),
        };
        let now = self.now_ms();
        let request_id = self.deps.ids.new_uuid().simple().to_string();
        let stored = StoredRequest {
            request_id: request_id.clone(),
            project: project.clone(),
            model_id: submission.model_id,
            endpoint: submission.endpoint,
            model_input: submission.model_input,
            priority: submission.priority,
            max_time_in_queue_s: submission.max_time_in_queue_s,
            retry: submission.retry,
            webhook_endpoint,
            status: AsyncStatus::Queued,
            created_at_ms: now,
            status_at_ms: now,
            started_at_ms: None,
            finished_at_ms: None,
            attempts: Vec::new(),
            lease_until_ms: LeaseUntil::NONE,
            next_run_at_ms: None,
            errors: Vec::new(),
            output_bytes: None,
            delivery: None,
            webhook_body_saved: false,
            due_version: Some(1),
            key_id: key_id.map(str::to_owned),
        };
        let record = Record {
            kind: KIND.to_owned(),
            id: request_id.clone(),
            owner: project.to_string(),
            created_at_ms: now,
            version: 1,
            expires_at: Some(self.expires_at_s(now)),
            body: encode(&stored)?,
        };
        self.deps.state.create(&record).await?;
        // The expiry check comes due when the request may wait no longer; a worker that finishes
        // it first clears it.
        if let Err(err) = self.due.create(DUE_LANE, &request_id, stored.queue_deadline_ms()).await {
            self.deps.state.delete(KIND, &request_id, None).await.ok();
            return Err(err.into());
        }
        let job = JobMessage::AsyncRun {
            request_id: crate::ports::AsyncRequestId::new(request_id.clone()),
        };
        if let Err(err) = self
            .deps
            .queue
            .send_priority(&job.to_body(), stored.priority, Duration::ZERO)
            .await
        {
            // Not accepted: leave nothing behind that a worker or the scheduler would pick up.
            self.deps.state.delete(KIND, &request_id, None).await.ok();
            self.due.clear(DUE_LANE, &request_id).await.ok();
            return Err(err.into());
        }
        self.count_status(AsyncStatus::Queued);
        Ok(request_id)
    }

    /// The record's TTL: the retention period from `from_ms`.
    pub(crate) fn expires_at_s(&self, from_ms: i64) -> i64 {
        from_ms / 1000 + i64::try_from(self.settings.retention.as_secs()).unwrap_or(i64::MAX / 2)
    }

    async fn load_owned(&self, project: &ProjectId, request_id: &str) -> Result<Loaded<StoredRequest>, AsyncError> {
        match Loaded::<StoredRequest>::get_owned(self.deps.state.as_ref(), KIND, request_id, project).await? {
            Some(loaded) if !self.is_past_retention(&loaded.record) => Ok(loaded),
            _ => Err(AsyncError::NotFound(request_id.to_owned())),
        }
    }

    fn is_past_retention(&self, record: &Record) -> bool {
        record.expires_at.is_some_and(|at| at <= self.deps.clock.now_unix_s())
    }

    /// One request's status, with its output when it has one: inline when small, else a link.
    pub async fn get(&self, project: &ProjectId, request_id: &str) -> Result<AsyncRequestView, AsyncError> {
        let loaded = self.load_owned(project, request_id).await?;
        let request = &loaded.body;
        let mut view = AsyncRequestView::of(request, loaded.record.expires_at);
        if let (Some(key), Some(bytes)) = (request.saved_output_key(), request.output_bytes) {
            if bytes <= self.settings.inline_output_limit {
                view.output = self
                    .saved_output(&key)
                    .await?
                    .and_then(|body| serde_json::from_slice(&body).ok());
            } else {
                let filename = format!("{request_id}-output.json");
                // A time-limited link straight to the bytes where the store makes one (S3);
                // else this API's own route for them.
                let presigned = self
                    .deps
                    .blobs
                    .presign_get(&key, Duration::from_secs(3600), &filename)
                    .await?;
                view.output_url = Some(presigned.unwrap_or_else(|| format!("/async_request/{request_id}/output")));
            }
        }
        Ok(view)
    }

    /// The saved output of a request, as stored (for `GET /async_request/{id}/output`).
    pub async fn output(&self, project: &ProjectId, request_id: &str) -> Result<bytes::Bytes, AsyncError> {
        self.load_owned(project, request_id).await?;
        self.saved_output(&output_key(project, request_id))
            .await?
            .ok_or_else(|| AsyncError::NotFound(request_id.to_owned()))
    }

    /// The bytes of a saved output, if they are there.
    pub(crate) async fn saved_output(&self, key: &str) -> Result<Option<bytes::Bytes>, StorageError> {
        match self.deps.blobs.get(key).await {
            Ok(body) => Ok(Some(body)),
            Err(StorageError::NotFound) => Ok(None),
            Err(err) => Err(err),
        }
    }

    /// A page of the project's requests, newest first, optionally of one status.
    pub async fn list(&self, project: &ProjectId, query: &ListAsyncRequests) -> Result<AsyncRequestPage, AsyncError> {
        let limit = query.limit.get();
        let status = match query.status.as_deref() {
            None | Some("") => None,
            Some(text) => Some(AsyncStatus::parse(text).ok_or_else(|| {
                AsyncError::invalid(
                    "status",
                    format!(
                        "Unknown status `{}`: one of QUEUED, IN_PROGRESS, SUCCEEDED, FAILED, EXPIRED, CANCELED, WEBHOOK_FAILED.",
                        excerpt(text)
                    ),
                )
            })?),
        };
        let mut after = match &query.after {
            None => None,
            Some(id) => Some(self.load_owned(project, id).await?.record.cursor()),
        };
        let mut data = Vec::new();
        let mut has_more = false;
        // A status filter may skip many records: read pages until the page is full (bounded).
        for _ in 0..20 {
            let page = self
                .deps
                .state
                .list_by_owner(&ListQuery {
                    kind: KIND.to_owned(),
                    owner: project.to_string(),
                    after: after.take(),
                    limit: limit + 1 - data.len().min(limit),
                    order: ListOrder::Desc,
                })
                .await?;
            after = page.records.last().map(Record::cursor);
            for record in &page.records {
                if self.is_past_retention(record) {
                    continue;
                }
                let request: StoredRequest = decode(record)?;
                if status.is_some_and(|status| status != request.status) {
                    continue;
                }
                if data.len() == limit {
                    has_more = true;
                    break;
                }
                data.push(AsyncRequestView::of(&request, record.expires_at));
            }
            if has_more || !page.has_more {
                has_more = has_more || (page.has_more && data.len() == limit);
                break;
            }
        }
        Ok(AsyncRequestPage {
            object: "list",
            first_id: data.first().map(|view| view.request_id.clone()),
            last_id: data.last().map(|view| view.request_id.clone()),
            has_more,
            data,
        })
    }

    /// Hand back `request_id`'s slot of `model` (and its place on the model's waiting list),
    /// waking the request now owed a free slot.
    pub(crate) async fn release_slot(&self, model: &str, request_id: &str) {
        let now = self.now_ms();
        let (state, queue) = (self.deps.state.as_ref(), self.deps.queue.as_ref());
        if let Err(err) = crate::model_slots::release(state, queue, model, request_id, now).await {
            tracing::warn!(error = %err, "could not release a model slot; its lease will expire");
        }
    }

    /// Take a request that will not run (any more) off its model's waiting list, if it has a
    /// limited model: the next waiter is woken if a slot is free. Called wherever a request ends
    /// unrun (cancel, expiry, out of attempts), so a dead waiter never holds back a free slot.
    pub(crate) async fn leave_waiting_list(&self, request: &StoredRequest) {
        if self.settings.model_limits.contains_key(&request.model_id) {
            self.release_slot(&request.model_id, &request.request_id).await;
        }
    }

    /// Cancel a request still `QUEUED`: it ends `CANCELED` and its webhook says so. Any other
    /// request is left alone (`canceled: false`, with the reason).
    pub async fn cancel(&self, project: &ProjectId, request_id: &str) -> Result<CancelOutcome, AsyncError> {
        for _ in 0..5 {
            let mut loaded = self.load_owned(project, request_id).await?;
            let status = loaded.body.status;
            if status != AsyncStatus::Queued {
                return Ok(CancelOutcome {
                    request_id: request_id.to_owned(),
                    canceled: false,
                    message: format!("Only QUEUED requests can be canceled; this one is {}.", status.as_str()),
                });
            }
            let now = self.now_ms();
            loaded.body.conclude(
                AsyncStatus::Canceled,
                Some(ErrorEntry {
                    code: super::classify::ASYNC_REQUEST_CANCELED.to_owned(),
                    message: "The request was canceled before it ran.".to_owned(),
                }),
                None,
                now,
            );
            match loaded.save(self.deps.state.as_ref()).await {
                Ok(()) => {
                    self.count_status(AsyncStatus::Canceled);
                    self.leave_waiting_list(&loaded.body).await;
                    self.queue_first_delivery(&loaded.body, now).await?;
                    return Ok(CancelOutcome {
                        request_id: request_id.to_owned(),
                        canceled: true,
                        message: "The request was canceled.".to_owned(),
                    });
                }
                Err(StorageError::Conflict) => continue,
                Err(err) => return Err(err.into()),
            }
        }
        Err(StorageError::Conflict.into())
    }
}
