//! `Idempotency-Key` support: the first request with a key reserves the id of the resource it
//! creates; a retry with the same key (same project) finds that id instead of creating another.
//! Keys are kept for 24 hours.

use crate::ports::{Clock, ProjectId, StateStore, StorageError};
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};
use std::sync::Arc;

const KIND: &str = "idempotency";
/// How long a key is remembered.
pub(crate) const KEY_TTL_S: i64 = 24 * 3600;
/// The longest key accepted.
pub const MAX_KEY_LEN: usize = 255;

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
struct StoredKey {
    resource_id: String,
    fingerprint: String,
}

/// What a key says about a create request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Reservation {
    /// First use: create the resource with the reserved id.
    New,
    /// Seen before: the resource (perhaps not finished yet) has this id; `same_request` is false
    /// when the earlier request carried other parameters.
    Existing { resource_id: String, same_request: bool },
}

#[derive(Clone)]
pub(crate) struct IdempotencyKeys {
    state: Arc<dyn StateStore>,
    clock: Arc<dyn Clock>,
}

/// A stable digest of a request's parameters.
pub(crate) fn fingerprint(parts: &[&str]) -> String {
    let mut hasher = Sha256::new();
    for part in parts {
        hasher.update(part.as_bytes());
        hasher.update([0u8]);
    }
    hex::encode(hasher.finalize())
}

impl IdempotencyKeys {
    pub fn new(state: Arc<dyn StateStore>, clock: Arc<dyn Clock>) -> Self {
        Self { state, clock }
    }

    /// Reserve `resource_id` for (`project`, `scope`, `key`), or find what an earlier request reserved.
    pub(crate) async fn reserve(
        &self,
        project: &ProjectId,
        scope: &str,
        key: &str,
        resource_id: &str,
        fingerprint: &str,
    ) -> Result<Reservation, StorageError> {
        let id = format!("{scope}/{project}/{}", hex::encode(Sha256::digest(key.as_bytes())));
        let now_ms = self.clock.now_unix_ms();
        let body = StoredKey {
            resource_id: resource_id.to_owned(),
            fingerprint: fingerprint.to_owned(),
        };
        let record = crate::records::new_record(
            KIND.to_owned(),
            id.clone(),
            project.to_string(),
            now_ms,
            Some(now_ms.div_euclid(1000) + KEY_TTL_S),
            &body,
        )?;
        for _ in 0..3 {
            match self.state.create(&record).await {
                Ok(()) => return Ok(Reservation::New),
                Err(StorageError::Conflict) => {}
                Err(err) => return Err(err),
            }
            let Some(existing) = self.state.get(KIND, &id).await? else {
                continue;
            };
            if existing.expires_at.is_some_and(|at| at * 1000 <= now_ms) {
                // An expired key is free again (TTL deletion is lazy).
                let _ = self.state.delete(KIND, &id, Some(existing.version)).await;
                continue;
            }
            let stored: StoredKey = serde_json::from_value(existing.body)
                .map_err(|e| StorageError::Backend(format!("corrupt idempotency record {id}: {e}")))?;
            return Ok(Reservation::Existing {
                same_request: stored.fingerprint == fingerprint,
                resource_id: stored.resource_id,
            });
        }
        Err(StorageError::Conflict)
    }
}

/// Check a client's `Idempotency-Key` header value.
pub fn valid_key(key: &str) -> bool {
    !key.is_empty() && key.len() <= MAX_KEY_LEN && key.chars().all(|c| c.is_ascii_graphic() || c == ' ')
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::adapters::embedded::SqliteStateStore;
    use crate::ports::SystemClock;

    #[tokio::test]
    async fn a_key_reserves_one_id_per_project_and_scope() {
        let keys = IdempotencyKeys::new(Arc::new(SqliteStateStore::in_memory().unwrap()), Arc::new(SystemClock));
        let print = fingerprint(&["body"]);
        assert_eq!(
            keys.reserve(&ProjectId::new("p"), "batches", "k", "b1", &print)
                .await
                .unwrap(),
            Reservation::New
        );
        assert_eq!(
            keys.reserve(&ProjectId::new("p"), "batches", "k", "b2", &print)
                .await
                .unwrap(),
            Reservation::Existing {
                resource_id: "b1".into(),
                same_request: true
            }
        );
        assert_eq!(
            keys.reserve(&ProjectId::new("p"), "batches", "k", "b3", &fingerprint(&["other"]))
                .await
                .unwrap(),
            Reservation::Existing {
                resource_id: "b1".into(),
                same_request: false
            }
        );
        // Another project or another scope is another key.
        assert_eq!(
            keys.reserve(&ProjectId::new("q"), "batches", "k", "b4", &print)
                .await
                .unwrap(),
            Reservation::New
        );
        assert_eq!(
            keys.reserve(&ProjectId::new("p"), "files", "k", "f1", &print)
                .await
                .unwrap(),
            Reservation::New
        );
    }

    #[test]
    fn keys_are_printable_and_bounded() {
        assert!(valid_key("retry-1 abc"));
        assert!(!valid_key(""));
        assert!(!valid_key(&"k".repeat(256)));
        assert!(!valid_key("tab\there"));
    }
}
