//! Async requests on real adapters, driven by hand: an [`AsyncApi`], its [`AsyncJobs`] (behind
//! a [`JobDispatcher`], as a worker runs it) and its [`AsyncDueWork`] (the scheduler's task), over
//! a state store that can refuse chosen writes and the fakes of [`crate::async_fakes`] (a scripted
//! model, a recording webhook receiver, fixed secrets, a recording queue), with a clock the test
//! moves. Used by the tests/async_*.rs files.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

pub use crate::async_fakes::{
    assert_baseten_signature, assert_standard_signature, Event, EventLog, FakeReceiver, FixedSecrets, InFlight,
    ModelStep, ObservedBlobs, Post, RecordingQueue, Reply, ScriptedModel, SentJob,
};
use crate::batch_harness::{FaultyState, TestClock};
use crate::batch_inference_harness::config_for;
use nimbus_shared::adapters::embedded::{FileBlobStore, MemoryQueue, SqliteStateStore};
use nimbus_shared::app::{function_service, Adapters};
use nimbus_shared::async_requests::{
    AsyncApi, AsyncDeps, AsyncDueWork, AsyncJobs, AsyncRequestView, AsyncRequests, AsyncSettings, EndpointCalls,
    SubmissionCheck,
};
use nimbus_shared::inference::InferenceService;
use nimbus_shared::jobs::{JobDispatcher, JobFamily, JobMessage};
use nimbus_shared::ports::{AsyncRequestId, ProjectId};
use nimbus_shared::ports::{
    BlobStore, Clock, JobOutcome, JobQueue, QueueMessage, Record, StateStore, StorageError, WebhookTransport,
};
use nimbus_shared::providers::retry::RetryPolicy;
use nimbus_shared::providers::router::{ModelRouter, RoutedModel};
use nimbus_shared::scheduler::ScheduledTask;
use nimbus_shared::webhooks::SecretSource;
use serde_json::{json, Value};
use std::sync::Arc;
use std::time::Duration;
use tokio::time::Instant;

pub const PROJECT: &str = "proj_async_tests";
/// A second tenant: none of [`PROJECT`]'s requests may be visible to it.
pub const OTHER_PROJECT: &str = "proj_async_other";

/// [`PROJECT`] as the services take it.
pub fn project() -> ProjectId {
    ProjectId::new(PROJECT)
}
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
    /// The API's side: submit, get, list, cancel.
    pub api: Arc<AsyncApi>,
    /// What the roles share (the local server's takeover runs on it).
    pub requests: Arc<AsyncRequests>,
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
        let blobs: Arc<dyn BlobStore> = Arc::new(ObservedBlobs::new(stack.blobs, events.clone()));
        let queue = Arc::new(RecordingQueue::new(stack.queue));
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
        let functions = function_service(&loaded, &adapters, Arc::clone(&inference), adapters.inference_records());
        let requests = Arc::new(AsyncRequests::new(
            AsyncDeps {
                state: Arc::clone(&adapters.state),
                blobs: Arc::clone(&adapters.blobs),
                queue: Arc::clone(&adapters.queue),
                clock: Arc::clone(&adapters.clock),
                ids: Arc::clone(&adapters.ids),
            },
            settings.clone(),
        ));
        let check = SubmissionCheck::new(&loaded.config, functions.checks().clone());
        let api = Arc::new(AsyncApi::new(Arc::clone(&requests), check));
        let receiver = FakeReceiver::new(events.clone());
        let secrets = Arc::new(FixedSecrets::default());
        secrets.set(PROJECT, &[SECRET]);
        let runner = Arc::new(AsyncJobs::new(
            Arc::clone(&requests),
            EndpointCalls { inference, functions },
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
            due_work: AsyncDueWork::new(Arc::clone(&requests)),
            api,
            requests,
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
        self.api.submit(&ProjectId::new(project), map, None).await.unwrap()
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
        tokio::spawn(async move {
            worker
                .handle_until(&body, Instant::now() + Duration::from_secs(60))
                .await
        })
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
            JobOutcome::Retry { retry_after } => self
                .queue
                .change_visibility(&message.receipt, retry_after)
                .await
                .unwrap(),
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
                JobMessage::AsyncDeliver {
                    request_id: id,
                    attempt,
                } if id.as_str() == request_id => Some((attempt, sent.delay)),
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
            let next = next_message
                .into_iter()
                .chain(next_look)
                .min()
                .expect("nothing is due: stuck");
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
        panic!(
            "{request_id} did not settle in {max_steps} steps: {}",
            self.stored(request_id).await
        );
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
        self.api.get(&project(), request_id).await.unwrap()
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
        request_id: AsyncRequestId::new(request_id),
    }
}

pub fn deliver_job(request_id: &str, attempt: u32) -> JobMessage {
    JobMessage::AsyncDeliver {
        request_id: AsyncRequestId::new(request_id),
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
