//! The batch engine's use of per-model concurrency slots (`crate::model_slots`, shared with
//! async requests): a chunk run takes a share of the model's free slots for its lease's lifetime.

use super::chunk_run::ChunkRunner;
use super::BatchesError;
use crate::model_slots::{self, SlotRequest};

impl ChunkRunner {
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
            now_ms: self.clock.now_unix_ms(),
            until_ms,
            waiting: None,
        };
        Ok(model_slots::acquire(self.state.as_ref(), request).await?)
    }

    /// Hand back the run's slots (waking the async requests owed them).
    pub(crate) async fn release_slots(&self, model: &str, token: &str) -> Result<(), BatchesError> {
        Ok(model_slots::release(
            self.state.as_ref(),
            self.queue.as_ref(),
            model,
            token,
            self.clock.now_unix_ms(),
        )
        .await?)
    }
}
