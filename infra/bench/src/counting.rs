//! Port wrappers that count calls: each call of a `StateStore`, `BlobStore` or `JobQueue` method
//! is one request of the AWS adapters (DynamoDB, S3, SQS), named here as AWS names it. Calls are
//! counted per phase (which function would make them), and DynamoDB's request units are estimated
//! from the item sizes.

use async_trait::async_trait;
use bytes::Bytes;
use nimbus_shared::ports::{
    BlobStore, ByteStream, JobQueue, ListQuery, OneTimePut, Page, PresignedPut, Priority, QueueMessage, Record,
    StateStore, StorageError,
};
use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// What was counted in one phase.
#[derive(Debug, Default, Clone)]
pub struct PhaseCounts {
    /// `"DynamoDB PutItem"` → calls.
    pub calls: BTreeMap<&'static str, u64>,
    /// DynamoDB write and read request units (estimated from the item sizes).
    pub wru: f64,
    pub rru: f64,
}

/// Counts by phase; the driver says which phase the calls belong to.
#[derive(Debug, Default)]
pub struct Counter {
    phase: Mutex<&'static str>,
    counts: Mutex<BTreeMap<&'static str, PhaseCounts>>,
}

impl Counter {
    pub fn new() -> Arc<Self> {
        Arc::new(Self {
            phase: Mutex::new("setup"),
            counts: Mutex::new(BTreeMap::new()),
        })
    }

    pub fn set_phase(&self, phase: &'static str) {
        *lock(&self.phase) = phase;
    }

    pub fn take(&self) -> BTreeMap<&'static str, PhaseCounts> {
        std::mem::take(&mut *lock(&self.counts))
    }

    fn add(&self, operation: &'static str, wru: f64, rru: f64) {
        let phase = *lock(&self.phase);
        let mut counts = lock(&self.counts);
        let entry = counts.entry(phase).or_default();
        *entry.calls.entry(operation).or_default() += 1;
        entry.wru += wru;
        entry.rru += rru;
    }
}

fn lock<T>(mutex: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// The size DynamoDB bills for a record: its attributes as the AWS adapter writes them (names and
/// values; the body as JSON text), plus the `by_owner` index keys.
fn item_bytes(record: &Record) -> usize {
    let body = serde_json::to_string(&record.body).map_or(0, |text| text.len());
    let key = record.kind.len() + record.id.len() + 1;
    // pk, kind, id, owner, created_at_ms, version, expires_at, body, owner_key, sort_key (names + values)
    let names = "pkkindidownercreated_at_msversionexpires_atbodyowner_keysort_key".len();
    names + key * 2 + record.owner.len() * 2 + 8 * 3 + 40 + body
}

/// A write: 1 unit per KB, once for the table and once for its `by_owner` index entry.
fn write_units(record: &Record) -> f64 {
    2.0 * (item_bytes(record) as f64 / 1024.0).ceil().max(1.0)
}

/// A strongly consistent read: 1 unit per 4 KB.
fn read_units(record: Option<&Record>) -> f64 {
    (record.map_or(0, item_bytes) as f64 / 4096.0).ceil().max(1.0)
}

pub struct CountingState {
    pub inner: Arc<dyn StateStore>,
    pub counter: Arc<Counter>,
}

impl CountingState {
    /// An eventually consistent index query: half a unit per 4 KB of what it returned.
    fn count_query(&self, page: &Page) {
        let bytes: usize = page.records.iter().map(item_bytes).sum();
        self.counter
            .add("DynamoDB Query", 0.0, 0.5 * (bytes as f64 / 4096.0).ceil().max(1.0));
    }
}

#[async_trait]
impl StateStore for CountingState {
    async fn create(&self, record: &Record) -> Result<(), StorageError> {
        self.counter.add("DynamoDB PutItem", write_units(record), 0.0);
        self.inner.create(record).await
    }

    async fn get(&self, kind: &str, id: &str) -> Result<Option<Record>, StorageError> {
        let found = self.inner.get(kind, id).await?;
        self.counter.add("DynamoDB GetItem", 0.0, read_units(found.as_ref()));
        Ok(found)
    }

    async fn update(&self, record: &Record, expected_version: u64) -> Result<(), StorageError> {
        self.counter.add("DynamoDB PutItem", write_units(record), 0.0);
        self.inner.update(record, expected_version).await
    }

    async fn update_all(&self, updates: &[(Record, u64)]) -> Result<(), StorageError> {
        // Transactions cost twice the units.
        let units: f64 = updates.iter().map(|(record, _)| 2.0 * write_units(record)).sum();
        self.counter.add("DynamoDB TransactWriteItems", units, 0.0);
        self.inner.update_all(updates).await
    }

    async fn delete(&self, kind: &str, id: &str, expected_version: Option<u64>) -> Result<bool, StorageError> {
        self.counter.add("DynamoDB DeleteItem", 2.0, 0.0);
        self.inner.delete(kind, id, expected_version).await
    }

    /// The index holds no bodies: the query, then one consistent `GetItem` per record listed.
    async fn list_by_owner(&self, query: &ListQuery) -> Result<Page, StorageError> {
        let page = self.inner.list_by_owner(query).await?;
        self.count_query(&page);
        for record in &page.records {
            self.counter.add("DynamoDB GetItem", 0.0, read_units(Some(record)));
        }
        Ok(page)
    }

    async fn list_heads_by_owner(&self, query: &ListQuery) -> Result<Page, StorageError> {
        let page = self.inner.list_heads_by_owner(query).await?;
        self.count_query(&page);
        Ok(page)
    }
}

pub struct CountingBlobs {
    pub inner: Arc<dyn BlobStore>,
    pub counter: Arc<Counter>,
}

#[async_trait]
impl BlobStore for CountingBlobs {
    async fn put(&self, key: &str, body: Bytes) -> Result<(), StorageError> {
        self.counter.add("S3 PutObject", 0.0, 0.0);
        self.inner.put(key, body).await
    }

    async fn put_stream(&self, key: &str, body: ByteStream) -> Result<u64, StorageError> {
        self.counter.add("S3 PutObject", 0.0, 0.0);
        self.inner.put_stream(key, body).await
    }

    async fn get(&self, key: &str) -> Result<Bytes, StorageError> {
        self.counter.add("S3 GetObject", 0.0, 0.0);
        self.inner.get(key).await
    }

    async fn get_range(&self, key: &str, start: u64, end: u64) -> Result<Bytes, StorageError> {
        self.counter.add("S3 GetObject", 0.0, 0.0);
        self.inner.get_range(key, start, end).await
    }

    async fn get_stream(&self, key: &str) -> Result<ByteStream, StorageError> {
        self.counter.add("S3 GetObject", 0.0, 0.0);
        self.inner.get_stream(key).await
    }

    async fn size(&self, key: &str) -> Result<Option<u64>, StorageError> {
        self.counter.add("S3 HeadObject", 0.0, 0.0);
        self.inner.size(key).await
    }

    async fn delete(&self, key: &str) -> Result<(), StorageError> {
        self.counter.add("S3 DeleteObject", 0.0, 0.0);
        self.inner.delete(key).await
    }

    async fn delete_prefix(&self, prefix: &str) -> Result<u64, StorageError> {
        self.counter.add("S3 ListObjectsV2", 0.0, 0.0);
        self.inner.delete_prefix(prefix).await
    }

    async fn presign_get(&self, key: &str, ttl: Duration, filename: &str) -> Result<Option<String>, StorageError> {
        // Signed locally: no request.
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

pub struct CountingQueue {
    pub inner: Arc<dyn JobQueue>,
    pub counter: Arc<Counter>,
}

#[async_trait]
impl JobQueue for CountingQueue {
    async fn send(&self, body: &str, delay: Duration) -> Result<String, StorageError> {
        self.counter.add("SQS SendMessage", 0.0, 0.0);
        self.inner.send(body, delay).await
    }

    async fn send_priority(&self, body: &str, priority: Priority, delay: Duration) -> Result<String, StorageError> {
        self.counter.add("SQS SendMessage", 0.0, 0.0);
        self.inner.send_priority(body, priority, delay).await
    }

    async fn send_all(&self, bodies: &[String]) -> Result<(), StorageError> {
        for _ in bodies.chunks(10) {
            self.counter.add("SQS SendMessageBatch", 0.0, 0.0);
        }
        self.inner.send_all(bodies).await
    }

    async fn receive(
        &self,
        max: usize,
        wait: Duration,
        visibility: Duration,
    ) -> Result<Vec<QueueMessage>, StorageError> {
        self.counter.add("SQS ReceiveMessage", 0.0, 0.0);
        self.inner.receive(max, wait, visibility).await
    }

    async fn delete(&self, receipt: &str) -> Result<(), StorageError> {
        self.counter.add("SQS DeleteMessage", 0.0, 0.0);
        self.inner.delete(receipt).await
    }

    async fn change_visibility(&self, receipt: &str, timeout: Duration) -> Result<(), StorageError> {
        self.counter.add("SQS ChangeMessageVisibility", 0.0, 0.0);
        self.inner.change_visibility(receipt, timeout).await
    }
}
