//! Typed records over [`StateStore`]: a body decoded from its record, changed, and written back
//! only at the version it was read at. Every domain module that keeps records uses these.

mod lease;
pub(crate) use lease::LeaseUntil;

use crate::ports::{ListOrder, ListQuery, ProjectId, Record, StateStore, StorageError};
use serde::de::DeserializeOwned;
use serde::Serialize;

/// The body of `record` as `T`; a body that does not decode is a storage fault (corrupt record).
pub fn decode<T: DeserializeOwned>(record: &Record) -> Result<T, StorageError> {
    serde_json::from_value(record.body.clone())
        .map_err(|e| StorageError::Backend(format!("corrupt {} record {}: {e}", record.kind, record.id)))
}

/// `value` as a record body.
pub fn encode<T: Serialize>(value: &T) -> Result<serde_json::Value, StorageError> {
    serde_json::to_value(value).map_err(|e| StorageError::Invalid(e.to_string()))
}

/// A new record (version 1): `body` as `kind`/`id`, owned by `owner`, created at
/// `created_at_ms`, kept until `expires_at` (epoch seconds; `None`: kept). The one way a domain
/// builds a record to create.
pub(crate) fn new_record<T: Serialize>(
    kind: impl Into<String>,
    id: impl Into<String>,
    owner: impl Into<String>,
    created_at_ms: i64,
    expires_at: Option<i64>,
    body: &T,
) -> Result<Record, StorageError> {
    Ok(Record {
        kind: kind.into(),
        id: id.into(),
        owner: owner.into(),
        created_at_ms,
        version: 1,
        expires_at,
        body: encode(body)?,
    })
}

/// `record` at its next version carrying `body`, to write over `record.version`. The one way a
/// domain builds a changed record (a [`Loaded`] body is written back with [`Loaded::save`]).
pub(crate) fn next_version<T: Serialize>(record: &Record, body: &T) -> Result<Record, StorageError> {
    Ok(Record {
        version: record.version + 1,
        body: encode(body)?,
        ..record.clone()
    })
}

/// A record with its decoded body, to change and write back at the next version.
#[derive(Debug, Clone)]
pub(crate) struct Loaded<T> {
    pub record: Record,
    pub body: T,
}

impl<T: Serialize + DeserializeOwned> Loaded<T> {
    pub async fn get(state: &dyn StateStore, kind: &str, id: &str) -> Result<Option<Self>, StorageError> {
        state.get(kind, id).await?.map(Self::decoded).transpose()
    }

    /// A stored record with its body read.
    fn decoded(record: Record) -> Result<Self, StorageError> {
        Ok(Self {
            body: decode(&record)?,
            record,
        })
    }

    /// The record of `kind`/`id` when `project` owns it (see [`get_owned`]).
    pub(crate) async fn get_owned(
        state: &dyn StateStore,
        kind: &str,
        id: &str,
        project: &ProjectId,
    ) -> Result<Option<Self>, StorageError> {
        get_owned(state, kind, id, project)
            .await?
            .map(Self::decoded)
            .transpose()
    }

    /// The record carrying the (changed) body at the next version, and the version it replaces.
    pub fn next(&self) -> Result<(Record, u64), StorageError> {
        Ok((next_version(&self.record, &self.body)?, self.record.version))
    }

    /// Write the changed body back; [`StorageError::Conflict`] if someone wrote in between. On
    /// success `self` holds the written version.
    pub async fn save(&mut self, state: &dyn StateStore) -> Result<(), StorageError> {
        let (record, expected) = self.next()?;
        state.update(&record, expected).await?;
        self.record = record;
        Ok(())
    }
}

/// The record of `kind`/`id` when `project` owns it: `None` when it is missing or another's. The
/// check that scopes a client's read to its project (a project's records are owned by it), so
/// another project's id answers exactly like an unknown one. (A `/batch_inference` batch is owned
/// by a partition of its project: its poll checks the body's project instead.)
pub(crate) async fn get_owned(
    state: &dyn StateStore,
    kind: &str,
    id: &str,
    project: &ProjectId,
) -> Result<Option<Record>, StorageError> {
    Ok(state
        .get(kind, id)
        .await?
        .filter(|record| record.owner == project.as_str()))
}

/// Every record of `kind` owned by `owner`, in ascending order (all pages).
pub(crate) async fn list_all(state: &dyn StateStore, kind: &str, owner: &str) -> Result<Vec<Record>, StorageError> {
    let mut records = Vec::new();
    let mut after = None;
    loop {
        let page = state
            .list_by_owner(&ListQuery {
                kind: kind.to_owned(),
                owner: owner.to_owned(),
                after: after.take(),
                limit: 1000,
                order: ListOrder::Asc,
            })
            .await?;
        after = page.records.last().map(Record::cursor);
        records.extend(page.records);
        if !page.has_more {
            return Ok(records);
        }
    }
}

/// What an edit decided about the record it was shown.
pub(crate) enum Edit<R> {
    /// Write the changed body back, then answer `R`.
    Save(R),
    /// Leave the record as it is and answer `R`.
    Keep(R),
}

/// Read, change and conditionally write one record until the write wins: after a lost write,
/// `change` sees the fresh body. `None` when the record does not exist.
pub(crate) async fn edit<T, R>(
    state: &dyn StateStore,
    kind: &str,
    id: &str,
    mut change: impl FnMut(&mut T) -> Edit<R>,
) -> Result<Option<(R, Loaded<T>)>, StorageError>
where
    T: Serialize + DeserializeOwned,
{
    for _ in 0..20 {
        let Some(mut loaded) = Loaded::<T>::get(state, kind, id).await? else {
            return Ok(None);
        };
        let answer = match change(&mut loaded.body) {
            Edit::Keep(answer) => return Ok(Some((answer, loaded))),
            Edit::Save(answer) => answer,
        };
        match loaded.save(state).await {
            Ok(()) => return Ok(Some((answer, loaded))),
            Err(StorageError::Conflict) => continue,
            Err(err) => return Err(err),
        }
    }
    Err(StorageError::Conflict)
}

/// What a [`put`] decided about the record stored now (`None` when there is none).
pub enum PutDecision {
    /// It says what it should: leave it.
    Keep,
    /// Store this one instead (its `version` is set by [`put`]).
    Write(Record),
}

/// What a [`put`] did: whether it wrote, and the version stored now.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PutOutcome {
    pub wrote: bool,
    pub version: u64,
}

/// Create or replace one record until the write wins: `decide` sees what is stored now (after a
/// lost write, the fresh record) and says whether to keep it or what to write in its place, a
/// create when there is none and a conditional update on the version it saw otherwise.
pub async fn put(
    state: &dyn StateStore,
    kind: &str,
    id: &str,
    attempts: u32,
    mut decide: impl FnMut(Option<&Record>) -> Result<PutDecision, StorageError>,
) -> Result<PutOutcome, StorageError> {
    for _ in 0..attempts {
        let current = state.get(kind, id).await?;
        let mut record = match decide(current.as_ref())? {
            PutDecision::Keep => {
                return Ok(PutOutcome {
                    wrote: false,
                    version: current.map_or(0, |record| record.version),
                })
            }
            PutDecision::Write(record) => record,
        };
        let written = match &current {
            None => {
                record.version = 1;
                state.create(&record).await
            }
            Some(current) => {
                record.version = current.version + 1;
                state.update(&record, current.version).await
            }
        };
        match written {
            Ok(()) => {
                return Ok(PutOutcome {
                    wrote: true,
                    version: record.version,
                })
            }
            // Someone else wrote it meanwhile: look again.
            Err(StorageError::Conflict) => continue,
            Err(err) => return Err(err),
        }
    }
    Err(StorageError::Conflict)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::adapters::embedded::SqliteStateStore;
    use serde_json::json;

    #[tokio::test]
    async fn another_owners_record_reads_like_a_missing_one() {
        let state = SqliteStateStore::in_memory().unwrap();
        let record = Record {
            kind: "thing".into(),
            id: "t1".into(),
            owner: "p1".into(),
            created_at_ms: 1,
            version: 1,
            expires_at: None,
            body: json!({"n": 1}),
        };
        state.create(&record).await.unwrap();
        assert_eq!(
            get_owned(&state, "thing", "t1", &ProjectId::new("p1")).await.unwrap(),
            Some(record)
        );
        assert_eq!(
            get_owned(&state, "thing", "t1", &ProjectId::new("p2")).await.unwrap(),
            None
        );
        assert_eq!(
            get_owned(&state, "thing", "t2", &ProjectId::new("p1")).await.unwrap(),
            None
        );
        let loaded = Loaded::<serde_json::Value>::get_owned(&state, "thing", "t1", &ProjectId::new("p1"))
            .await
            .unwrap()
            .unwrap();
        assert_eq!(loaded.body["n"], 1);
        assert!(
            Loaded::<serde_json::Value>::get_owned(&state, "thing", "t1", &ProjectId::new("p2"))
                .await
                .unwrap()
                .is_none()
        );
    }
}
