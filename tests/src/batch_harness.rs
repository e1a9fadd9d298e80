//! A batch engine on the embedded adapters, driven by hand: a clock that can jump, scripted model
//! providers that count their calls, and a state store that can refuse chosen writes (a crash or
//! an outage at a precise point). Used by the tests/batch_*.rs files.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use async_trait::async_trait;
use bytes::Bytes;
use futures::StreamExt;
use nimbus_shared::adapters::embedded::{FileBlobStore, MemoryQueue, SqliteStateStore};
use nimbus_shared::app::{
    async_requests, batch_engine, function_service, job_dispatcher, scheduler, Adapters, ModelLayers, WorkerParts,
};
use nimbus_shared::batches::{BatchApi, BatchRecovery, BatchSettings, RecoveryReport};
use nimbus_shared::files::{FileContent, FilesService, ListFiles, NewFile, FILE_PAGE};
use nimbus_shared::inference::InferenceService;
use nimbus_shared::jobs::JobDispatcher;
use nimbus_shared::openai::batches::{BatchObject, CreateBatchRequest};
use nimbus_shared::openai::files::{FileObject, FilePurpose};
use nimbus_shared::ports::{BatchId, ProjectId};
use nimbus_shared::ports::{
    BlobStore, Clock, InferenceStore, JobOutcome, JobQueue, ListOrder, ListQuery, Page, QueueMessage, Record,
    StateStore, StorageError, SystemClock,
};
use nimbus_shared::providers::retry::RetryPolicy;
use nimbus_shared::providers::router::{ModelRouter, RoutedModel};
use nimbus_shared::scheduler::Scheduler;
use serde_json::{json, Value};
use std::collections::{BTreeMap, HashMap};
use std::sync::atomic::{AtomicI64, AtomicU32, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::time::Instant;

pub use crate::scripted_provider::{tokens_for, OnRepeat, ScriptedProvider};

pub const PROJECT: &str = "proj_batch_tests";

/// [`PROJECT`] as the services take it.
pub fn project() -> ProjectId {
    ProjectId::new(PROJECT)
}
/// The model most tests register their scripted provider under.
pub const MODEL: &str = "scripted";
/// How long a received message stays hidden: longer than any test, so a message that is neither
/// deleted nor given a retry delay is as good as lost (a crashed worker's delivery).
pub const VISIBILITY: Duration = Duration::from_secs(600);

/// Settings with small timings; tests change what they need.
pub fn settings() -> BatchSettings {
    BatchSettings {
        lines_per_chunk: 10,
        max_chunk_bytes: 1 << 20,
        line_concurrency: 4,
        checkpoint_lines: 1,
        checkpoint_interval: Duration::from_millis(50),
        status_poll_interval: Duration::from_millis(50),
        live_progress_always: false,
        max_run: Duration::from_secs(60),
        requeue_after: Duration::from_secs(1),
        allow_short_windows: false,
        model_limits: HashMap::new(),
        native: nimbus_shared::batches::NativeSettings {
            max_lines: 50_000,
            max_bytes: 200_000_000,
            poll_interval: Duration::from_millis(10),
            poll_max_interval: Duration::from_millis(100),
        },
    }
}

/// `settings()` running one line at a time: saved progress is a prefix of the chunk.
pub fn slow_settings() -> BatchSettings {
    let mut s = settings();
    s.line_concurrency = 1;
    s
}

/// The system clock plus an offset the test moves forward.
#[derive(Debug, Default)]
pub struct TestClock {
    offset_ms: AtomicI64,
}

impl TestClock {
    pub fn advance(&self, by: Duration) {
        self.offset_ms
            .fetch_add(i64::try_from(by.as_millis()).unwrap(), Ordering::SeqCst);
    }
}

impl Clock for TestClock {
    fn now_unix_ms(&self) -> i64 {
        SystemClock.now_unix_ms() + self.offset_ms.load(Ordering::SeqCst)
    }
}

type WritePredicate = Box<dyn Fn(&Record) -> bool + Send + Sync>;

struct Fault {
    matches: WritePredicate,
    remaining: u32,
}

/// A state store that refuses the next `times` writes (create, update, update_all) of a record matching a
/// predicate with a backend error, as if the process died or storage failed right there.
pub struct FaultyState {
    inner: Arc<dyn StateStore>,
    fault: Mutex<Option<Fault>>,
    injected: AtomicU32,
    /// Reads by call and record kind (`"get batch_chunk"`, `"list batch_chunk"`).
    reads: Mutex<HashMap<String, u32>>,
    /// Writes of a batch record to lose to another writer (see `race_batch_writes`).
    races: AtomicU32,
}

impl FaultyState {
    pub fn new(inner: Arc<dyn StateStore>) -> Self {
        Self {
            inner,
            fault: Mutex::new(None),
            injected: AtomicU32::new(0),
            reads: Mutex::new(HashMap::new()),
            races: AtomicU32::new(0),
        }
    }

    pub fn fail_writes(&self, times: u32, matches: impl Fn(&Record) -> bool + Send + Sync + 'static) {
        *self.fault.lock().unwrap() = Some(Fault {
            matches: Box::new(matches),
            remaining: times,
        });
    }

    pub fn clear_faults(&self) {
        *self.fault.lock().unwrap() = None;
    }

    /// How many reads `what` (`"get KIND"` or `"list KIND"`, a page each) were made so far.
    pub fn reads(&self, what: &str) -> u32 {
        self.reads.lock().unwrap().get(what).copied().unwrap_or(0)
    }

    fn count_read(&self, call: &str, kind: &str) {
        *self.reads.lock().unwrap().entry(format!("{call} {kind}")).or_default() += 1;
    }

    /// The next `times` transactions that write a batch record lose to another writer, who
    /// wrote the batch just before them (as another chunk's save does).
    pub fn race_batch_writes(&self, times: u32) {
        self.races.store(times, Ordering::SeqCst);
    }

    /// How many writes were refused so far.
    pub fn injected(&self) -> u32 {
        self.injected.load(Ordering::SeqCst)
    }

    fn check(&self, records: &[&Record]) -> Result<(), StorageError> {
        let mut fault = self.fault.lock().unwrap();
        if let Some(f) = fault.as_mut() {
            if f.remaining > 0 && records.iter().any(|r| (f.matches)(r)) {
                f.remaining -= 1;
                self.injected.fetch_add(1, Ordering::SeqCst);
                return Err(StorageError::Backend("injected fault".into()));
            }
        }
        Ok(())
    }
}

/// A stored batch record whose API status is `status`.
pub fn batch_record_with_status(record: &Record, status: &str) -> bool {
    record.kind == "batch" && record.body["batch"]["status"] == status
}

#[async_trait]
impl StateStore for FaultyState {
    async fn create(&self, record: &Record) -> Result<(), StorageError> {
        self.check(&[record])?;
        self.inner.create(record).await
    }

    async fn get(&self, kind: &str, id: &str) -> Result<Option<Record>, StorageError> {
        self.count_read("get", kind);
        self.inner.get(kind, id).await
    }

    async fn update(&self, record: &Record, expected_version: u64) -> Result<(), StorageError> {
        self.check(&[record])?;
        self.inner.update(record, expected_version).await
    }

    async fn update_all(&self, updates: &[(Record, u64)]) -> Result<(), StorageError> {
        self.check(&updates.iter().map(|(r, _)| r).collect::<Vec<_>>())?;
        let batch = updates.iter().find(|(r, _)| r.kind == "batch");
        if let Some((record, _)) = batch.filter(|_| self.races.load(Ordering::SeqCst) > 0) {
            self.races.fetch_sub(1, Ordering::SeqCst);
            let mut other = self.inner.get("batch", &record.id).await?.unwrap();
            other.version += 1;
            self.inner.update(&other, other.version - 1).await?;
        }
        self.inner.update_all(updates).await
    }

    async fn delete(&self, kind: &str, id: &str, expected_version: Option<u64>) -> Result<bool, StorageError> {
        self.inner.delete(kind, id, expected_version).await
    }

    async fn list_by_owner(&self, query: &ListQuery) -> Result<Page, StorageError> {
        self.count_read("list", &query.kind);
        self.inner.list_by_owner(query).await
    }

    async fn list_heads_by_owner(&self, query: &ListQuery) -> Result<Page, StorageError> {
        self.count_read("list", &query.kind);
        self.inner.list_heads_by_owner(query).await
    }
}

/// The results of a finished batch, read back through the files API.
#[derive(Debug, Default)]
pub struct BatchResults {
    pub output: Vec<Value>,
    pub errors: Vec<Value>,
}

impl BatchResults {
    /// How often each custom_id appears across both files.
    pub fn custom_id_counts(&self) -> BTreeMap<String, usize> {
        let mut counts = BTreeMap::new();
        for line in self.output.iter().chain(&self.errors) {
            let id = line["custom_id"].as_str().unwrap_or("<missing>").to_owned();
            *counts.entry(id).or_default() += 1;
        }
        counts
    }

    /// Panics unless every id in `expected` appears exactly once and nothing else appears.
    pub fn assert_each_once(&self, expected: &[String]) {
        let counts = self.custom_id_counts();
        let wanted: BTreeMap<String, usize> = expected.iter().map(|id| (id.clone(), 1)).collect();
        assert_eq!(
            counts, wanted,
            "every custom_id exactly once across output and error files"
        );
    }

    /// Error lines whose `error.code` is `code` (lines that never ran).
    pub fn not_run_with(&self, code: &str) -> Vec<&Value> {
        self.errors.iter().filter(|l| l["error"]["code"] == code).collect()
    }
}

/// One engine over fresh embedded adapters; each model `M` also has a chat function `chat_M` (see
/// [`crate::batch_inference_harness`]).
pub struct Harness {
    pub dir: tempfile::TempDir,
    pub clock: Arc<TestClock>,
    pub state: Arc<FaultyState>,
    pub blobs: Arc<FileBlobStore>,
    pub queue: Arc<MemoryQueue>,
    pub files: FilesService,
    pub api: Arc<BatchApi>,
    /// The queue's jobs, dispatched as the app wires them (`app::job_dispatcher`).
    pub worker: JobDispatcher,
    /// The poller's pass, as the app wires it (`app::scheduler`); see [`Harness::schedule_pass`].
    pub scheduler: Scheduler,
    /// For the local server's start-up takeover.
    pub recovery: BatchRecovery,
    pub settings: BatchSettings,
    /// The inference records `/batch_inference` items are stored in.
    pub records: Arc<dyn InferenceStore>,
}

impl Harness {
    /// An engine whose models are `models` (name, provider).
    pub fn new(settings: BatchSettings, models: &[(&str, Arc<ScriptedProvider>)]) -> Self {
        let routed = models
            .iter()
            .map(|(name, provider)| RoutedModel {
                name: (*name).to_owned(),
                providers: vec![provider.handle(&format!("{name}-provider"))],
            })
            .collect();
        Self::with_routed(settings, routed)
    }

    /// An engine whose models are `routed` as given (providers with any capabilities).
    pub fn with_routed(settings: BatchSettings, routed: Vec<RoutedModel>) -> Self {
        let dir = tempfile::tempdir().unwrap();
        let clock = Arc::new(TestClock::default());
        let sqlite: Arc<dyn StateStore> = Arc::new(SqliteStateStore::open(&dir.path().join("state.sqlite3")).unwrap());
        let state = Arc::new(FaultyState::new(sqlite));
        let blobs = Arc::new(FileBlobStore::open(dir.path().join("blobs")).unwrap());
        let queue = Arc::new(MemoryQueue::new());
        let adapters = Adapters {
            clock: Arc::clone(&clock) as Arc<dyn Clock>,
            ..Adapters::new(
                Arc::clone(&state) as Arc<dyn StateStore>,
                Arc::clone(&blobs) as Arc<dyn BlobStore>,
                Arc::clone(&queue) as Arc<dyn JobQueue>,
            )
        };
        let names: Vec<String> = routed.iter().map(|m| m.name.clone()).collect();
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
        let names: Vec<&str> = names.iter().map(String::as_str).collect();
        let loaded = crate::batch_inference_harness::config_for(&names);
        let records = adapters.inference_records();
        let functions = function_service(&loaded, &adapters, Arc::clone(&inference), Arc::clone(&records));
        let layers = ModelLayers {
            inference: Arc::clone(&inference),
            functions: Arc::clone(&functions),
            records: Arc::clone(&records),
        };
        let engine = batch_engine(&adapters, &layers, settings.clone());
        let parts = WorkerParts {
            adapters: adapters.clone(),
            async_requests: async_requests(&loaded, &adapters),
            layers,
            batches: engine.clone(),
            max_run: settings.max_run,
        };
        Self {
            dir,
            clock,
            state,
            blobs,
            queue,
            files: adapters.files(),
            worker: job_dispatcher(&parts),
            scheduler: scheduler(&parts),
            recovery: engine.recovery(),
            api: Arc::new(engine.api()),
            settings,
            records,
        }
    }

    /// An engine with one model, [`MODEL`], answered by a fresh scripted provider of `latency`.
    pub fn with_model(settings: BatchSettings, latency: Duration) -> (Self, Arc<ScriptedProvider>) {
        let provider = ScriptedProvider::new(latency);
        let harness = Self::new(settings, &[(MODEL, Arc::clone(&provider))]);
        (harness, provider)
    }

    /// One pass of the scheduler, as the poller runs it: no task may fail; the batch recovery's
    /// report.
    pub async fn schedule_pass(&self) -> Result<RecoveryReport, String> {
        let report = self.scheduler.run_once().await;
        if report.errors > 0 {
            return Err(format!("a scheduled task failed: {report:?}"));
        }
        let batches = report
            .tasks
            .get("batches")
            .cloned()
            .ok_or("no `batches` task in the report")?;
        serde_json::from_value(batches).map_err(|e| e.to_string())
    }

    /// Upload `lines` as a batch input file.
    pub async fn upload(&self, lines: &[String]) -> FileObject {
        let mut text = lines.join("\n");
        text.push('\n');
        let body = futures::stream::iter([Ok::<_, StorageError>(Bytes::from(text))]).boxed();
        let new = NewFile {
            filename: "x.jsonl".to_owned(),
            purpose: FilePurpose::Batch,
            expires_after: None,
        };
        self.files.create_file(&project(), new, body).await.unwrap()
    }

    pub fn create_request(file_id: &str) -> CreateBatchRequest {
        CreateBatchRequest {
            input_file_id: file_id.to_owned(),
            endpoint: "/v1/chat/completions".to_owned(),
            completion_window: "24h".to_owned(),
            metadata: None,
            output_expires_after: None,
        }
    }

    /// Upload `lines` and create a batch of them (still `validating`; its validation is queued).
    pub async fn create_batch(&self, lines: &[String]) -> BatchObject {
        let file = self.upload(lines).await;
        self.api
            .create_batch(&project(), Self::create_request(&file.id), None)
            .await
            .unwrap()
    }

    pub async fn batch(&self, id: &str) -> BatchObject {
        self.api.get_batch(&project(), &BatchId::new(id), false).await.unwrap()
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

    /// A deadline that lets a run start lines for `run_for` (the runner stops starting lines
    /// 30 s before its deadline).
    pub fn deadline_after(run_for: Duration) -> Instant {
        Instant::now() + Duration::from_secs(30) + run_for
    }

    /// The same message run by two workers at once (a duplicate delivery racing the first).
    pub async fn run_twice_at_once(&self, message: &QueueMessage, deadline: Instant) -> (JobOutcome, JobOutcome) {
        tokio::join!(
            self.worker.handle_until(&message.body, deadline),
            self.worker.handle_until(&message.body, deadline)
        )
    }

    /// Handle one delivery like a worker does: delete it when done, else delay it as asked.
    pub async fn handle(&self, message: &QueueMessage) -> JobOutcome {
        let result = self
            .worker
            .handle_until(&message.body, Instant::now() + self.settings.max_run)
            .await;
        self.settle(message, result).await;
        result
    }

    pub async fn settle(&self, message: &QueueMessage, result: JobOutcome) {
        match result {
            JobOutcome::Done => self.queue.delete(&message.receipt).await.unwrap(),
            JobOutcome::Retry { retry_after: wait } => {
                self.queue.change_visibility(&message.receipt, wait).await.unwrap()
            }
        }
    }

    /// Receive and handle the validation message.
    pub async fn validate(&self) {
        let message = self.receive().await.expect("a validate message");
        assert!(
            message.body.contains("\"validate\""),
            "expected a validate job: {}",
            message.body
        );
        assert_eq!(self.handle(&message).await, JobOutcome::Done);
    }

    /// Handle every message until the queue is empty (waiting for delayed ones), at most `limit`.
    /// Returns how many deliveries were handled.
    pub async fn drain(&self, limit: Duration) -> usize {
        let give_up = Instant::now() + limit;
        let mut handled = 0;
        while !self.queue.is_empty() {
            assert!(Instant::now() < give_up, "the queue did not drain within {limit:?}");
            let wait = give_up.saturating_duration_since(Instant::now());
            let Some(message) = self
                .queue
                .receive(1, wait.min(Duration::from_millis(200)), VISIBILITY)
                .await
                .unwrap()
                .into_iter()
                .next()
            else {
                continue;
            };
            self.handle(&message).await;
            handled += 1;
        }
        handled
    }

    /// Drain, and insist the batch then is in a terminal status.
    pub async fn run_to_end(&self, batch_id: &str) -> BatchObject {
        self.drain(Duration::from_secs(20)).await;
        let batch = self.batch(batch_id).await;
        assert!(batch.status.is_terminal(), "batch ended {:?}", batch.status);
        batch
    }

    pub async fn read_file_lines(&self, file_id: &str) -> Vec<Value> {
        let FileContent::Stream { body, .. } = self.files.file_content(&project(), file_id, u64::MAX).await.unwrap()
        else {
            panic!("the embedded blob store streams file content");
        };
        let chunks: Vec<Bytes> = body.map(|chunk| chunk.unwrap()).collect().await;
        let text = String::from_utf8(chunks.concat()).unwrap();
        text.lines()
            .filter(|l| !l.trim().is_empty())
            .map(|l| serde_json::from_str(l).unwrap())
            .collect()
    }

    pub async fn results(&self, batch: &BatchObject) -> BatchResults {
        let mut results = BatchResults::default();
        if let Some(id) = &batch.output_file_id {
            results.output = self.read_file_lines(id).await;
        }
        if let Some(id) = &batch.error_file_id {
            results.errors = self.read_file_lines(id).await;
        }
        results
    }

    /// Every `batch_output` file of the project written for `batch_id`.
    pub async fn result_files(&self, batch_id: &str) -> Vec<FileObject> {
        let list = self
            .files
            .list_files(
                &project(),
                ListFiles {
                    after: None,
                    limit: FILE_PAGE.default_limit(),
                    order: ListOrder::Asc,
                    purpose: Some(FilePurpose::BatchOutput),
                },
            )
            .await
            .unwrap();
        list.data
            .into_iter()
            .filter(|f| f.filename.starts_with(&format!("{batch_id}_")))
            .collect()
    }

    /// A chunk record's body as stored (None once the batch is cleaned up).
    pub async fn chunk(&self, batch_id: &str, index: u32) -> Option<Value> {
        self.state
            .get("batch_chunk", &format!("{batch_id}.{index:05}"))
            .await
            .unwrap()
            .map(|r| r.body)
    }

    /// `lines_done` of a chunk (0 if it has no record).
    /// A worker running `message` in the background for up to a minute (abort it to "kill" it).
    pub fn spawn_run(&self, message: &QueueMessage) -> tokio::task::JoinHandle<JobOutcome> {
        let worker = self.worker.clone();
        let body = message.body.clone();
        tokio::spawn(async move {
            worker
                .handle_until(&body, Instant::now() + Duration::from_secs(60))
                .await
        })
    }

    /// Wait (at most 5 s) until chunk `index` has at least `lines` lines saved.
    pub async fn wait_for_saved(&self, batch_id: &str, index: u32, lines: u64, what: &str) {
        self.wait_until(Duration::from_secs(5), what, || async {
            self.lines_done(batch_id, index).await >= lines
        })
        .await;
    }

    pub async fn lines_done(&self, batch_id: &str, index: u32) -> u64 {
        self.chunk(batch_id, index)
            .await
            .map_or(0, |c| c["lines_done"].as_u64().unwrap())
    }

    /// How many records of `kind` `owner` holds.
    pub async fn count_records(&self, kind: &str, owner: &str) -> usize {
        self.state
            .list_by_owner(&ListQuery {
                kind: kind.to_owned(),
                owner: owner.to_owned(),
                after: None,
                limit: 1000,
                order: ListOrder::Asc,
            })
            .await
            .unwrap()
            .records
            .len()
    }

    /// Wait (real time) until `check` holds, at most `limit`.
    pub async fn wait_until<F, Fut>(&self, limit: Duration, what: &str, mut check: F)
    where
        F: FnMut() -> Fut,
        Fut: std::future::Future<Output = bool>,
    {
        let give_up = Instant::now() + limit;
        while !check().await {
            assert!(Instant::now() < give_up, "timed out waiting for {what}");
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    }
}

/// A chat request line whose message content is its custom_id.
pub fn chat_line(model: &str, custom_id: &str) -> String {
    json!({
        "custom_id": custom_id,
        "method": "POST",
        "url": "/v1/chat/completions",
        "body": {"model": model, "messages": [{"role": "user", "content": custom_id}]},
    })
    .to_string()
}

/// `n` custom ids `req-0000`…; every `fail_every`-th (if any) is `fail-…` (the provider fails it).
pub fn custom_ids(n: usize, fail_every: Option<usize>) -> Vec<String> {
    (0..n)
        .map(|i| match fail_every {
            Some(k) if i % k == k - 1 => format!("fail-{i:04}"),
            _ => format!("req-{i:04}"),
        })
        .collect()
}

pub fn lines_for(model: &str, ids: &[String]) -> Vec<String> {
    ids.iter().map(|id| chat_line(model, id)).collect()
}
