//! State storage: JSON records with optimistic versioning, listed by owner in creation order.

use super::StorageError;
use async_trait::async_trait;
use serde_json::Value;

/// One stored record. The storage layer writes what it is given; the domain sets every field.
#[derive(Debug, Clone, PartialEq)]
pub struct Record {
    /// The record type, e.g. `api_key`, `file`, `batch`.
    pub kind: String,
    /// Unique within `kind`.
    pub id: String,
    /// The tenant that owns it (a project), used for listing.
    pub owner: String,
    /// Creation time; with `id` it orders the owner's listing.
    pub created_at_ms: i64,
    /// Bumped by one on every update; conditional writes compare it.
    pub version: u64,
    /// Unix seconds after which the record may be deleted by the store (TTL), if any.
    pub expires_at: Option<i64>,
    /// The domain payload.
    pub body: Value,
}

impl Record {
    /// Position of this record in its owner's listing.
    pub fn cursor(&self) -> SortCursor {
        SortCursor {
            created_at_ms: self.created_at_ms,
            id: self.id.clone(),
        }
    }
}

/// A position in an owner's listing: records sort by `(created_at_ms, id)`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SortCursor {
    pub created_at_ms: i64,
    pub id: String,
}

impl SortCursor {
    /// The sort key as stored: zero-padded milliseconds then the id, so string order is time order.
    pub fn sort_key(&self) -> String {
        format!("{:015}#{}", self.created_at_ms.max(0), self.id)
    }
}

/// Listing direction by creation time.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum ListOrder {
    Asc,
    #[default]
    Desc,
}

/// A page request: records of `kind` owned by `owner`, strictly after `after` in `order`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ListQuery {
    pub kind: String,
    pub owner: String,
    pub after: Option<SortCursor>,
    pub limit: usize,
    pub order: ListOrder,
}

/// A page of records; `has_more` is exact.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Page {
    pub records: Vec<Record>,
    pub has_more: bool,
}

/// The most records one [`StateStore::update_all`] may write.
pub(crate) const MAX_UPDATE_ALL: usize = 25;

/// What every adapter rejects in [`StateStore::update_all`]: too many records, or one twice.
pub(crate) fn check_update_all(updates: &[(Record, u64)]) -> Result<(), StorageError> {
    if updates.len() > MAX_UPDATE_ALL {
        return Err(StorageError::Invalid(format!(
            "update_all takes at most {MAX_UPDATE_ALL} records"
        )));
    }
    for (index, (record, _)) in updates.iter().enumerate() {
        if updates[..index]
            .iter()
            .any(|(other, _)| other.kind == record.kind && other.id == record.id)
        {
            return Err(StorageError::Invalid(format!(
                "update_all names {}/{} twice",
                record.kind, record.id
            )));
        }
    }
    Ok(())
}

/// When the earliest record of `kind` owned by `owner` was created (for due-work owners: when the
/// earliest work is due), `None` when there is none: one listing of one head.
pub(crate) async fn earliest_created_at(
    state: &dyn StateStore,
    kind: &str,
    owner: &str,
) -> Result<Option<i64>, StorageError> {
    let first = state
        .list_heads_by_owner(&ListQuery {
            kind: kind.to_owned(),
            owner: owner.to_owned(),
            after: None,
            limit: 1,
            order: ListOrder::Asc,
        })
        .await?;
    Ok(first.records.first().map(|head| head.created_at_ms))
}

/// Record storage with conditional writes.
#[async_trait]
pub trait StateStore: Send + Sync {
    /// Insert a new record; [`StorageError::Conflict`] when `(kind, id)` exists.
    async fn create(&self, record: &Record) -> Result<(), StorageError>;

    /// The record, if it exists.
    async fn get(&self, kind: &str, id: &str) -> Result<Option<Record>, StorageError>;

    /// Replace a record whose stored version is `expected_version`; `record.version` is written as
    /// given. [`StorageError::Conflict`] when the version moved on or the record is gone.
    async fn update(&self, record: &Record, expected_version: u64) -> Result<(), StorageError>;

    /// Replace several records at once, each only at its expected version: all are written or none
    /// ([`StorageError::Conflict`] when any version moved on). At most [`MAX_UPDATE_ALL`] records.
    async fn update_all(&self, updates: &[(Record, u64)]) -> Result<(), StorageError>;

    /// Delete a record, only at `expected_version` when given. Returns whether it existed.
    async fn delete(&self, kind: &str, id: &str, expected_version: Option<u64>) -> Result<bool, StorageError>;

    /// One page of an owner's records of one kind, in creation order.
    async fn list_by_owner(&self, query: &ListQuery) -> Result<Page, StorageError>;

    /// [`StateStore::list_by_owner`] for a caller that reads no bodies: every field but `body`
    /// is as listed, `body` may be `null` (DynamoDB's owner index holds no bodies, so this costs
    /// one query and no item read per record). Required, not defaulted: a wrapper that forgot to
    /// forward it would quietly read every body again.
    async fn list_heads_by_owner(&self, query: &ListQuery) -> Result<Page, StorageError>;
}

#[cfg(test)]
mod tests {
    use super::SortCursor;

    #[test]
    fn sort_keys_order_like_time_then_id() {
        let a = SortCursor {
            created_at_ms: 9,
            id: "b".into(),
        }
        .sort_key();
        let b = SortCursor {
            created_at_ms: 10,
            id: "a".into(),
        }
        .sort_key();
        let c = SortCursor {
            created_at_ms: 10,
            id: "b".into(),
        }
        .sort_key();
        assert!(a < b && b < c);
    }
}
