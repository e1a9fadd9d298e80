//! Per-model concurrency across every worker (`[models.NAME] max_concurrency`): one `model_slots`
//! record per model holds the leases of the runs using it. A run takes a share of the free slots
//! for its chunk lease's lifetime; a run that dies leaves a lease that simply expires.

use super::records::{edit, encode, Edit};
use super::{BatchService, BatchesError};
use crate::ports::{Record, StorageError};
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
struct ModelSlots {
    leases: Vec<SlotLease>,
}

impl BatchService {
    /// The model's limit, if it has one.
    pub(crate) fn model_limit(&self, model: &str) -> Option<u32> {
        self.settings.model_limits.get(model).copied()
    }

    /// Take up to `want` of the model's free slots for the run `token` until `until_ms`; how many
    /// were granted (0 when every slot is in use).
    pub(crate) async fn acquire_slots(
        &self,
        model: &str,
        limit: u32,
        want: u32,
        token: &str,
        until_ms: i64,
    ) -> Result<u32, BatchesError> {
        for _ in 0..2 {
            let now = self.now_ms();
            let edited = edit(self.state.as_ref(), KIND, model, |slots: &mut ModelSlots| {
                slots
                    .leases
                    .retain(|lease| lease.until_ms > now && lease.token != token);
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
                body: encode(&ModelSlots::default())?,
            };
            match self.state.create(&record).await {
                Ok(()) | Err(StorageError::Conflict) => {}
                Err(err) => return Err(err.into()),
            }
        }
        Err(StorageError::Conflict.into())
    }

    /// Hand back the run's slots.
    pub(crate) async fn release_slots(&self, model: &str, token: &str) -> Result<(), BatchesError> {
        let now = self.now_ms();
        edit(self.state.as_ref(), KIND, model, |slots: &mut ModelSlots| {
            let before = slots.leases.len();
            slots
                .leases
                .retain(|lease| lease.token != token && lease.until_ms > now);
            if slots.leases.len() == before {
                Edit::Keep(())
            } else {
                Edit::Save(())
            }
        })
        .await?;
        Ok(())
    }

    /// Drop the slot leases of every run, of every model; how many. Only for a worker that knows
    /// no other run is alive (see `takeover.rs`).
    #[cfg(feature = "embedded")]
    pub(crate) async fn clear_slot_leases(&self) -> Result<u64, BatchesError> {
        let mut cleared = 0;
        for record in super::records::list_all(self.state.as_ref(), KIND, OWNER).await? {
            let edited = edit(self.state.as_ref(), KIND, &record.id, |slots: &mut ModelSlots| {
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
}
