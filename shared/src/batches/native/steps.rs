//! Moving one part on: upload its file, create its provider batch, ask it to cancel when the
//! batch stops, and collect it once its provider side is over. Each step writes its intent
//! before it calls the provider; a step found half-done looks at the provider first (the file
//! by name, the batch by its `nimbus_ref` metadata), so nothing is uploaded or created twice.

use super::deadline::within;
use super::stored::{PartEnd, PartState, StoredPart};
use super::NativeParts;
use super::{Stopping, STOP_GRACE_MS};
use crate::batches::stored::{Loaded, StoredBatch};
use crate::batches::BatchesError;
use crate::ports::provider_call::Recovery;
use crate::providers::native_batch::{ProviderBatch, ProviderBatchStatus};
use crate::providers::router::NativeBatchTarget;
use crate::providers::{CallContext, ProviderError};
use std::collections::BTreeMap;
use tokio::time::Instant;

/// Look for a half-created provider batch this long before its intent was recorded (clocks).
const RECONCILE_SLACK_S: i64 = 600;

/// Whether the provider refused the request itself (as opposed to being unreachable or busy): an
/// HTTP answer that [`Recovery`] calls final.
fn refused(error: &ProviderError) -> bool {
    matches!(error, ProviderError::Http { .. }) && error.recovery() == Recovery::Final
}

/// How a part ends when its provider batch ended with `batch`'s status.
pub(super) fn end_of(batch: &ProviderBatch, stopping: Option<Stopping>) -> PartEnd {
    let errors = if batch.errors.is_empty() {
        String::new()
    } else {
        format!(": {}", batch.errors.join("; "))
    };
    let (code, message) = match batch.status {
        ProviderBatchStatus::Failed => (
            "provider_batch_failed",
            format!("The provider batch {} failed{errors}", batch.id),
        ),
        ProviderBatchStatus::Expired => (
            super::EXPIRED_CODE,
            format!("The provider batch {} expired before running this request.", batch.id),
        ),
        ProviderBatchStatus::Cancelled => match stopping {
            Some(stop) => (stop.code, stop.message.to_owned()),
            None => (
                "batch_cancelled",
                format!("The provider batch {} was cancelled at the provider.", batch.id),
            ),
        },
        _ => (
            "provider_result_missing",
            format!("The provider batch {} returned no result for this request.", batch.id),
        ),
    };
    PartEnd {
        provider_status: serde_json::to_value(batch.status)
            .ok()
            .and_then(|v| v.as_str().map(str::to_owned)),
        output_file_id: batch.output_file_id.clone(),
        error_file_id: batch.error_file_id.clone(),
        code: code.to_owned(),
        message,
    }
}

/// An end without provider results: every line gets `code`.
pub(super) fn end_without_results(code: &str, message: impl Into<String>) -> PartEnd {
    PartEnd {
        provider_status: None,
        output_file_id: None,
        error_file_id: None,
        code: code.to_owned(),
        message: message.into(),
    }
}

impl NativeParts {
    /// The provider a part runs on, as configured now.
    pub(super) fn part_target(&self, part: &StoredPart) -> Option<NativeBatchTarget> {
        self.inference
            .native_batch(&part.group.model)
            .filter(|target| target.provider == part.group.provider)
    }

    /// Move `part` on as far as it goes now (it is leased for the while).
    pub(super) async fn advance_part(
        &self,
        batch: &StoredBatch,
        part: Loaded<StoredPart>,
        stopping: Option<Stopping>,
        deadline: Instant,
    ) -> Result<(), BatchesError> {
        let Some(mut part) = self.lease_part(part).await? else {
            return Ok(());
        };
        let result = self.advance_leased(batch, &mut part, stopping, deadline).await;
        if part.body.state != PartState::Done {
            // A part that is done was written with its lease let go.
            if let Err(err) = self.release_part(&mut part).await {
                tracing::warn!(part = %part.body.reference(), error = %err, "could not release a part; its lease expires");
            }
        }
        result
    }

    async fn advance_leased(
        &self,
        batch: &StoredBatch,
        part: &mut Loaded<StoredPart>,
        stopping: Option<Stopping>,
        deadline: Instant,
    ) -> Result<(), BatchesError> {
        let credentials = self.part_credentials(&part.body).await?;
        let ctx = CallContext {
            credentials: &credentials,
        };
        loop {
            let state = part.body.state;
            if state == PartState::Done {
                return Ok(());
            }
            if state == PartState::Ended {
                return self.collect_part(batch, part, ctx, deadline).await;
            }
            let Some(target) = self.part_target(&part.body) else {
                let message = format!(
                    "Model `{}` is no longer served by provider `{}` with `batch = \"native\"`.",
                    part.body.group.model, part.body.group.provider
                );
                self.end_part(part, end_without_results("provider_not_configured", message))
                    .await?;
                continue;
            };
            match (state, stopping) {
                (PartState::Planned | PartState::Uploading | PartState::Uploaded, Some(stop)) => {
                    self.end_part(part, end_without_results(stop.code, stop.message))
                        .await?;
                }
                (PartState::Planned | PartState::Uploading, None) => {
                    self.upload_step(part, &target, ctx, deadline).await?
                }
                (PartState::Uploaded | PartState::Creating, _) => {
                    self.create_step(part, &target, stopping, ctx).await?;
                }
                (PartState::Submitted, None) => return Ok(()),
                (PartState::Submitted, Some(stop)) => {
                    if !self.cancel_step(part, &target, stop, ctx).await? {
                        return Ok(());
                    }
                }
                (PartState::Ended | PartState::Done, _) => {}
            }
        }
    }

    /// Upload the part's file (or find the one an interrupted upload left).
    async fn upload_step(
        &self,
        part: &mut Loaded<StoredPart>,
        target: &NativeBatchTarget,
        ctx: CallContext<'_>,
        deadline: Instant,
    ) -> Result<(), BatchesError> {
        let filename = part.body.filename();
        let mut found = None;
        if part.body.state == PartState::Uploading {
            found = target.api.find_file(&filename, ctx).await.map_err(provider_failure)?;
        } else {
            part.body.state = PartState::Uploading;
            part.body.intent_at_s = self.clock.now_unix_s();
            part.save(self.state.as_ref()).await?;
        }
        let file_id = match found {
            Some(id) => id,
            None => {
                let content = self.part_content(&part.body).await?;
                match within(
                    deadline,
                    "the part's upload",
                    target.api.upload_file(&filename, content, ctx),
                )
                .await?
                {
                    Ok(id) => id,
                    Err(error) if refused(&error) => {
                        let message = format!("The provider rejected the batch input file: {error}");
                        return self
                            .end_part(part, end_without_results("provider_file_rejected", message))
                            .await;
                    }
                    Err(error) => return Err(provider_failure(error)),
                }
            }
        };
        part.body.file_id = Some(file_id);
        part.body.state = PartState::Uploaded;
        part.save(self.state.as_ref()).await?;
        Ok(())
    }

    /// Create the part's provider batch (or adopt the one an interrupted create made).
    async fn create_step(
        &self,
        part: &mut Loaded<StoredPart>,
        target: &NativeBatchTarget,
        stopping: Option<Stopping>,
        ctx: CallContext<'_>,
    ) -> Result<(), BatchesError> {
        let reference = part.body.reference();
        let mut found = None;
        if part.body.state == PartState::Creating {
            let since = part.body.intent_at_s - RECONCILE_SLACK_S;
            found = target
                .api
                .find_batch("nimbus_ref", &reference, since, ctx)
                .await
                .map_err(provider_failure)?;
        }
        let created = match found {
            Some(batch) => batch,
            None => {
                if let Some(stop) = stopping {
                    return self.end_part(part, end_without_results(stop.code, stop.message)).await;
                }
                if part.body.state != PartState::Creating {
                    part.body.state = PartState::Creating;
                    part.body.intent_at_s = self.clock.now_unix_s();
                    part.save(self.state.as_ref()).await?;
                }
                let file_id = part.body.file_id.clone().unwrap_or_default();
                let metadata = BTreeMap::from([
                    ("nimbus_batch".to_owned(), part.body.batch_id.clone()),
                    ("nimbus_part".to_owned(), part.body.index.to_string()),
                    ("nimbus_ref".to_owned(), reference.clone()),
                ]);
                match target
                    .api
                    .create_batch(&file_id, &part.body.group.url, &metadata, &reference, ctx)
                    .await
                {
                    Ok(batch) => batch,
                    Err(error) if refused(&error) => {
                        let message = format!("The provider rejected the batch: {error}");
                        return self
                            .end_part(part, end_without_results("provider_batch_rejected", message))
                            .await;
                    }
                    Err(error) => return Err(provider_failure(error)),
                }
            }
        };
        part.body.provider_batch_id = Some(created.id.clone());
        part.body.state = PartState::Submitted;
        part.body.next_poll_ms = self.clock.now_unix_ms() + self.poll_gap_ms(0);
        part.save(self.state.as_ref()).await?;
        Ok(())
    }

    /// Ask the provider batch to cancel (once); after the grace, give up waiting for it. True
    /// when the part moved on (ended).
    async fn cancel_step(
        &self,
        part: &mut Loaded<StoredPart>,
        target: &NativeBatchTarget,
        stop: Stopping,
        ctx: CallContext<'_>,
    ) -> Result<bool, BatchesError> {
        let id = part.body.provider_batch_id.clone().unwrap_or_default();
        if !part.body.cancel_requested {
            match target.api.cancel_batch(&id, ctx).await.map_err(provider_failure)? {
                None => {
                    let message = format!("The provider batch {id} no longer exists.");
                    self.end_part(part, end_without_results("provider_batch_not_found", message))
                        .await?;
                    return Ok(true);
                }
                Some(batch) if batch.status.is_terminal() => {
                    self.end_part(part, end_of(&batch, Some(stop))).await?;
                    return Ok(true);
                }
                Some(_) => {
                    part.body.cancel_requested = true;
                    part.body.next_poll_ms = self.clock.now_unix_ms();
                    part.save(self.state.as_ref()).await?;
                }
            }
        }
        if self.clock.now_unix_ms() > stop.since_ms + STOP_GRACE_MS {
            self.end_part(part, end_without_results(stop.code, stop.message))
                .await?;
            return Ok(true);
        }
        Ok(false)
    }

    /// Record how the part's provider side ended.
    pub(super) async fn end_part(&self, part: &mut Loaded<StoredPart>, end: PartEnd) -> Result<(), BatchesError> {
        part.body.state = PartState::Ended;
        part.body.end = Some(end);
        part.save(self.state.as_ref()).await?;
        Ok(())
    }

    /// The part's provider input file: its line ranges of the staged blobs.
    async fn part_content(&self, part: &StoredPart) -> Result<bytes::Bytes, BatchesError> {
        let mut content = Vec::with_capacity(usize::try_from(part.bytes).unwrap_or(0));
        for source in &part.sources {
            let blob = self.blobs.get(&source.key).await?;
            let skip = usize::try_from(source.skip).unwrap_or(usize::MAX);
            let take = usize::try_from(source.lines).unwrap_or(usize::MAX);
            for line in crate::jsonl::line_bytes(&blob).iter().skip(skip).take(take) {
                content.extend_from_slice(line);
                content.push(b'\n');
            }
        }
        Ok(content.into())
    }

    /// The gap before the next poll after `quiet` polls without progress: the configured
    /// interval, doubling up to the configured longest.
    pub(super) fn poll_gap_ms(&self, quiet: u32) -> i64 {
        let native = &self.settings.native;
        let gap = native
            .poll_interval
            .saturating_mul(1u32 << quiet.min(16))
            .min(native.poll_max_interval);
        i64::try_from(gap.as_millis()).unwrap_or(i64::MAX)
    }
}

/// A provider call that failed for now: the step is tried again.
pub(super) fn provider_failure(error: ProviderError) -> BatchesError {
    BatchesError::Provider(error.to_string())
}
