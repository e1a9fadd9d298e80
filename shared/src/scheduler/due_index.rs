//! A due-time index over the state store: "work on `target` is due at `t`", listed by due time.

use crate::ports::state::earliest_created_at;
use crate::ports::{ListOrder, ListQuery, Record, StateStore, StorageError};
use crate::records::{put, PutDecision};
use serde_json::json;
use std::sync::Arc;

/// The kind of a due-index entry.
pub(crate) const DUE_WORK_KIND: &str = "due_work";
const KIND: &str = DUE_WORK_KIND;
/// Conditional-write races [`DueIndex::set`] retries before giving up with the conflict.
const SET_ATTEMPTS: u32 = 5;
/// Records read per page while listing due work.
const PAGE: usize = 100;

/// Shards of each lane unless configured ([`DueIndex::with_shards`]): a lane written for every
/// request spreads over this many owners (DynamoDB partitions of the `by_owner` index, each
/// good for about 1,000 writes a second).
pub(crate) const DEFAULT_DUE_INDEX_SHARDS: u32 = 4;

/// The most shards a lane may have (each is one more query per listing).
pub(crate) const MAX_DUE_INDEX_SHARDS: u32 = 64;

/// Due-time index over StateStore: one record per (lane, target): kind "due_work", id "{lane}:{target}",
/// created_at_ms = due time (an owner's listing is then in due order), owner the target's shard of
/// the lane: "due:{lane}" for shard 0 (the only owner before lanes were sharded, so entries
/// written then are shard 0's), "due:{lane}#{k}" for shard k. A target's shard is a fixed hash of
/// it modulo the shard count; a listing reads every shard and merges them by due time.
#[derive(Clone)]
pub struct DueIndex {
    state: Arc<dyn StateStore>,
    shards: u32,
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

/// The owner of shard `shard` of `lane`.
fn owner(lane: &str, shard: u32) -> String {
    match shard {
        0 => format!("due:{lane}"),
        shard => format!("due:{lane}#{shard}"),
    }
}

/// The shard of `target` among `shards`: FNV-1a of its bytes (fixed across processes and
/// versions, unlike std's hasher).
fn shard_of(target: &str, shards: u32) -> u32 {
    let hash = target.bytes().fold(0xcbf2_9ce4_8422_2325_u64, |hash, byte| {
        (hash ^ u64::from(byte)).wrapping_mul(0x0100_0000_01b3)
    });
    u32::try_from(hash % u64::from(shards.max(1))).unwrap_or(0)
}

impl DueIndex {
    pub fn new(state: Arc<dyn StateStore>) -> Self {
        Self {
            state,
            shards: DEFAULT_DUE_INDEX_SHARDS,
        }
    }

    /// Spread each lane over `shards` owners (1..=[`MAX_DUE_INDEX_SHARDS`], clamped). Raising it
    /// is safe at any time; lowering it hides the entries of the dropped shards from listings
    /// until they are set again.
    pub fn with_shards(mut self, shards: u32) -> Self {
        self.shards = shards.clamp(1, MAX_DUE_INDEX_SHARDS);
        self
    }

    /// The entry of `target` in `lane`, due at `due_at_ms`, at `version`.
    fn entry(&self, lane: &str, target: &str, due_at_ms: i64, version: u64) -> Result<Record, StorageError> {
        Ok(Record {
            kind: KIND.to_owned(),
            id: record_id(lane, target)?,
            owner: owner(lane, shard_of(target, self.shards)),
            created_at_ms: due_at_ms,
            version,
            expires_at: None,
            body: json!({"lane": lane, "target": target}),
        })
    }

    /// Create, or move to `due_at_ms` (idempotent).
    pub async fn set(&self, lane: &str, target: &str, due_at_ms: i64) -> Result<(), StorageError> {
        let id = record_id(lane, target)?;
        let owner = self.entry_owner(lane, target);
        put(self.state.as_ref(), KIND, &id, SET_ATTEMPTS, |current| match current {
            Some(record) if record.created_at_ms == due_at_ms && record.owner == owner => Ok(PutDecision::Keep),
            // Written anew, so an entry of another shard count moves to its shard.
            // (`put` sets the version.)
            _ => Ok(PutDecision::Write(self.entry(lane, target, due_at_ms, 0)?)),
        })
        .await
        .map(drop)
    }

    /// Add a target that is new (one write); falls back to [`DueIndex::set`] when it exists.
    pub async fn create(&self, lane: &str, target: &str, due_at_ms: i64) -> Result<(), StorageError> {
        match self.state.create(&self.entry(lane, target, due_at_ms, 1)?).await {
            Err(StorageError::Conflict) => self.set(lane, target, due_at_ms).await,
            other => other,
        }
    }

    /// Move an entry the caller knows is at `version` (one conditional write, no read); falls
    /// back to [`DueIndex::set`] when it moved on or is gone.
    pub async fn reschedule(&self, lane: &str, target: &str, due_at_ms: i64, version: u64) -> Result<(), StorageError> {
        match self
            .state
            .update(&self.entry(lane, target, due_at_ms, version + 1)?, version)
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

    fn entry_owner(&self, lane: &str, target: &str) -> String {
        owner(lane, shard_of(target, self.shards))
    }

    /// Items due at or before `now_ms`, earliest first (by due time, then target), at most
    /// `limit`: every shard's earliest, merged.
    pub async fn due(&self, lane: &str, now_ms: i64, limit: usize) -> Result<Vec<DueItem>, StorageError> {
        let prefix = record_id(lane, "")?;
        let shards = (0..self.shards).map(|shard| self.due_in(lane, shard, &prefix, now_ms, limit));
        let mut items: Vec<DueItem> = futures::future::try_join_all(shards)
            .await?
            .into_iter()
            .flatten()
            .collect();
        items.sort_by(|a, b| (a.due_at_ms, &a.target).cmp(&(b.due_at_ms, &b.target)));
        items.truncate(limit);
        Ok(items)
    }

    /// When the earliest item of `lane` is due, `None` when the lane is empty: one query per shard.
    pub async fn next_due(&self, lane: &str) -> Result<Option<i64>, StorageError> {
        record_id(lane, "")?;
        let firsts = (0..self.shards)
            .map(|shard| async move { earliest_created_at(self.state.as_ref(), KIND, &owner(lane, shard)).await });
        Ok(futures::future::try_join_all(firsts).await?.into_iter().flatten().min())
    }

    /// [`DueIndex::due`] of one shard.
    async fn due_in(
        &self,
        lane: &str,
        shard: u32,
        prefix: &str,
        now_ms: i64,
        limit: usize,
    ) -> Result<Vec<DueItem>, StorageError> {
        let mut items = Vec::new();
        let mut after = None;
        while items.len() < limit {
            let page = self
                .state
                .list_heads_by_owner(&ListQuery {
                    kind: KIND.to_owned(),
                    owner: owner(lane, shard),
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
                    target: record.id.strip_prefix(prefix).unwrap_or(&record.id).to_owned(),
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
