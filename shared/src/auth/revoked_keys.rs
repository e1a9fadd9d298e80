//! Whether the key that submitted queued work (async requests, batches) was revoked since, by key
//! id. Cached per process like the authenticator's keys: a key seen active is trusted only while
//! its project's revocation version is unchanged (one read per check), a revoked one for good.

use super::keys::ApiKeyService;
use super::revocations::Revocations;
use crate::ports::{Clock, IdSource, ProjectId, StateStore, StorageError};
use std::collections::HashMap;
use std::sync::{Arc, Mutex};

const CACHE_LIMIT: usize = 10_000;

#[derive(Clone, Copy)]
enum Known {
    /// Since this time (Unix ms).
    Revoked(i64),
    /// Active under this revocation version of the project.
    Active(u64),
}

/// Answers "was this key revoked?" for work that recorded the id of the key that submitted it.
pub(crate) struct RevokedKeys {
    keys: ApiKeyService,
    known: Mutex<HashMap<String, (ProjectId, Known)>>,
}

impl RevokedKeys {
    pub fn new(state: Arc<dyn StateStore>, clock: Arc<dyn Clock>, ids: Arc<dyn IdSource>) -> Self {
        Self::over(ApiKeyService::new(state, clock, ids))
    }

    /// Over the keys of `keys`.
    pub fn over(keys: ApiKeyService) -> Self {
        Self {
            keys,
            known: Mutex::new(HashMap::new()),
        }
    }

    fn revocations(&self) -> &Revocations {
        self.keys.revocations()
    }

    /// Whether `key_id` is revoked (a key that does not exist counts as revoked): one read when
    /// known, three on first sight (key, its project's version, key again).
    pub(crate) async fn is_revoked(&self, key_id: &str) -> Result<bool, StorageError> {
        Ok(self.revoked_at(key_id).await?.is_some())
    }

    /// When `key_id` was revoked (Unix ms; 0 for a key that does not exist), if it was.
    pub(crate) async fn revoked_at(&self, key_id: &str) -> Result<Option<i64>, StorageError> {
        let known = self.known.lock().ok().and_then(|known| known.get(key_id).cloned());
        let project = match known {
            Some((_, Known::Revoked(at))) => return Ok(Some(at)),
            Some((project, Known::Active(version))) => {
                let current = self.revocations().version(&project).await?;
                if current == version {
                    return Ok(None);
                }
                return self.fill(key_id, &project, current).await;
            }
            None => match self.keys.info(key_id).await? {
                None => return Ok(Some(0)),
                Some(info) if info.revoked_at.is_some() => {
                    let at = info.revoked_at.unwrap_or_default().saturating_mul(1000);
                    self.remember(key_id, &info.project, Known::Revoked(at));
                    return Ok(Some(at));
                }
                Some(info) => info.project,
            },
        };
        let version = self.revocations().version(&project).await?;
        self.fill(key_id, &project, version).await
    }

    /// Read the key after `version` was read, and remember the answer under it.
    async fn fill(&self, key_id: &str, project: &ProjectId, version: u64) -> Result<Option<i64>, StorageError> {
        let revoked_at = match self.keys.info(key_id).await? {
            None => Some(0),
            Some(info) => info.revoked_at.map(|at| at.saturating_mul(1000)),
        };
        let known = revoked_at.map_or(Known::Active(version), Known::Revoked);
        self.remember(key_id, project, known);
        Ok(revoked_at)
    }

    fn remember(&self, key_id: &str, project: &ProjectId, known: Known) {
        if let Ok(mut map) = self.known.lock() {
            if map.len() >= CACHE_LIMIT {
                map.clear();
            }
            map.insert(key_id.to_owned(), (project.clone(), known));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::adapters::embedded::SqliteStateStore;
    use crate::ports::{SystemClock, UuidV7Ids};

    #[tokio::test]
    async fn a_key_revoked_in_another_process_is_seen_on_the_next_check() {
        let state: Arc<dyn StateStore> = Arc::new(SqliteStateStore::in_memory().unwrap());
        let keys = ApiKeyService::new(Arc::clone(&state), Arc::new(SystemClock), Arc::new(UuidV7Ids));
        let worker = RevokedKeys::new(state, Arc::new(SystemClock), Arc::new(UuidV7Ids));
        let key = keys.create(&ProjectId::new("p1"), None).await.unwrap().info.key_id;
        let other = keys.create(&ProjectId::new("p1"), None).await.unwrap().info.key_id;
        for _ in 0..2 {
            assert!(!worker.is_revoked(&key).await.unwrap());
            assert!(!worker.is_revoked(&other).await.unwrap());
        }
        keys.revoke(&key).await.unwrap();
        assert!(worker.is_revoked(&key).await.unwrap());
        assert!(!worker.is_revoked(&other).await.unwrap());
        assert!(worker.is_revoked(&"0".repeat(32)).await.unwrap());
    }
}
