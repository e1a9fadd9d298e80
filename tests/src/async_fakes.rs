//! The fakes around an async request's domain in the tests: a scripted chat model, a webhook
//! receiver that records every post and answers from a script, fixed signing secrets, a blob store
//! and a queue that record what they were given, one [`EventLog`] ordering model calls, saved
//! outputs and webhook posts; and a receiver's own checks of both signatures. Wired together by
//! [`crate::async_harness`].

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use async_trait::async_trait;
use base64::engine::general_purpose::STANDARD;
use base64::Engine;
use bytes::Bytes;
use hmac::{Hmac, Mac};
use nimbus_shared::jobs::JobMessage;
use nimbus_shared::model::{ModelRequest, ModelResponse};
use nimbus_shared::openai::chat::ChatCompletion;
use nimbus_shared::openai::from_model::completion_to_model;
use nimbus_shared::ports::{
    BlobStore, ByteStream, JobQueue, OneTimePut, PostOutcome, PresignedPut, Priority, ProjectId, QueueMessage,
    StorageError, WebhookTransport,
};
use nimbus_shared::providers::{CallContext, ChatProvider, ProviderError, ProviderHandle};
use nimbus_shared::webhooks::{SecretSource, SigningSecret, WebhookUrl};
use serde_json::{json, Value};
use sha2::Sha256;
use std::collections::{HashMap, VecDeque};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::sync::Notify;

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
            assert!(
                late.is_empty(),
                "the model was called after the output was saved: {events:?}"
            );
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
    pub(crate) fn new(events: EventLog) -> Arc<Self> {
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

    pub(crate) fn handle(self: &Arc<Self>) -> ProviderHandle {
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
    pub(crate) fn new(events: EventLog) -> Arc<Self> {
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
        self.events.push(Event::WebhookPost(
            post.header("webhook-id").unwrap_or_default().to_owned(),
        ));
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
pub struct FixedSecrets(Mutex<HashMap<ProjectId, Vec<SigningSecret>>>);

impl FixedSecrets {
    pub fn set(&self, project: &str, secrets: &[&str]) {
        let parsed = secrets.iter().map(|s| SigningSecret::parse(s).unwrap()).collect();
        self.0.lock().unwrap().insert(ProjectId::new(project), parsed);
    }
}

#[async_trait]
impl SecretSource for FixedSecrets {
    async fn signing_secrets(&self, project: &ProjectId) -> Result<Vec<SigningSecret>, StorageError> {
        Ok(self.0.lock().unwrap().get(project).cloned().unwrap_or_default())
    }
}

/// A blob store that logs every write of an async output.
pub struct ObservedBlobs {
    inner: Arc<dyn BlobStore>,
    events: EventLog,
}

impl ObservedBlobs {
    pub fn new(inner: Arc<dyn BlobStore>, events: EventLog) -> Self {
        Self { inner, events }
    }
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

    async fn presign_put(
        &self,
        key: &str,
        ttl: Duration,
        put: &OneTimePut,
    ) -> Result<Option<PresignedPut>, StorageError> {
        self.inner.presign_put(key, ttl, put).await
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
    pub fn new(inner: Arc<dyn JobQueue>) -> Self {
        Self {
            inner,
            sent: Mutex::new(Vec::new()),
        }
    }

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
    let expected = format!(
        "v1={}",
        hex::encode(hmac_sha256(secret.as_bytes(), post.body.as_bytes()))
    );
    let signatures = post.header("x-baseten-signature").expect("x-baseten-signature");
    assert!(
        signatures.split(',').any(|s| s == expected),
        "no Baseten signature matches: {signatures} (expected {expected})"
    );
}
