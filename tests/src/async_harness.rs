//! Async requests on real adapters, driven by hand: an [`AsyncService`], its [`AsyncRunner`] (behind
//! a [`JobDispatcher`], as a worker runs it) and its [`AsyncDueWork`] (the scheduler's task), over
//! a state store that can refuse chosen writes, a queue that records what was sent, a scripted
//! model, a fake webhook receiver that records every post and answers from a script, fixed signing
//! secrets and a clock the test moves. One [`EventLog`] orders model calls, saved outputs and
//! webhook posts, so a test can prove the model never ran after the output was saved.
//! Used by the tests/async_*.rs files.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use crate::batch_harness::{FaultyState, TestClock};
use crate::batch_inference_harness::config_for;
use async_trait::async_trait;
use base64::engine::general_purpose::STANDARD;
use base64::Engine;
use bytes::Bytes;
use hmac::{Hmac, Mac};
use nimbus_shared::adapters::embedded::{FileBlobStore, MemoryQueue, SqliteStateStore};
use nimbus_shared::app::{function_service, Adapters};
use nimbus_shared::async_requests::{
    AsyncDeps, AsyncDueWork, AsyncExecutor, AsyncRequestView, AsyncRunner, AsyncService, AsyncSettings,
};
use nimbus_shared::inference::InferenceService;
use nimbus_shared::jobs::{JobDispatcher, JobFamily, JobMessage};
use nimbus_shared::model::{ModelRequest, ModelResponse};
use nimbus_shared::openai::chat::ChatCompletion;
use nimbus_shared::openai::from_model::completion_to_model;
use nimbus_shared::ports::{
    BlobStore, ByteStream, Clock, JobOutcome, JobQueue, PostOutcome, Priority, QueueMessage, Record, StateStore,
    StorageError, WebhookTransport,
};
use nimbus_shared::providers::retry::RetryPolicy;
use nimbus_shared::providers::router::{ModelRouter, RoutedModel};
use nimbus_shared::providers::{CallContext, ChatProvider, ProviderError, ProviderHandle};
use nimbus_shared::scheduler::ScheduledTask;
use nimbus_shared::webhooks::{SecretSource, SigningSecret, WebhookUrl};
use serde_json::{json, Value};
use sha2::Sha256;
use std::collections::{HashMap, VecDeque};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::sync::Notify;
use tokio::time::Instant;

pub const PROJECT: &str = "proj_async_tests";
/// A second tenant: none of [`PROJECT`]'s requests may be visible to it.
pub const OTHER_PROJECT: &str = "proj_async_other";
/// The model the scripted provider answers for.
pub const MODEL: &str = "scripted";
/// A webhook URL that passes the submit-time checks (the fake transport never resolves it).
pub const WEBHOOK_URL: &str = "https://hooks.example.com/nimbus";
/// The project's signing secret (the Standard Webhooks reference secret).
pub const SECRET: &str = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw";
/// The record kind of async requests, and the due index's.
pub const REQUEST_KIND: &str = "async_request";
pub const DUE_KIND: &str = "due_work";
/// How long a received message stays hidden: longer than any test.
pub const VISIBILITY: Duration = Duration::from_secs(600);

// What happened, in order ------------------------------------------------------------------------

/// One observable step of a request's life.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Event {
    /// The model was called with this content (the first message's text).
    ModelCall(String),
    /// An output blob was written under this key.
    OutputSaved(String),
    /// A webhook post left with this `webhook-id`.
    WebhookPost(String),
}

/// The events of every part of a harness, in the order they happened.
#[derive(Debug, Clone, Default)]
pub struct EventLog(Arc<Mutex<Vec<Event>>>);

impl EventLog {
    pub fn push(&self, event: Event) {
        self.0.lock().unwrap().push(event);
    }

    pub fn all(&self) -> Vec<Event> {
        self.0.lock().unwrap().clone()
    }

    pub fn model_calls(&self) -> usize {
        self.count(|e| matches!(e, Event::ModelCall(_)))
    }

    pub fn outputs_saved(&self) -> usize {
        self.count(|e| matches!(e, Event::OutputSaved(_)))
    }

    pub fn webhook_posts(&self) -> usize {
        self.count(|e| matches!(e, Event::WebhookPost(_)))
    }

    fn count(&self, which: impl Fn(&Event) -> bool) -> usize {
        self.0.lock().unwrap().iter().filter(|e| which(e)).count()
    }

    /// Panics if the model was called after an output was saved (for tests of one request).
    pub fn assert_no_model_call_after_output(&self) {
        let events = self.all();
        if let Some(saved) = events.iter().position(|e| matches!(e, Event::OutputSaved(_))) {
            let late: Vec<&Event> = events[saved..]
                .iter()
                .filter(|e| matches!(e, Event::ModelCall(_)))
                .collect();
            assert!(late.is_empty(), "the model was called after the output was saved: {events:?}");
        }
    }
}

// The model --------------------------------------------------------------------------------------

/// What the scripted model does on one call.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ModelStep {
    /// Answer `echo:<content>`.
    Answer,
    /// Answer an HTTP error.
    Fail { status: u16, retry_after: Option<Duration> },
    /// Time out.
    Timeout,
    /// Wait until [`ScriptedModel::release`], then answer (a run to kill mid-call).
    Hold,
}

/// A chat model that takes its next step from a script (answering once the script is used up),
/// and logs every call.
pub struct ScriptedModel {
    script: Mutex<VecDeque<ModelStep>>,
    calls: AtomicUsize,
    holding: AtomicUsize,
    release: Notify,
    events: EventLog,
}

impl ScriptedModel {
    fn new(events: EventLog) -> Arc<Self> {
        Arc::new(Self {
            script: Mutex::new(VecDeque::new()),
            calls: AtomicUsize::new(0),
            holding: AtomicUsize::new(0),
            release: Notify::new(),
            events,
        })
    }

    /// Append steps to the script.
    pub fn then(&self, steps: impl IntoIterator<Item = ModelStep>) {
        self.script.lock().unwrap().extend(steps);
    }

    /// Fail the next `times` calls with `status`, then answer.
    pub fn fail_times(&self, times: usize, status: u16) {
        self.then(std::iter::repeat_n(
            ModelStep::Fail {
                status,
                retry_after: None,
            },
            times,
        ));
    }

    pub fn calls(&self) -> usize {
        self.calls.load(Ordering::SeqCst)
    }

    /// Calls waiting in [`ModelStep::Hold`].
    pub fn holding(&self) -> usize {
        self.holding.load(Ordering::SeqCst)
    }

    /// Let every held call answer.
    pub fn release(&self) {
        self.release.notify_waiters();
    }

    fn handle(self: &Arc<Self>) -> ProviderHandle {
        ProviderHandle::chat_only("scripted-provider", Arc::clone(self) as Arc<dyn ChatProvider>)
    }
}

/// Counts a held call out when dropped (also when its run is killed).
struct Holding<'a>(&'a AtomicUsize);

impl Drop for Holding<'_> {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::SeqCst);
    }
}

#[async_trait]
impl ChatProvider for ScriptedModel {
    async fn chat(&self, request: &ModelRequest, _ctx: CallContext<'_>) -> Result<ModelResponse, ProviderError> {
        let content = request.messages.first().map(|m| m.text()).unwrap_or_default();
        self.calls.fetch_add(1, Ordering::SeqCst);
        self.events.push(Event::ModelCall(content.clone()));
        let step = self.script.lock().unwrap().pop_front().unwrap_or(ModelStep::Answer);
        match step {
            ModelStep::Answer => {}
            ModelStep::Fail { status, retry_after } => {
                return Err(ProviderError::Http {
                    status,
                    message: format!("scripted {status}"),
                    retry_after,
                    body: None,
                })
            }
            ModelStep::Timeout => {
                return Err(ProviderError::Timeout {
                    after: Duration::from_secs(30),
                })
            }
            ModelStep::Hold => {
                let released = self.release.notified();
                self.holding.fetch_add(1, Ordering::SeqCst);
                let _holding = Holding(&self.holding);
                released.await;
            }
        }
        let answer: ChatCompletion = serde_json::from_value(json!({
            "id": "upstream",
            "choices": [{"index": 0, "message": {"role": "assistant", "content": format!("echo:{content}")},
                         "finish_reason": "stop"}],
            "usage": {"prompt_tokens": 3, "completion_tokens": 2, "total_tokens": 5},
        }))
        .unwrap();
        Ok(completion_to_model(answer, None))
    }
}

// The webhook receiver ---------------------------------------------------------------------------

/// How the fake receiver answers one post.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Reply {
    Status(u16),
    /// A status with a `Retry-After`.
    StatusRetryAfter(u16, Duration),
    /// The attempt timed out.
    Timeout,
    /// The request arrived but no answer ever comes (a run to kill mid-delivery).
    Hang,
}

/// One post the receiver got.
#[derive(Debug, Clone)]
pub struct Post {
    pub url: String,
    pub headers: Vec<(String, String)>,
    pub body: String,
}

impl Post {
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(n, _)| n.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }

    pub fn json(&self) -> Value {
        serde_json::from_str(&self.body).unwrap()
    }
}

/// A webhook transport that records every post and answers from a script (then `otherwise`).
pub struct FakeReceiver {
    script: Mutex<VecDeque<Reply>>,
    otherwise: Mutex<Reply>,
    posts: Mutex<Vec<Post>>,
    events: EventLog,
}

impl FakeReceiver {
    fn new(events: EventLog) -> Arc<Self> {
        Arc::new(Self {
            script: Mutex::new(VecDeque::new()),
            otherwise: Mutex::new(Reply::Status(200)),
            posts: Mutex::new(Vec::new()),
            events,
        })
    }

    /// Answer the next posts with `replies`, in order.
    pub fn then(&self, replies: impl IntoIterator<Item = Reply>) {
        self.script.lock().unwrap().extend(replies);
    }

    /// Answer every post after the script with `reply`.
    pub fn otherwise(&self, reply: Reply) {
        *self.otherwise.lock().unwrap() = reply;
    }

    pub fn posts(&self) -> Vec<Post> {
        self.posts.lock().unwrap().clone()
    }
}

#[async_trait]
impl WebhookTransport for FakeReceiver {
    async fn post(&self, url: &WebhookUrl, headers: &[(String, String)], body: Bytes) -> PostOutcome {
        let post = Post {
            url: url.to_string(),
            headers: headers.to_vec(),
            body: String::from_utf8(body.to_vec()).unwrap(),
        };
        self.events
            .push(Event::WebhookPost(post.header("webhook-id").unwrap_or_default().to_owned()));
        self.posts.lock().unwrap().push(post);
        let reply = self
            .script
            .lock()
            .unwrap()
            .pop_front()
            .unwrap_or_else(|| self.otherwise.lock().unwrap().clone());
        match reply {
            Reply::Status(status) => PostOutcome::Response {
                status,
                retry_after: None,
            },
            Reply::StatusRetryAfter(status, wait) => PostOutcome::Response {
                status,
                retry_after: Some(wait),
            },
            Reply::Timeout => PostOutcome::Failed {
                reason: "timed out".to_owned(),
                timed_out: true,
            },
            Reply::Hang => std::future::pending().await,
        }
    }
}

// Secrets, blobs, queue --------------------------------------------------------------------------

/// Fixed signing secrets per project.
#[derive(Default)]
pub struct FixedSecrets(Mutex<HashMap<String, Vec<SigningSecret>>>);

impl FixedSecrets {
    pub fn set(&self, project: &str, secrets: &[&str]) {
        let parsed = secrets.iter().map(|s| SigningSecret::parse(s).unwrap()).collect();
        self.0.lock().unwrap().insert(project.to_owned(), parsed);
    }
}

#[async_trait]
impl SecretSource for FixedSecrets {
    async fn signing_secrets(&self, project: &str) -> Result<Vec<SigningSecret>, StorageError> {
        Ok(self.0.lock().unwrap().get(project).cloned().unwrap_or_default())
    }
}

/// A blob store that logs every write of an async output.
pub struct ObservedBlobs {
    inner: Arc<dyn BlobStore>,
    events: EventLog,
}

#[async_trait]
impl BlobStore for ObservedBlobs {
    async fn put(&self, key: &str, body: Bytes) -> Result<(), StorageError> {
        self.inner.put(key, body).await?;
        if key.starts_with("async/") {
            self.events.push(Event::OutputSaved(key.to_owned()));
        }
        Ok(())
    }

    async fn put_stream(&self, key: &str, body: ByteStream) -> Result<u64, StorageError> {
        self.inner.put_stream(key, body).await
    }

    async fn get(&self, key: &str) -> Result<Bytes, StorageError> {
        self.inner.get(key).await
    }

    async fn get_range(&self, key: &str, start: u64, end: u64) -> Result<Bytes, StorageError> {
        self.inner.get_range(key, start, end).await
    }

    async fn get_stream(&self, key: &str) -> Result<ByteStream, StorageError> {
        self.inner.get_stream(key).await
    }

    async fn size(&self, key: &str) -> Result<Option<u64>, StorageError> {
        self.inner.size(key).await
    }

    async fn delete(&self, key: &str) -> Result<(), StorageError> {
        self.inner.delete(key).await
    }

    async fn delete_prefix(&self, prefix: &str) -> Result<u64, StorageError> {
        self.inner.delete_prefix(prefix).await
    }

    async fn presign_get(&self, key: &str, ttl: Duration, filename: &str) -> Result<Option<String>, StorageError> {
        self.inner.presign_get(key, ttl, filename).await
    }

    async fn presign_put(&self, key: &str, ttl: Duration) -> Result<Option<String>, StorageError> {
        self.inner.presign_put(key, ttl).await
    }
}

/// A message on its way to a worker, due at `due_ms` on the test clock.
#[derive(Debug, Clone)]
pub struct InFlight {
    pub job: JobMessage,
    pub due_ms: i64,
}

/// A message as it was sent.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SentJob {
    pub job: JobMessage,
    /// `None`: the batch lane.
    pub priority: Option<Priority>,
    pub delay: Duration,
}

/// A queue that records every message sent, then passes it on.
pub struct RecordingQueue {
    inner: Arc<dyn JobQueue>,
    sent: Mutex<Vec<SentJob>>,
}

impl RecordingQueue {
    fn record(&self, body: &str, priority: Option<Priority>, delay: Duration) {
        let job = serde_json::from_str(body).unwrap();
        self.sent.lock().unwrap().push(SentJob { job, priority, delay });
    }

    pub fn sent(&self) -> Vec<SentJob> {
        self.sent.lock().unwrap().clone()
    }

    /// What was sent since the last call (or the start).
    pub fn take_sent(&self) -> Vec<SentJob> {
        std::mem::take(&mut *self.sent.lock().unwrap())
    }
}

#[async_trait]
impl JobQueue for RecordingQueue {
    async fn send(&self, body: &str, delay: Duration) -> Result<String, StorageError> {
        let id = self.inner.send(body, delay).await?;
        self.record(body, None, delay);
        Ok(id)
    }

    async fn send_priority(&self, body: &str, priority: Priority, delay: Duration) -> Result<String, StorageError> {
        let id = self.inner.send_priority(body, priority, delay).await?;
        self.record(body, Some(priority), delay);
        Ok(id)
    }

    async fn receive(
        &self,
        max: usize,
        wait: Duration,
        visibility: Duration,
    ) -> Result<Vec<QueueMessage>, StorageError> {
        self.inner.receive(max, wait, visibility).await
    }

    async fn delete(&self, receipt: &str) -> Result<(), StorageError> {
        self.inner.delete(receipt).await
    }

    async fn change_visibility(&self, receipt: &str, timeout: Duration) -> Result<(), StorageError> {
        self.inner.change_visibility(receipt, timeout).await
    }
}

// The harness ------------------------------------------------------------------------------------

/// Settings for the tests: the real defaults, one model without a concurrency limit.
pub fn settings() -> AsyncSettings {
    AsyncSettings::default()
}

/// The state, blob store and queue a harness runs on.
pub struct Stack {
    pub state: Arc<dyn StateStore>,
    pub blobs: Arc<dyn BlobStore>,
    pub queue: Arc<dyn JobQueue>,
}

pub struct AsyncHarness {
    /// The embedded stack's files (none on other stacks).
    pub dir: Option<tempfile::TempDir>,
    pub clock: Arc<TestClock>,
    pub state: Arc<FaultyState>,
    pub blobs: Arc<dyn BlobStore>,
    pub queue: Arc<RecordingQueue>,
    pub events: EventLog,
    pub model: Arc<ScriptedModel>,
    pub receiver: Arc<FakeReceiver>,
    pub secrets: Arc<FixedSecrets>,
    pub service: Arc<AsyncService>,
    /// The worker: the async runner behind a dispatcher, as the app registers it.
    pub worker: JobDispatcher,
    /// The scheduler's task for async requests.
    pub due_work: AsyncDueWork,
    pub settings: AsyncSettings,
}

impl AsyncHarness {
    /// A harness on the embedded adapters (SQLite, files, the in-process queue), [`PROJECT`]
    /// signing with [`SECRET`].
    pub fn embedded(settings: AsyncSettings) -> Self {
        let dir = tempfile::tempdir().unwrap();
        let stack = Stack {
            state: Arc::new(SqliteStateStore::open(&dir.path().join("state.sqlite3")).unwrap()),
            blobs: Arc::new(FileBlobStore::open(dir.path().join("blobs")).unwrap()),
            queue: Arc::new(MemoryQueue::new()),
        };
        let mut harness = Self::over(stack, settings);
        harness.dir = Some(dir);
        harness
    }

    /// A harness on `stack`, [`PROJECT`] signing with [`SECRET`].
    pub fn over(stack: Stack, settings: AsyncSettings) -> Self {
        let events = EventLog::default();
        let clock = Arc::new(TestClock::default());
        let state = Arc::new(FaultyState::new(stack.state));
        let blobs: Arc<dyn BlobStore> = Arc::new(ObservedBlobs {
            inner: stack.blobs,
            events: events.clone(),
        });
        let queue = Arc::new(RecordingQueue {
            inner: stack.queue,
            sent: Mutex::new(Vec::new()),
        });
        let adapters = Adapters {
            clock: Arc::clone(&clock) as Arc<dyn Clock>,
            ..Adapters::new(
                Arc::clone(&state) as Arc<dyn StateStore>,
                Arc::clone(&blobs),
                Arc::clone(&queue) as Arc<dyn JobQueue>,
            )
        };
        let model = ScriptedModel::new(events.clone());
        let routed = vec![RoutedModel {
            name: MODEL.to_owned(),
            providers: vec![model.handle()],
        }];
        // No retries inside a run: every failure is the async runner's to retry.
        let policy = RetryPolicy {
            max_retries: 0,
            initial_backoff: Duration::from_millis(1),
            max_backoff: Duration::from_millis(1),
            max_retry_after: Duration::from_millis(1),
        };
        let inference = Arc::new(InferenceService::new(
            ModelRouter::new(routed, policy),
            Arc::clone(&adapters.clock),
            Arc::clone(&adapters.ids),
        ));
        let loaded = config_for(&[MODEL]);
        let functions = function_service(
            &loaded,
            &adapters,
            Arc::clone(&inference),
            adapters.inference_records(),
        );
        let service = Arc::new(AsyncService::new(
            AsyncDeps {
                state: Arc::clone(&adapters.state),
                blobs: Arc::clone(&adapters.blobs),
                queue: Arc::clone(&adapters.queue),
                clock: Arc::clone(&adapters.clock),
                ids: Arc::clone(&adapters.ids),
                executor: AsyncExecutor { inference, functions },
            },
            settings.clone(),
        ));
        let receiver = FakeReceiver::new(events.clone());
        let secrets = Arc::new(FixedSecrets::default());
        secrets.set(PROJECT, &[SECRET]);
        let runner = Arc::new(AsyncRunner::new(
            Arc::clone(&service),
            Arc::clone(&receiver) as Arc<dyn WebhookTransport>,
            Arc::clone(&secrets) as Arc<dyn SecretSource>,
        ));
        let worker = JobDispatcher::new(Arc::clone(&adapters.queue), Duration::from_secs(60))
            .with_runner(JobFamily::AsyncRequest, runner);
        Self {
            dir: None,
            clock,
            state,
            blobs,
            queue,
            events,
            model,
            receiver,
            secrets,
            due_work: AsyncDueWork::new(Arc::clone(&service)),
            service,
            worker,
            settings,
        }
    }

    pub fn now_ms(&self) -> i64 {
        self.clock.now_unix_ms()
    }

    pub fn advance(&self, by: Duration) {
        self.clock.advance(by);
    }

    /// Move the clock to `at_ms` (if it is later).
    pub fn advance_to(&self, at_ms: i64) {
        let now = self.now_ms();
        if at_ms > now {
            self.advance(Duration::from_millis(u64::try_from(at_ms - now).unwrap()));
        }
    }

    // Submitting -----------------------------------------------------------------------------

    /// Submit `body` for [`PROJECT`]; the request id.
    pub async fn submit(&self, body: Value) -> String {
        self.submit_for(PROJECT, body).await
    }

    pub async fn submit_for(&self, project: &str, body: Value) -> String {
        let Value::Object(map) = body else {
            panic!("a submission is an object")
        };
        self.service.submit(project, map, None).await.unwrap()
    }

    // Running --------------------------------------------------------------------------------

    /// Run `job` as a worker does (the message's outcome; settling it is the caller's).
    pub async fn run(&self, job: &JobMessage) -> JobOutcome {
        self.worker
            .handle_until(&job.to_body(), Instant::now() + Duration::from_secs(60))
            .await
    }

    /// Run the request's `async_run` message.
    pub async fn run_request(&self, request_id: &str) -> JobOutcome {
        self.run(&run_job(request_id)).await
    }

    /// Run its `async_deliver` message for `attempt`.
    pub async fn deliver(&self, request_id: &str, attempt: u32) -> JobOutcome {
        self.run(&deliver_job(request_id, attempt)).await
    }

    /// Run `job` in the background (abort the handle to kill the worker mid-way).
    pub fn spawn_run(&self, job: &JobMessage) -> tokio::task::JoinHandle<JobOutcome> {
        let worker = self.worker.clone();
        let body = job.to_body();
        tokio::spawn(async move { worker.handle_until(&body, Instant::now() + Duration::from_secs(60)).await })
    }

    /// The next visible message, if any (hidden for [`VISIBILITY`] once received).
    pub async fn receive(&self) -> Option<QueueMessage> {
        self.queue
            .receive(1, Duration::ZERO, VISIBILITY)
            .await
            .unwrap()
            .into_iter()
            .next()
    }

    /// Handle a delivered message as a worker does: delete it when done, else delay it as asked.
    pub async fn handle(&self, message: &QueueMessage) -> JobOutcome {
        let outcome = self
            .worker
            .handle_until(&message.body, Instant::now() + Duration::from_secs(60))
            .await;
        match outcome {
            JobOutcome::Done => self.queue.delete(&message.receipt).await.unwrap(),
            JobOutcome::Retry { retry_after } => self.queue.change_visibility(&message.receipt, retry_after).await.unwrap(),
        }
        outcome
    }

    /// One pass of the async scheduler task at the clock's time: its report.
    pub async fn schedule_pass(&self) -> Value {
        self.due_work.run(self.now_ms()).await.unwrap()
    }

    /// The `async_deliver` messages sent since the last look, as (attempt, delay).
    pub fn take_deliveries(&self, request_id: &str) -> Vec<(u32, Duration)> {
        self.queue
            .take_sent()
            .into_iter()
            .filter_map(|sent| match sent.job {
                JobMessage::AsyncDeliver { request_id: id, attempt } if id == request_id => {
                    Some((attempt, sent.delay))
                }
                _ => None,
            })
            .collect()
    }

    /// Run the request's world on the test clock until the request is final and owes no webhook:
    /// every message sent (and `in_flight`, e.g. a killed worker's message coming back after its
    /// visibility timeout) runs when due, a `Retry` comes back after its delay, the scheduler
    /// passes whenever the request's due-index time comes, and the clock jumps to whatever is due
    /// next. Then every message still queued runs once more (duplicates must be harmless).
    /// Panics after `max_steps`.
    pub async fn settle(&self, request_id: &str, in_flight: Vec<InFlight>, max_steps: usize) {
        let mut pending = in_flight;
        for _ in 0..max_steps {
            let now = self.now_ms();
            pending.extend(self.queue.take_sent().into_iter().map(|sent| InFlight {
                job: sent.job,
                due_ms: now + i64::try_from(sent.delay.as_millis()).unwrap(),
            }));
            if self.is_settled(request_id).await {
                for message in pending {
                    assert_eq!(self.run(&message.job).await, JobOutcome::Done, "{message:?}");
                }
                return;
            }
            let next_message = pending.iter().map(|m| m.due_ms).min();
            let next_look = self.due_at(request_id).await;
            let next = next_message.into_iter().chain(next_look).min().expect("nothing is due: stuck");
            self.advance_to(next);
            let now = self.now_ms();
            if next_look.is_some_and(|at| at <= now) {
                self.schedule_pass().await;
            }
            let (due, later): (Vec<InFlight>, Vec<InFlight>) = pending.into_iter().partition(|m| m.due_ms <= now);
            pending = later;
            for message in due {
                if let JobOutcome::Retry { retry_after } = self.run(&message.job).await {
                    pending.push(InFlight {
                        job: message.job,
                        due_ms: now + i64::try_from(retry_after.as_millis()).unwrap(),
                    });
                }
            }
        }
        panic!("{request_id} did not settle in {max_steps} steps: {}", self.stored(request_id).await);
    }

    /// Whether the request is final and owes no webhook attempt.
    pub async fn is_settled(&self, request_id: &str) -> bool {
        let stored = self.stored(request_id).await;
        let status = stored["status"].as_str().unwrap();
        !matches!(status, "QUEUED" | "IN_PROGRESS") && stored["delivery"]["state"] != "PENDING"
    }

    // Reading --------------------------------------------------------------------------------

    /// The request as the API shows it to [`PROJECT`].
    pub async fn view(&self, request_id: &str) -> AsyncRequestView {
        self.service.get(PROJECT, request_id).await.unwrap()
    }

    /// The request's record.
    pub async fn record(&self, request_id: &str) -> Record {
        self.state.get(REQUEST_KIND, request_id).await.unwrap().unwrap()
    }

    /// The request's record body, as stored.
    pub async fn stored(&self, request_id: &str) -> Value {
        self.record(request_id).await.body
    }

    /// When the scheduler next looks at the request (its due index entry), if it will.
    pub async fn due_at(&self, request_id: &str) -> Option<i64> {
        self.state
            .get(DUE_KIND, &format!("async_request:{request_id}"))
            .await
            .unwrap()
            .map(|record| record.created_at_ms)
    }

    /// The request's saved output, if any.
    pub async fn saved_output(&self, request_id: &str) -> Option<Value> {
        match self.blobs.get(&output_key(request_id)).await {
            Ok(bytes) => Some(serde_json::from_slice(&bytes).unwrap()),
            Err(StorageError::NotFound) => None,
            Err(err) => panic!("{err}"),
        }
    }

    /// The webhook posts made for the request.
    pub fn posts_for(&self, request_id: &str) -> Vec<Post> {
        self.receiver
            .posts()
            .into_iter()
            .filter(|post| post.header("webhook-id") == Some(&format!("msg_{request_id}")))
            .collect()
    }

    /// When the record says the retention ends (ms): the due index's purge time.
    pub async fn purge_at_ms(&self, request_id: &str) -> i64 {
        self.record(request_id).await.expires_at.unwrap() * 1000
    }
}

/// A chat submission to [`MODEL`] whose message is `content`, with the webhook, plus `extra`
/// fields.
pub fn submission(content: &str, extra: Value) -> Value {
    let mut body = json!({
        "model_input": {"model": MODEL, "messages": [{"role": "user", "content": content}]},
        "webhook_endpoint": WEBHOOK_URL,
    });
    if let (Value::Object(body), Value::Object(extra)) = (&mut body, extra) {
        body.extend(extra);
    }
    body
}

pub fn run_job(request_id: &str) -> JobMessage {
    JobMessage::AsyncRun {
        request_id: request_id.to_owned(),
    }
}

pub fn deliver_job(request_id: &str, attempt: u32) -> JobMessage {
    JobMessage::AsyncDeliver {
        request_id: request_id.to_owned(),
        attempt,
    }
}

pub fn output_key(request_id: &str) -> String {
    format!("async/{PROJECT}/{request_id}/output.json")
}

/// A stored async request record whose status is `status`.
pub fn request_with_status(record: &Record, status: &str) -> bool {
    record.kind == REQUEST_KIND && record.body["status"] == status
}

// Verifying signatures independently -------------------------------------------------------------

fn hmac_sha256(key: &[u8], content: &[u8]) -> Vec<u8> {
    let mut mac = <Hmac<Sha256> as Mac>::new_from_slice(key).unwrap();
    mac.update(content);
    mac.finalize().into_bytes().to_vec()
}

/// Checks the post's Standard Webhooks signature as a receiver would: the key is the base64 after
/// `whsec_`, the signed content `{webhook-id}.{webhook-timestamp}.{body}`.
pub fn assert_standard_signature(post: &Post, secret: &str) {
    let id = post.header("webhook-id").expect("webhook-id");
    let timestamp = post.header("webhook-timestamp").expect("webhook-timestamp");
    assert!(timestamp.parse::<i64>().is_ok(), "integer seconds: {timestamp}");
    let key = STANDARD.decode(secret.strip_prefix("whsec_").unwrap()).unwrap();
    let expected = format!(
        "v1,{}",
        STANDARD.encode(hmac_sha256(&key, format!("{id}.{timestamp}.{}", post.body).as_bytes()))
    );
    let signatures = post.header("webhook-signature").expect("webhook-signature");
    assert!(
        signatures.split(' ').any(|s| s == expected),
        "no Standard Webhooks signature matches: {signatures} (expected {expected})"
    );
}

/// Checks the post's Baseten signature: hex HMAC-SHA256 of the body keyed by the secret string.
pub fn assert_baseten_signature(post: &Post, secret: &str) {
    let expected = format!("v1={}", hex::encode(hmac_sha256(secret.as_bytes(), post.body.as_bytes())));
    let signatures = post.header("x-baseten-signature").expect("x-baseten-signature");
    assert!(
        signatures.split(',').any(|s| s == expected),
        "no Baseten signature matches: {signatures} (expected {expected})"
    );
}
