//! The batch engine's use of per-model concurrency slots (`crate::model_slots`, shared with
//! async requests): a chunk run takes a share of the model's free slots for its lease's lifetime.

use super::{BatchService, BatchesError};
use crate::model_slots::{self, SlotRequest};

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
        let request = SlotRequest {
            model,
            limit,
            want,
            token,
            now_ms: self.now_ms(),
            until_ms,
            waiting: None,
        };
        Ok(model_slots::acquire(self.state.as_ref(), request).await?)
    }

    /// Hand back the run's slots (waking the async requests owed them).
    pub(crate) async fn release_slots(&self, model: &str, token: &str) -> Result<(), BatchesError> {
        Ok(model_slots::release(self.state.as_ref(), self.queue.as_ref(), model, token, self.now_ms()).await?)
    }

    /// Drop the slot leases of every run, of every model; how many. Only for a worker that knows
    /// no other run is alive (see `takeover.rs`).
    #[cfg(feature = "embedded")]
    pub(crate) async fn clear_slot_leases(&self) -> Result<u64, BatchesError> {
        Ok(model_slots::clear_all(self.state.as_ref()).await?)
    }
}
