//! A due-time index over the state store: "work on `target` is due at `t`", listed by due time.

use crate::ports::{ListOrder, ListQuery, Record, StateStore, StorageError};
use serde_json::json;
use std::sync::Arc;

const KIND: &str = "due_work";
/// Conditional-write races [`DueIndex::set`] retries before giving up with the conflict.
const SET_ATTEMPTS: u32 = 5;
/// Records read per page while listing due work.
const PAGE: usize = 100;

/// Due-time index over StateStore: one record per (lane, target): kind "due_work", id "{lane}:{target}",
/// owner "due:{lane}", created_at_ms = due time (the owner listing is then in due order).
#[derive(Clone)]
pub struct DueIndex {
    state: Arc<dyn StateStore>,
}

/// One piece of due work.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DueItem {
    pub target: String,
    pub due_at_ms: i64,
}

fn record_id(lane: &str, target: &str) -> Result<String, StorageError> {
    // A lane with ':' would make "{lane}:{target}" ambiguous between lanes.
    if lane.is_empty() || lane.contains(':') {
        return Err(StorageError::Invalid(format!(
            "a due-work lane is a non-empty name without ':', not {lane:?}"
        )));
    }
    Ok(format!("{lane}:{target}"))
}

fn owner(lane: &str) -> String {
    format!("due:{lane}")
}

/// The entry of `target` in `lane`, due at `due_at_ms`, at `version`.
fn entry(lane: &str, target: &str, due_at_ms: i64, version: u64) -> Result<Record, StorageError> {
    Ok(Record {
        kind: KIND.to_owned(),
        id: record_id(lane, target)?,
        owner: owner(lane),
        created_at_ms: due_at_ms,
        version,
        expires_at: None,
        body: json!({"lane": lane, "target": target}),
    })
}

impl DueIndex {
    pub fn new(state: Arc<dyn StateStore>) -> Self {
        Self { state }
    }

    /// Create, or move to `due_at_ms` (idempotent).
    pub async fn set(&self, lane: &str, target: &str, due_at_ms: i64) -> Result<(), StorageError> {
        let id = record_id(lane, target)?;
        for _ in 0..SET_ATTEMPTS {
            let written = match self.state.get(KIND, &id).await? {
                None => self.state.create(&entry(lane, target, due_at_ms, 1)?).await,
                Some(record) if record.created_at_ms == due_at_ms => return Ok(()),
                Some(mut record) => {
                    let expected = record.version;
                    record.created_at_ms = due_at_ms;
                    record.version = expected + 1;
                    self.state.update(&record, expected).await
                }
            };
            match written {
                // Someone else wrote it meanwhile: look again.
                Err(StorageError::Conflict) => continue,
                other => return other,
            }
        }
        Err(StorageError::Conflict)
    }

    /// Add a target that is new (one write); falls back to [`DueIndex::set`] when it exists.
    pub async fn create(&self, lane: &str, target: &str, due_at_ms: i64) -> Result<(), StorageError> {
        match self.state.create(&entry(lane, target, due_at_ms, 1)?).await {
            Err(StorageError::Conflict) => self.set(lane, target, due_at_ms).await,
            other => other,
        }
    }

    /// Move an entry the caller knows is at `version` (one conditional write, no read); falls
    /// back to [`DueIndex::set`] when it moved on or is gone.
    pub async fn reschedule(&self, lane: &str, target: &str, due_at_ms: i64, version: u64) -> Result<(), StorageError> {
        match self
            .state
            .update(&entry(lane, target, due_at_ms, version + 1)?, version)
            .await
        {
            Err(StorageError::Conflict | StorageError::NotFound) => self.set(lane, target, due_at_ms).await,
            other => other,
        }
    }

    pub async fn clear(&self, lane: &str, target: &str) -> Result<(), StorageError> {
        self.state.delete(KIND, &record_id(lane, target)?, None).await?;
        Ok(())
    }

    /// Items due at or before `now_ms`, earliest first, at most `limit`.
    pub async fn due(&self, lane: &str, now_ms: i64, limit: usize) -> Result<Vec<DueItem>, StorageError> {
        let prefix = record_id(lane, "")?;
        let mut items = Vec::new();
        let mut after = None;
        while items.len() < limit {
            let page = self
                .state
                .list_by_owner(&ListQuery {
                    kind: KIND.to_owned(),
                    owner: owner(lane),
                    after: after.take(),
                    limit: PAGE.min(limit - items.len()),
                    order: ListOrder::Asc,
                })
                .await?;
            for record in &page.records {
                if record.created_at_ms > now_ms {
                    return Ok(items);
                }
                items.push(DueItem {
                    target: record.id.strip_prefix(&prefix).unwrap_or(&record.id).to_owned(),
                    due_at_ms: record.created_at_ms,
                });
            }
            match page.records.last() {
                Some(last) if page.has_more => after = Some(last.cursor()),
                _ => break,
            }
        }
        Ok(items)
    }
}
