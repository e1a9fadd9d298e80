//! The example sets an instance has in memory: loaded on first use, then checked against the
//! stored pointer (`current.json`, a few bytes) at most every [`REFRESH_INTERVAL`] and reloaded
//! only when its version changed. A build on this instance drops its entry at once.

use super::examples::ExampleStore;
use super::index::ExampleIndex;
use crate::ports::{Clock, ProjectId, StorageError};
use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;
use uuid::Uuid;

/// How stale an instance's copy of a set may be before the pointer is read again.
pub const REFRESH_INTERVAL: Duration = Duration::from_secs(30);

type Key = (ProjectId, String, String);

/// One set in memory.
#[derive(Debug, Default)]
pub struct LoadedSet {
    /// `None` when no set was built.
    pub version: Option<Uuid>,
    /// The embedding model the examples were embedded with.
    pub embedding_model: Option<String>,
    pub index: ExampleIndex,
}

struct Entry {
    checked_at_ms: i64,
    set: Arc<LoadedSet>,
}

/// Example sets by (project, function, variant).
pub struct LoadedSets {
    store: ExampleStore,
    clock: Arc<dyn Clock>,
    refresh: Duration,
    entries: Mutex<HashMap<Key, Entry>>,
}

impl LoadedSets {
    pub fn new(store: ExampleStore, clock: Arc<dyn Clock>) -> Self {
        Self {
            store,
            clock,
            refresh: REFRESH_INTERVAL,
            entries: Mutex::new(HashMap::new()),
        }
    }

    #[cfg(test)]
    pub(crate) fn with_refresh(mut self, refresh: Duration) -> Self {
        self.refresh = refresh;
        self
    }

    pub fn store(&self) -> &ExampleStore {
        &self.store
    }

    fn cached(&self, key: &Key) -> Option<(i64, Arc<LoadedSet>)> {
        let entries = self.entries.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        entries.get(key).map(|e| (e.checked_at_ms, Arc::clone(&e.set)))
    }

    fn keep(&self, key: Key, set: Arc<LoadedSet>, now_ms: i64) {
        let mut entries = self.entries.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        entries.insert(
            key,
            Entry {
                checked_at_ms: now_ms,
                set,
            },
        );
    }

    /// Drop the copy of a set (after this instance built it again).
    pub fn forget(&self, project: &ProjectId, function: &str, variant: &str) {
        let mut entries = self.entries.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        entries.remove(&(project.clone(), function.to_owned(), variant.to_owned()));
    }

    /// The variant's examples, refreshed as the module says.
    pub async fn get(
        &self,
        project: &ProjectId,
        function: &str,
        variant: &str,
    ) -> Result<Arc<LoadedSet>, StorageError> {
        let key = (project.clone(), function.to_owned(), variant.to_owned());
        let now = self.clock.now_unix_ms();
        let cached = self.cached(&key);
        let refresh_ms = i64::try_from(self.refresh.as_millis()).unwrap_or(i64::MAX);
        if let Some((checked_at, set)) = &cached {
            if now.saturating_sub(*checked_at) < refresh_ms {
                return Ok(Arc::clone(set));
            }
        }
        // Twice at most: a set replaced between reading the pointer and reading the set is gone.
        for _ in 0..2 {
            let current = self.store.current(project, function, variant).await?;
            let version = current.map(|c| c.version);
            if let Some((_, set)) = cached.as_ref().filter(|(_, set)| set.version == version) {
                self.keep(key, Arc::clone(set), now);
                return Ok(Arc::clone(set));
            }
            let Some(version) = version else {
                let empty = Arc::new(LoadedSet::default());
                self.keep(key, Arc::clone(&empty), now);
                return Ok(empty);
            };
            match self.store.load(project, function, variant, version).await {
                Ok(set) => {
                    let loaded = Arc::new(LoadedSet {
                        version: Some(version),
                        embedding_model: Some(set.embedding_model),
                        index: ExampleIndex::new(set.examples),
                    });
                    self.keep(key, Arc::clone(&loaded), now);
                    return Ok(loaded);
                }
                Err(StorageError::NotFound) => continue,
                Err(other) => return Err(other),
            }
        }
        Err(StorageError::Backend(format!(
            "the DICL examples of variant `{variant}` of function `{function}` changed while being read"
        )))
    }
}
