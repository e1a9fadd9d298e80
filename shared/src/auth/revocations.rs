//! Immediate revocation: one small record per project whose version every revocation in that
//! project bumps (an API key or a webhook signing secret), in the same conditional transaction as
//! the revoked record itself. Every process reads it once per use (one strongly consistent read)
//! and trusts what it cached about the project only while the version is the one it filled the
//! cache under — so a revocation takes effect on the next request in every process, with no TTL
//! to wait out.
//!
//! Why it is safe: a cache is filled by reading the version *first* and the checked record (key,
//! secrets) *after*; a revocation writes the record and the bump at once. A fill that saw the
//! record unrevoked read it before the revocation, so it read the version before the bump too,
//! and the bump then invalidates what it cached.

use crate::ports::{Clock, ProjectId, Record, StateStore, StorageError};
use std::sync::Arc;

/// Kind of the per-project revocation record (id: the project).
pub(crate) const REVOCATION_KIND: &str = "revocation";

/// Reads and bumps a project's revocation version.
#[derive(Clone)]
pub(crate) struct Revocations {
    state: Arc<dyn StateStore>,
    clock: Arc<dyn Clock>,
}

impl Revocations {
    pub fn new(state: Arc<dyn StateStore>, clock: Arc<dyn Clock>) -> Self {
        Self { state, clock }
    }

    /// The project's revocation version: 0 until anything in it was revoked. One read.
    pub async fn version(&self, project: &ProjectId) -> Result<u64, StorageError> {
        Ok(self
            .state
            .get(REVOCATION_KIND, project.as_str())
            .await?
            .map_or(0, |record| record.version))
    }

    /// Write `record` (at `expected`) and bump `project`'s revocation version, both or neither.
    /// [`StorageError::Conflict`] when either moved on: the caller reads again and retries.
    pub(crate) async fn write_revoking(
        &self,
        project: &ProjectId,
        record: &Record,
        expected: u64,
    ) -> Result<(), StorageError> {
        let counter = match self.state.get(REVOCATION_KIND, project.as_str()).await? {
            Some(counter) => counter,
            None => {
                let counter = crate::records::new_record(
                    REVOCATION_KIND.to_owned(),
                    project.to_string(),
                    project.to_string(),
                    self.clock.now_unix_ms(),
                    None,
                    &serde_json::json!({ "project": project }),
                )?;
                match self.state.create(&counter).await {
                    Ok(()) | Err(StorageError::Conflict) => {}
                    Err(err) => return Err(err),
                }
                return Err(StorageError::Conflict);
            }
        };
        let bumped = crate::records::next_version(&counter, &counter.body)?;
        self.state
            .update_all(&[(record.clone(), expected), (bumped, counter.version)])
            .await
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::adapters::embedded::SqliteStateStore;
    use crate::ports::SystemClock;

    #[tokio::test]
    async fn a_revoking_write_bumps_the_version_with_the_record() {
        let state: Arc<dyn StateStore> = Arc::new(SqliteStateStore::in_memory().unwrap());
        let revocations = Revocations::new(Arc::clone(&state), Arc::new(SystemClock));
        assert_eq!(revocations.version(&ProjectId::new("p1")).await.unwrap(), 0);
        let record = Record {
            kind: "thing".into(),
            id: "t1".into(),
            owner: "p1".into(),
            created_at_ms: 1,
            version: 1,
            expires_at: None,
            body: serde_json::json!({}),
        };
        state.create(&record).await.unwrap();
        let next = Record {
            version: 2,
            ..record.clone()
        };
        // The first write creates the counter and asks for a retry.
        assert_eq!(
            revocations.write_revoking(&ProjectId::new("p1"), &next, 1).await,
            Err(StorageError::Conflict)
        );
        let created = revocations.version(&ProjectId::new("p1")).await.unwrap();
        revocations
            .write_revoking(&ProjectId::new("p1"), &next, 1)
            .await
            .unwrap();
        assert_eq!(revocations.version(&ProjectId::new("p1")).await.unwrap(), created + 1);
        assert_eq!(state.get("thing", "t1").await.unwrap().unwrap().version, 2);
        // A stale record version writes neither.
        assert_eq!(
            revocations.write_revoking(&ProjectId::new("p1"), &next, 1).await,
            Err(StorageError::Conflict)
        );
        assert_eq!(revocations.version(&ProjectId::new("p1")).await.unwrap(), created + 1);
        assert_eq!(revocations.version(&ProjectId::new("p2")).await.unwrap(), 0);
    }
}
