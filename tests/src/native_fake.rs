//! An in-memory provider batch API for the provider-native batch tests: it keeps uploaded files
//! and created batches, counts every call, runs a batch only when the test says so (each line
//! answered `echo:<content>`, contents starting with `fail-` failed with HTTP 500), and can lose
//! the answer of its next upload or create after doing it (the crash window between a provider
//! call and the write that records it). It does not honour `Idempotency-Key`: a repeated create
//! makes a second batch, so a test sees every double submission.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use async_trait::async_trait;
use bytes::Bytes;
use nimbus_shared::model::{ModelRequest, ModelResponse};
use nimbus_shared::openai::chat::ChatCompletion;
use nimbus_shared::openai::embeddings::EmbeddingRequest;
use nimbus_shared::openai::from_model::completion_to_model;
use nimbus_shared::ports::Clock;
use nimbus_shared::providers::native_batch::{NativeBatchApi, ProviderBatch, ProviderBatchStatus, ProviderCounts};
use nimbus_shared::providers::{CallContext, Embeddings, ProviderError};
use serde_json::{json, Value};
use std::collections::{BTreeMap, HashMap};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

/// Calls the engine made, by method.
#[derive(Debug, Default)]
pub struct FakeCalls {
    pub uploads: AtomicUsize,
    pub find_files: AtomicUsize,
    pub creates: AtomicUsize,
    pub find_batches: AtomicUsize,
    pub polls: AtomicUsize,
    pub cancels: AtomicUsize,
    pub downloads: AtomicUsize,
    pub deletes: AtomicUsize,
}

impl FakeCalls {
    pub fn get(counter: &AtomicUsize) -> usize {
        counter.load(Ordering::SeqCst)
    }
}

#[derive(Debug, Default)]
struct Store {
    files: BTreeMap<String, (String, Bytes)>,
    /// Deleted files stay here for the test to read but are gone for the engine.
    deleted: std::collections::BTreeSet<String>,
    batches: BTreeMap<String, (ProviderBatch, String)>,
    next_id: u32,
}

impl Store {
    fn next(&mut self, prefix: &str) -> String {
        self.next_id += 1;
        format!("{prefix}-{:05}", self.next_id)
    }
}

/// The fake provider batch API (see the module docs).
#[derive(Debug, Default)]
pub struct FakeBatchApi {
    store: Mutex<Store>,
    pub calls: FakeCalls,
    lose_next_upload_answer: AtomicBool,
    lose_next_create_answer: AtomicBool,
}

fn unavailable(what: &str) -> ProviderError {
    ProviderError::Http {
        status: 503,
        message: format!("fake provider: the answer to {what} was lost"),
        retry_after: None,
        body: None,
    }
}

impl FakeBatchApi {
    pub fn new() -> Arc<Self> {
        Arc::new(Self::default())
    }

    /// The next upload stores its file but answers an error (the answer is lost).
    pub fn lose_next_upload_answer(&self) {
        self.lose_next_upload_answer.store(true, Ordering::SeqCst);
    }

    /// The next create makes its batch but answers an error (the answer is lost).
    pub fn lose_next_create_answer(&self) {
        self.lose_next_create_answer.store(true, Ordering::SeqCst);
    }

    /// Every batch created so far.
    pub fn batches(&self) -> Vec<ProviderBatch> {
        self.store
            .lock()
            .unwrap()
            .batches
            .values()
            .map(|(b, _)| b.clone())
            .collect()
    }

    /// The names of the input files uploaded so far (deleted ones too).
    pub fn uploaded_names(&self) -> Vec<String> {
        self.store
            .lock()
            .unwrap()
            .files
            .values()
            .map(|(name, _)| name.clone())
            .filter(|name| name.starts_with("nimbus-"))
            .collect()
    }

    /// How many files the provider still holds (not deleted).
    pub fn live_files(&self) -> usize {
        let store = self.store.lock().unwrap();
        store.files.keys().filter(|id| !store.deleted.contains(*id)).count()
    }

    /// The request lines of every batch's input file, by batch id.
    pub fn input_lines(&self) -> BTreeMap<String, Vec<Value>> {
        let store = self.store.lock().unwrap();
        store
            .batches
            .iter()
            .map(|(id, (_, file))| {
                let lines = store
                    .files
                    .get(file)
                    .map_or_else(Vec::new, |(_, content)| parse_lines(content));
                (id.clone(), lines)
            })
            .collect()
    }

    /// Report `completed` lines of every running batch as done (progress only).
    pub fn report_progress(&self, completed: u64) {
        let mut store = self.store.lock().unwrap();
        for (batch, _) in store.batches.values_mut() {
            if !batch.status.is_terminal() {
                batch.status = ProviderBatchStatus::InProgress;
                batch.counts.completed = completed.min(batch.counts.total);
            }
        }
    }

    /// Run every batch that has not ended: each line answered, or failed if its content starts
    /// with `fail-`; output and error files written; the batch completed.
    pub fn complete_all(&self) {
        let mut store = self.store.lock().unwrap();
        let running: Vec<String> = store
            .batches
            .iter()
            .filter(|(_, (b, _))| !b.status.is_terminal())
            .map(|(id, _)| id.clone())
            .collect();
        for id in running {
            let input = store.batches[&id].1.clone();
            let lines = store.files.get(&input).map_or_else(Vec::new, |(_, c)| parse_lines(c));
            let (mut output, mut errors) = (String::new(), String::new());
            for line in &lines {
                let (target, result) = result_line(line);
                let file = if target { &mut output } else { &mut errors };
                file.push_str(&result.to_string());
                file.push('\n');
            }
            let file_of = |text: String, store: &mut Store| {
                (!text.is_empty()).then(|| {
                    let file_id = store.next("file-out");
                    store
                        .files
                        .insert(file_id.clone(), (format!("{id}-results.jsonl"), Bytes::from(text)));
                    file_id
                })
            };
            let output_file_id = file_of(output, &mut store);
            let error_file_id = file_of(errors, &mut store);
            let (batch, _) = store.batches.get_mut(&id).unwrap();
            let failed = lines.iter().filter(|l| content_of(l).starts_with("fail-")).count() as u64;
            batch.status = ProviderBatchStatus::Completed;
            batch.counts = ProviderCounts {
                total: lines.len() as u64,
                completed: lines.len() as u64 - failed,
                failed,
            };
            batch.output_file_id = output_file_id;
            batch.error_file_id = error_file_id;
        }
    }
}

fn parse_lines(content: &[u8]) -> Vec<Value> {
    String::from_utf8_lossy(content)
        .lines()
        .filter(|l| !l.trim().is_empty())
        .map(|l| serde_json::from_str(l).unwrap())
        .collect()
}

/// The content the fake's chat body carries.
fn content_of(line: &Value) -> String {
    line["body"]["content"].as_str().unwrap_or_default().to_owned()
}

/// (whether it is an output line, the result line) for a request line.
fn result_line(line: &Value) -> (bool, Value) {
    let content = content_of(line);
    let custom_id = line["custom_id"].clone();
    if content.starts_with("fail-") {
        let body = json!({"error": {"message": format!("fake failure for {content}"), "type": "server_error"}});
        return (
            false,
            json!({"id": "req", "custom_id": custom_id, "response": {"status_code": 500, "body": body}, "error": null}),
        );
    }
    let prompt = content.len() as u64;
    let body = json!({
        "id": "fake-completion",
        "object": "chat.completion",
        "created": 0,
        "model": line["body"]["model"],
        "choices": [{"index": 0, "message": {"role": "assistant", "content": format!("echo:{content}")},
                     "finish_reason": "stop"}],
        "usage": {"prompt_tokens": prompt, "completion_tokens": 3, "total_tokens": prompt + 3},
    });
    (
        true,
        json!({"id": "req", "custom_id": custom_id, "response": {"status_code": 200, "body": body}, "error": null}),
    )
}

#[async_trait]
impl NativeBatchApi for FakeBatchApi {
    fn chat_body(&self, request: &ModelRequest) -> Result<Value, ProviderError> {
        let content = request
            .system
            .clone()
            .or_else(|| request.messages.first().map(|m| m.text()))
            .unwrap_or_default();
        Ok(json!({"model": format!("upstream-{}", request.model), "content": content}))
    }

    fn embeddings_body(&self, _request: &EmbeddingRequest) -> Result<Value, ProviderError> {
        Err(ProviderError::Http {
            status: 400,
            message: "the fake provider serves no embeddings".into(),
            retry_after: None,
            body: None,
        })
    }

    fn chat_answer(&self, body: &Value) -> Result<ModelResponse, ProviderError> {
        let completion: ChatCompletion = serde_json::from_value(body.clone()).map_err(|e| ProviderError::Http {
            status: 502,
            message: e.to_string(),
            retry_after: None,
            body: None,
        })?;
        Ok(completion_to_model(completion, Some(body.to_string())))
    }

    fn embeddings_answer(&self, _body: &Value) -> Result<Embeddings, ProviderError> {
        Err(ProviderError::Http {
            status: 502,
            message: "the fake provider serves no embeddings".into(),
            retry_after: None,
            body: None,
        })
    }

    async fn upload_file(
        &self,
        filename: &str,
        content: Bytes,
        _ctx: CallContext<'_>,
    ) -> Result<String, ProviderError> {
        self.calls.uploads.fetch_add(1, Ordering::SeqCst);
        let id = {
            let mut store = self.store.lock().unwrap();
            let id = store.next("file");
            store.files.insert(id.clone(), (filename.to_owned(), content));
            id
        };
        if self.lose_next_upload_answer.swap(false, Ordering::SeqCst) {
            return Err(unavailable("an upload"));
        }
        Ok(id)
    }

    async fn find_file(&self, filename: &str, _ctx: CallContext<'_>) -> Result<Option<String>, ProviderError> {
        self.calls.find_files.fetch_add(1, Ordering::SeqCst);
        let store = self.store.lock().unwrap();
        Ok(store
            .files
            .iter()
            .find(|(id, (name, _))| name == filename && !store.deleted.contains(*id))
            .map(|(id, _)| id.clone()))
    }

    async fn create_batch(
        &self,
        input_file_id: &str,
        _endpoint: &str,
        metadata: &BTreeMap<String, String>,
        _idempotency_key: &str,
        _ctx: CallContext<'_>,
    ) -> Result<ProviderBatch, ProviderError> {
        self.calls.creates.fetch_add(1, Ordering::SeqCst);
        let batch = {
            let mut store = self.store.lock().unwrap();
            let Some((_, content)) = store.files.get(input_file_id) else {
                return Err(ProviderError::Http {
                    status: 400,
                    message: format!("fake provider: no file {input_file_id}"),
                    retry_after: None,
                    body: None,
                });
            };
            let total = parse_lines(content).len() as u64;
            let id = store.next("batch");
            let batch = ProviderBatch {
                id: id.clone(),
                status: ProviderBatchStatus::Validating,
                counts: ProviderCounts {
                    total,
                    completed: 0,
                    failed: 0,
                },
                output_file_id: None,
                error_file_id: None,
                metadata: metadata.clone(),
                errors: Vec::new(),
                created_at: nimbus_shared::ports::SystemClock.now_unix_s(),
            };
            store.batches.insert(id, (batch.clone(), input_file_id.to_owned()));
            batch
        };
        if self.lose_next_create_answer.swap(false, Ordering::SeqCst) {
            return Err(unavailable("a create"));
        }
        Ok(batch)
    }

    async fn find_batch(
        &self,
        key: &str,
        value: &str,
        created_after: i64,
        _ctx: CallContext<'_>,
    ) -> Result<Option<ProviderBatch>, ProviderError> {
        self.calls.find_batches.fetch_add(1, Ordering::SeqCst);
        let store = self.store.lock().unwrap();
        Ok(store
            .batches
            .values()
            .rev()
            .map(|(b, _)| b)
            .find(|b| b.created_at >= created_after && b.metadata.get(key).map(String::as_str) == Some(value))
            .cloned())
    }

    async fn batch(&self, id: &str, _ctx: CallContext<'_>) -> Result<Option<ProviderBatch>, ProviderError> {
        self.calls.polls.fetch_add(1, Ordering::SeqCst);
        Ok(self.store.lock().unwrap().batches.get(id).map(|(b, _)| b.clone()))
    }

    async fn cancel_batch(&self, id: &str, _ctx: CallContext<'_>) -> Result<Option<ProviderBatch>, ProviderError> {
        self.calls.cancels.fetch_add(1, Ordering::SeqCst);
        let mut store = self.store.lock().unwrap();
        Ok(store.batches.get_mut(id).map(|(batch, _)| {
            if !batch.status.is_terminal() {
                batch.status = ProviderBatchStatus::Cancelled;
            }
            batch.clone()
        }))
    }

    async fn file_content(&self, id: &str, _ctx: CallContext<'_>) -> Result<Option<Bytes>, ProviderError> {
        self.calls.downloads.fetch_add(1, Ordering::SeqCst);
        let store = self.store.lock().unwrap();
        if store.deleted.contains(id) {
            return Ok(None);
        }
        Ok(store.files.get(id).map(|(_, c)| c.clone()))
    }

    async fn delete_file(&self, id: &str, _ctx: CallContext<'_>) -> Result<(), ProviderError> {
        self.calls.deletes.fetch_add(1, Ordering::SeqCst);
        self.store.lock().unwrap().deleted.insert(id.to_owned());
        Ok(())
    }
}

/// A map from content to how many times a batch input carried it, across every batch created.
pub fn submitted_contents(fake: &FakeBatchApi) -> HashMap<String, usize> {
    let mut counts = HashMap::new();
    for lines in fake.input_lines().values() {
        for line in lines {
            *counts.entry(content_of(line)).or_default() += 1;
        }
    }
    counts
}
