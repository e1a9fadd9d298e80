//! What every role of async requests works through: their records, their due entries, their
//! models' slots, their saved outputs, and the counts of requests by status.

use super::stored::{AsyncStatus, StoredRequest};
use crate::config::Config;
use crate::ports::webhook_url::UrlPolicy;
use crate::ports::{
    BlobStore, Clock, IdSource, JobQueue, MetricUnit, MetricsSink, NoMetrics, Record, StateStore, StorageError,
};
use crate::scheduler::DueIndex;
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

/// The ports async requests are kept in.
#[derive(Clone)]
pub struct AsyncDeps {
    pub state: Arc<dyn StateStore>,
    pub blobs: Arc<dyn BlobStore>,
    pub queue: Arc<dyn JobQueue>,
    pub clock: Arc<dyn Clock>,
    pub ids: Arc<dyn IdSource>,
}

/// Async requests' records, due entries, slots and outputs, shared by the API, the runner and
/// the due work.
pub struct AsyncRequests {
    pub(crate) deps: AsyncDeps,
    pub(crate) settings: AsyncSettings,
    pub(crate) due: DueIndex,
    /// Requests reaching a status are counted here.
    metrics: Arc<dyn MetricsSink>,
}

impl AsyncRequests {
    pub fn new(deps: AsyncDeps, settings: AsyncSettings) -> Self {
        let due = DueIndex::new(Arc::clone(&deps.state));
        Self {
            deps,
            settings,
            due,
            metrics: Arc::new(NoMetrics),
        }
    }

    /// Count requests by status into `metrics`.
    pub fn with_metrics(mut self, metrics: Arc<dyn MetricsSink>) -> Self {
        self.metrics = metrics;
        self
    }

    /// Spread each due-work lane over `shards` owners ([`DueIndex::with_shards`]).
    pub(crate) fn with_due_index_shards(mut self, shards: u32) -> Self {
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

    /// The record's TTL: the retention period from `from_ms`.
    pub(crate) fn expires_at_s(&self, from_ms: i64) -> i64 {
        from_ms / 1000 + i64::try_from(self.settings.retention.as_secs()).unwrap_or(i64::MAX / 2)
    }

    /// Whether `record` is past its retention (then read as gone, before its TTL removes it).
    pub(crate) fn is_past_retention(&self, record: &Record) -> bool {
        record.expires_at.is_some_and(|at| at <= self.deps.clock.now_unix_s())
    }

    /// The bytes of a saved output, if they are there.
    pub(crate) async fn saved_output(&self, key: &str) -> Result<Option<bytes::Bytes>, StorageError> {
        match self.deps.blobs.get(key).await {
            Ok(body) => Ok(Some(body)),
            Err(StorageError::NotFound) => Ok(None),
            Err(err) => Err(err),
        }
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
}
