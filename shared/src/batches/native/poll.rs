//! Polling submitted provider batches (the scheduler's `batches` task): each at most once per
//! configured interval, backing off while nothing moves; progress moves the batch's
//! `request_counts` (part and batch in one write); an ended or vanished provider batch ends its
//! part and sends the `native` job to collect it.

use super::steps::{end_of, end_without_results};
use super::stored::{PartState, StoredPart};
use super::{parts_of, NativeParts};
use crate::batches::stored::{Loaded, StoredBatch, BATCH_KIND};
use crate::batches::{enqueue, BatchesError, JobMessage};
use crate::ports::{BatchId, StorageError};
use crate::providers::CallContext;

impl NativeParts {
    /// Poll the due provider batches of a batch whose staging is closed; send the
    /// `native` job when a part needs a worker. Returns how many provider batches were polled.
    pub(crate) async fn poll_native(&self, batch: &StoredBatch) -> Result<u64, BatchesError> {
        let batch_id = &batch.batch.id;
        let now_ms = self.clock.now_unix_ms();
        let stopping = self.stopping_now(batch).await?;
        let mut polled = 0;
        // Parts not planned yet: the `native` job that plans them was lost (its worker died
        // before planning); planning is idempotent, so send it again.
        let mut needs_job = batch.native.parts.is_none();
        for part in parts_of(self.state.as_ref(), batch_id).await? {
            match part.body.state {
                PartState::Done => continue,
                PartState::Submitted if stopping.is_none() || part.body.cancel_requested => {}
                _ => {
                    needs_job |= !part.body.lease_until_ms.held_at(now_ms);
                    continue;
                }
            }
            if part.body.next_poll_ms > now_ms || part.body.lease_until_ms.held_at(now_ms) {
                continue;
            }
            polled += 1;
            needs_job |= self.poll_part(part, stopping).await?;
        }
        if needs_job || stopping.is_some() {
            enqueue(
                self.queue.as_ref(),
                &JobMessage::Native {
                    batch_id: BatchId::new(batch_id.clone()),
                },
            )
            .await?;
        }
        Ok(polled)
    }

    /// Poll one provider batch; true when its part ended.
    async fn poll_part(
        &self,
        mut part: Loaded<StoredPart>,
        stopping: Option<super::Stopping>,
    ) -> Result<bool, BatchesError> {
        let Some(target) = self.part_target(&part.body) else {
            return Ok(true);
        };
        let credentials = self.part_credentials(&part.body).await?;
        let ctx = CallContext {
            credentials: &credentials,
        };
        let id = part.body.provider_batch_id.clone().unwrap_or_default();
        let now_ms = self.clock.now_unix_ms();
        let seen = match target.api.batch(&id, ctx).await {
            Ok(seen) => seen,
            Err(error) => {
                tracing::warn!(part = %part.body.reference(), provider_batch = %id, error = %error, "could not poll a provider batch");
                part.body.next_poll_ms = now_ms + self.poll_gap_ms(part.body.quiet_polls);
                part.save(self.state.as_ref()).await?;
                return Ok(false);
            }
        };
        let Some(seen) = seen else {
            let message = format!("The provider batch {id} no longer exists at the provider.");
            self.end_part(&mut part, end_without_results("provider_batch_not_found", message))
                .await?;
            return Ok(true);
        };
        if seen.status.is_terminal() {
            self.end_part(&mut part, end_of(&seen, stopping)).await?;
            return Ok(true);
        }
        let reported = super::stored::Reported {
            completed: seen.counts.completed,
            failed: seen.counts.failed,
        };
        let moved = reported != part.body.reported;
        part.body.quiet_polls = if moved {
            0
        } else {
            part.body.quiet_polls.saturating_add(1)
        };
        part.body.next_poll_ms = now_ms + self.poll_gap_ms(part.body.quiet_polls);
        if !moved {
            part.save(self.state.as_ref()).await?;
            return Ok(false);
        }
        // The progress moves the batch's counters in the same write as the part's.
        let Some(mut current) =
            Loaded::<StoredBatch>::get(self.state.as_ref(), BATCH_KIND, &part.body.batch_id).await?
        else {
            return Ok(false);
        };
        let counts = &mut current.body.batch.request_counts;
        counts.completed = (counts.completed + reported.completed).saturating_sub(part.body.reported.completed);
        counts.failed = (counts.failed + reported.failed).saturating_sub(part.body.reported.failed);
        part.body.reported = reported;
        match self.state.update_all(&[part.next()?, current.next()?]).await {
            // A lost write is polled again next pass.
            Ok(()) | Err(StorageError::Conflict) => Ok(false),
            Err(err) => Err(err.into()),
        }
    }
}
