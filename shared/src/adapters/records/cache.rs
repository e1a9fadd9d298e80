//! [`ModelCache`] over a state store and a blob store. Expiry is checked on every read (DynamoDB
//! deletes expired items only eventually; SQLite and moto never do).

use super::payload::{body_str, stash, unstash};
use crate::model::ModelResponse;
use crate::ports::{BlobStore, CacheKey, CachedModelResponse, Clock, ModelCache, Record, StateStore, StorageError};
use async_trait::async_trait;
use serde_json::{Map, Value};
use std::sync::Arc;
use std::time::Duration;

const KIND: &str = "model_cache";

/// Cache entries in the state store (with a TTL), large responses in the blob store.
#[derive(Clone)]
pub struct StateModelCache {
    state: Arc<dyn StateStore>,
    blobs: Arc<dyn BlobStore>,
    clock: Arc<dyn Clock>,
}

impl StateModelCache {
    pub fn new(state: Arc<dyn StateStore>, blobs: Arc<dyn BlobStore>, clock: Arc<dyn Clock>) -> Self {
        Self { state, blobs, clock }
    }
}

fn number(body: &Value, name: &str) -> Option<i64> {
    body.get(name).and_then(Value::as_i64)
}

#[async_trait]
impl ModelCache for StateModelCache {
    async fn lookup(
        &self,
        key: &CacheKey,
        max_age_s: Option<u64>,
    ) -> Result<Option<CachedModelResponse>, StorageError> {
        let Some(stored) = self.state.get(KIND, key.digest()).await? else {
            return Ok(None);
        };
        let body = &stored.body;
        if body_str(body, "project") != Some(key.project().as_str()) {
            return Ok(None);
        }
        let now_ms = self.clock.now_unix_ms();
        let created_at_ms = number(body, "created_at_ms").unwrap_or(stored.created_at_ms);
        let expires_at_ms = number(body, "expires_at_ms").unwrap_or(i64::MIN);
        if now_ms >= expires_at_ms {
            return Ok(None);
        }
        if let Some(max_age_s) = max_age_s {
            let max_age_ms = i64::try_from(max_age_s.saturating_mul(1000)).unwrap_or(i64::MAX);
            if now_ms.saturating_sub(created_at_ms) > max_age_ms {
                return Ok(None);
            }
        }
        match unstash::<ModelResponse>(self.blobs.as_ref(), body).await {
            Ok(response) => Ok(Some(CachedModelResponse {
                response,
                created_at_ms,
            })),
            // A large entry whose object the bucket's lifecycle rule removed: a miss.
            Err(StorageError::NotFound) => Ok(None),
            Err(e) => Err(e),
        }
    }

    async fn store(&self, key: &CacheKey, entry: &CachedModelResponse, ttl: Duration) -> Result<(), StorageError> {
        let ttl_ms = i64::try_from(ttl.as_millis()).unwrap_or(i64::MAX);
        let expires_at_ms = self.clock.now_unix_ms().saturating_add(ttl_ms);
        let mut body = Map::new();
        body.insert("project".into(), Value::String(key.project().to_string()));
        body.insert("created_at_ms".into(), Value::from(entry.created_at_ms));
        body.insert("expires_at_ms".into(), Value::from(expires_at_ms));
        stash(
            self.blobs.as_ref(),
            &format!("cache/{}/{}.json", key.project(), key.digest()),
            &entry.response,
            &mut body,
        )
        .await?;
        let mut record = Record {
            kind: KIND.into(),
            id: key.digest().to_owned(),
            owner: key.digest().to_owned(),
            created_at_ms: entry.created_at_ms,
            version: 1,
            // Whole seconds, rounded up: DynamoDB's TTL attribute.
            expires_at: Some(expires_at_ms.div_euclid(1000) + 1),
            body: Value::Object(body),
        };
        match self.state.create(&record).await {
            Err(StorageError::Conflict) => {}
            other => return other,
        }
        // An entry exists (expired, or written by a concurrent call): replace it once; if another
        // writer moves first, its entry is as good as ours.
        let Some(existing) = self.state.get(KIND, key.digest()).await? else {
            return match self.state.create(&record).await {
                Err(StorageError::Conflict) => Ok(()),
                other => other,
            };
        };
        record.version = existing.version + 1;
        match self.state.update(&record, existing.version).await {
            Err(StorageError::Conflict) => Ok(()),
            other => other,
        }
    }
}
