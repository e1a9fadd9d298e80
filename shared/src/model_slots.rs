//! Per-model concurrency across every worker (`[models.NAME] max_concurrency`), shared by batch
//! lines and async requests: one `model_slots` record per model holds the leases of the runs
//! using it. A run takes slots until its lease ends; a run that dies leaves a lease that simply
//! expires.

use crate::ports::{Record, StateStore, StorageError};
use crate::records::{edit, encode, list_all, Edit};
use serde::{Deserialize, Serialize};

const KIND: &str = "model_slots";
const OWNER: &str = "_slots";

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
struct SlotLease {
    token: String,
    slots: u32,
    until_ms: i64,
}

#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
struct Leases {
    leases: Vec<SlotLease>,
}

/// A run's request for slots of a model.
#[derive(Debug, Clone, Copy)]
pub struct SlotRequest<'a> {
    pub model: &'a str,
    pub limit: u32,
    pub want: u32,
    /// Identifies the run: taking again replaces its earlier lease.
    pub token: &'a str,
    pub now_ms: i64,
    pub until_ms: i64,
}

/// Take up to `want` of the model's free slots; how many were granted (0 when all are in use).
pub async fn acquire(state: &dyn StateStore, request: SlotRequest<'_>) -> Result<u32, StorageError> {
    let SlotRequest {
        model,
        limit,
        want,
        token,
        now_ms,
        until_ms,
    } = request;
    for _ in 0..2 {
        let edited = edit(state, KIND, model, |slots: &mut Leases| {
            slots
                .leases
                .retain(|lease| lease.until_ms > now_ms && lease.token != token);
            let used: u32 = slots.leases.iter().map(|lease| lease.slots).sum();
            let granted = want.min(limit.saturating_sub(used));
            if granted == 0 {
                return Edit::Keep(0);
            }
            slots.leases.push(SlotLease {
                token: token.to_owned(),
                slots: granted,
                until_ms,
            });
            Edit::Save(granted)
        })
        .await?;
        if let Some((granted, _)) = edited {
            return Ok(granted);
        }
        // The model's first use: make its record, then take slots from it.
        let record = Record {
            kind: KIND.to_owned(),
            id: model.to_owned(),
            owner: OWNER.to_owned(),
            created_at_ms: 0,
            version: 1,
            expires_at: None,
            body: encode(&Leases::default())?,
        };
        match state.create(&record).await {
            Ok(()) | Err(StorageError::Conflict) => {}
            Err(err) => return Err(err),
        }
    }
    Err(StorageError::Conflict)
}

/// Hand back the run's slots.
pub async fn release(state: &dyn StateStore, model: &str, token: &str, now_ms: i64) -> Result<(), StorageError> {
    edit(state, KIND, model, |slots: &mut Leases| {
        let before = slots.leases.len();
        slots
            .leases
            .retain(|lease| lease.token != token && lease.until_ms > now_ms);
        if slots.leases.len() == before {
            Edit::Keep(())
        } else {
            Edit::Save(())
        }
    })
    .await?;
    Ok(())
}

/// Drop the slot leases of every run, of every model; how many. Only for a worker that knows no
/// other run is alive.
pub async fn clear_all(state: &dyn StateStore) -> Result<u64, StorageError> {
    let mut cleared = 0;
    for record in list_all(state, KIND, OWNER).await? {
        let edited = edit(state, KIND, &record.id, |slots: &mut Leases| {
            if slots.leases.is_empty() {
                return Edit::Keep(0);
            }
            let count = slots.leases.len() as u64;
            slots.leases.clear();
            Edit::Save(count)
        })
        .await?;
        cleared += edited.map_or(0, |(count, _)| count);
    }
    Ok(cleared)
}
