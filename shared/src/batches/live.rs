//! Live progress: a running chunk saves its results in segments (every `checkpoint_lines`, so
//! a batch's writes grow with its lines), which on a slow model are far apart; to show counts
//! within [`LIVE_INTERVAL`] of lines finishing, a run publishes the counts it has not saved yet
//! in a small `batch_live` record of its chunk, which a status read adds to the batch's saved
//! counts. Writes cost requests on AWS, so runs publish only while someone looks: always on the
//! local server (`BatchSettings::live_progress_always`), otherwise while a client asks for it
//! (`GET /v1/batches/{id}?live=true` keeps the batch `live_until_ms` a minute ahead; a run
//! learns it at its next look at the batch). The save of a segment zeroes the record in the
//! same conditional write that counts the segment, so a line is never in both; a record a dead
//! run left is ignored once it is [`LIVE_STALE_MS`] old.

use super::stored::{list_all, Loaded, StoredBatch};
use super::BatchesError;
use crate::ports::{Clock, Record, StateStore, StorageError};
use serde::{Deserialize, Serialize};
use std::sync::Arc;
use std::sync::Mutex;
use std::time::Duration;
use tokio::time::Instant;

pub(crate) const LIVE_KIND: &str = "batch_live";
/// Unsaved counts are published at most this often (and so are seen this soon).
pub(crate) const LIVE_INTERVAL: Duration = Duration::from_secs(2);
/// A run with unsaved results that did not change publishes again after this (it is alive).
const LIVE_HEARTBEAT: Duration = Duration::from_secs(20);
/// A published record older than this is not counted (its run died or stopped publishing).
const LIVE_STALE_MS: i64 = 30_000;
/// A live status read keeps the batch live this long...
const LIVE_WATCH_MS: i64 = 60_000;
/// ...and writes it again only when less than this is left (one write per 30 s of watching).
const LIVE_RENEW_MS: i64 = 30_000;

/// A run's unsaved counts, as published.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct LiveCounts {
    pub completed: u64,
    pub failed: u64,
    /// When it was written (ms).
    pub at_ms: i64,
}

#[derive(Debug, Default)]
struct PublisherState {
    /// This run's record as last written (None before the first publish).
    record: Option<Loaded<LiveCounts>>,
    /// What was published last, and when.
    published: (u64, u64),
    at: Option<Instant>,
}

/// One chunk run's publisher of its unsaved counts.
#[derive(Debug)]
pub(crate) struct LivePublisher {
    id: String,
    owner: String,
    state: Mutex<PublisherState>,
}

fn live_id(batch_id: &str, index: u32) -> String {
    format!("{batch_id}.{index:05}")
}

impl LivePublisher {
    pub fn new(batch_id: &str, index: u32) -> Self {
        Self {
            id: live_id(batch_id, index),
            owner: batch_id.to_owned(),
            state: Mutex::new(PublisherState::default()),
        }
    }

    fn with<R>(&self, f: impl FnOnce(&mut PublisherState) -> R) -> R {
        match self.state.lock() {
            Ok(mut state) => f(&mut state),
            Err(poisoned) => f(&mut poisoned.into_inner()),
        }
    }

    /// Whether unsaved counts `pending` are to be published now.
    pub fn due(&self, pending: (u64, u64), now: Instant) -> bool {
        self.with(|state| {
            let since = state.at.map(|at| now.saturating_duration_since(at));
            let changed = pending != state.published;
            match since {
                None => changed,
                Some(since) => (changed && since >= LIVE_INTERVAL) || (pending != (0, 0) && since >= LIVE_HEARTBEAT),
            }
        })
    }

    /// When the run should wake to publish `pending` even if no line finishes before.
    pub(crate) fn wake_at(&self, pending: (u64, u64)) -> Option<Instant> {
        self.with(|state| {
            if pending == state.published {
                return state.at.filter(|_| pending != (0, 0)).map(|at| at + LIVE_HEARTBEAT);
            }
            Some(state.at.map_or_else(Instant::now, |at| at + LIVE_INTERVAL))
        })
    }

    /// The record zeroed at its next version, for the write that saves a segment (which
    /// counts what it published); `None` when this run never published.
    pub fn reset(&self, now_ms: i64) -> Result<Option<(Record, u64)>, StorageError> {
        self.with(|state| {
            let Some(loaded) = &state.record else {
                return Ok(None);
            };
            let mut zeroed = loaded.clone();
            zeroed.body = LiveCounts {
                at_ms: now_ms,
                ..LiveCounts::default()
            };
            zeroed.next().map(Some)
        })
    }

    /// The segment's write (with [`Self::reset`]'s record) won.
    pub(crate) fn was_reset(&self, written: Option<Record>) {
        self.with(|state| {
            if let (Some(loaded), Some(record)) = (state.record.as_mut(), written) {
                loaded.body = LiveCounts::default();
                loaded.record = record;
            }
            state.published = (0, 0);
        });
    }
}

/// Running chunks' unsaved counts: published by runs, added by status reads, deleted at clean-up.
#[derive(Clone)]
pub(crate) struct Live {
    pub(super) state: Arc<dyn StateStore>,
    pub(super) clock: Arc<dyn Clock>,
    /// Runs publish for every batch (`BatchSettings::live_progress_always`).
    pub(super) always: bool,
}

impl Live {
    /// Whether the run of a batch last seen live until `live_until_ms` publishes.
    pub(crate) fn live_now(&self, live_until_ms: i64) -> bool {
        self.always || live_until_ms > self.clock.now_unix_ms()
    }

    /// Publish a run's unsaved counts (best effort: a failed write is logged; the saved
    /// counts stay right).
    pub(crate) async fn publish_live(&self, publisher: &LivePublisher, pending: (u64, u64)) {
        let now_ms = self.clock.now_unix_ms();
        let body = LiveCounts {
            completed: pending.0,
            failed: pending.1,
            at_ms: now_ms,
        };
        let known = publisher.with(|state| {
            state.published = pending;
            state.at = Some(Instant::now());
            state.record.clone()
        });
        match self.write_live(publisher, known, body).await {
            Ok(written) => publisher.with(|state| state.record = Some(written)),
            Err(err) => {
                tracing::debug!(live = %publisher.id, error = %err, "could not publish live progress");
                publisher.with(|state| state.record = None);
            }
        }
    }

    async fn write_live(
        &self,
        publisher: &LivePublisher,
        known: Option<Loaded<LiveCounts>>,
        body: LiveCounts,
    ) -> Result<Loaded<LiveCounts>, StorageError> {
        let state = self.state.as_ref();
        let mut current = match known {
            Some(known) => Some(known),
            None => Loaded::<LiveCounts>::get(state, LIVE_KIND, &publisher.id).await?,
        };
        for _ in 0..3 {
            match current.take() {
                Some(mut loaded) => {
                    loaded.body = body;
                    match loaded.save(state).await {
                        Ok(()) => return Ok(loaded),
                        Err(StorageError::Conflict) => {
                            current = Loaded::<LiveCounts>::get(state, LIVE_KIND, &publisher.id).await?;
                        }
                        Err(err) => return Err(err),
                    }
                }
                None => {
                    // The store may drop it after a day; clean-up deletes it first.
                    let expires_at = Some(body.at_ms / 1000 + 86_400);
                    let record =
                        crate::records::new_record(LIVE_KIND, &publisher.id, &publisher.owner, 0, expires_at, &body)?;
                    match state.create(&record).await {
                        Ok(()) => return Ok(Loaded { record, body }),
                        Err(StorageError::Conflict) => {
                            current = Loaded::<LiveCounts>::get(state, LIVE_KIND, &publisher.id).await?;
                        }
                        Err(err) => return Err(err),
                    }
                }
            }
        }
        Err(StorageError::Conflict)
    }

    /// `stored`'s counts with the fresh unsaved counts of its running chunks added (never
    /// past its total). Only a running batch has any.
    pub(crate) async fn with_live_counts(&self, stored: &mut StoredBatch) -> Result<(), BatchesError> {
        use crate::openai::batches::BatchStatus;
        if !matches!(stored.batch.status, BatchStatus::InProgress | BatchStatus::Cancelling) {
            return Ok(());
        }
        let now_ms = self.clock.now_unix_ms();
        let (mut completed, mut failed) = (0u64, 0u64);
        for record in list_all(self.state.as_ref(), LIVE_KIND, &stored.batch.id).await? {
            let Ok(live) = serde_json::from_value::<LiveCounts>(record.body) else {
                continue;
            };
            if now_ms - live.at_ms <= LIVE_STALE_MS {
                completed += live.completed;
                failed += live.failed;
            }
        }
        let counts = &mut stored.batch.request_counts;
        let room = counts.total.saturating_sub(counts.completed + counts.failed);
        let completed = completed.min(room);
        let failed = failed.min(room - completed);
        counts.completed += completed;
        counts.failed += failed;
        Ok(())
    }

    /// A client asks for live progress: keep the batch live for the next minute (written only
    /// when less than half of it is left).
    pub(crate) async fn keep_live(&self, batch: &Loaded<StoredBatch>) -> Result<(), BatchesError> {
        let now_ms = self.clock.now_unix_ms();
        if self.always || batch.body.batch.status.is_terminal() || batch.body.live_until_ms - now_ms >= LIVE_RENEW_MS {
            return Ok(());
        }
        let edited = super::stored::edit(
            self.state.as_ref(),
            super::stored::BATCH_KIND,
            &batch.body.batch.id,
            |stored: &mut StoredBatch| {
                if stored.batch.status.is_terminal() || stored.live_until_ms - now_ms >= LIVE_RENEW_MS {
                    return super::stored::Edit::Keep(());
                }
                stored.live_until_ms = now_ms + LIVE_WATCH_MS;
                super::stored::Edit::Save(())
            },
        )
        .await;
        match edited {
            Ok(_) | Err(StorageError::Conflict) => Ok(()),
            Err(err) => Err(err.into()),
        }
    }

    /// Delete the batch's live records (clean-up of an ended batch).
    pub(crate) async fn delete_live(&self, batch_id: &str) -> Result<(), BatchesError> {
        for record in list_all(self.state.as_ref(), LIVE_KIND, batch_id).await? {
            self.state.delete(LIVE_KIND, &record.id, None).await?;
        }
        Ok(())
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn a_run_publishes_changes_at_most_every_interval_and_beats_while_it_holds_results() {
        let publisher = LivePublisher::new("b", 0);
        let start = Instant::now();
        assert!(!publisher.due((0, 0), start), "nothing to tell");
        assert!(publisher.due((3, 0), start), "the first results at once");
        publisher.with(|s| {
            s.published = (3, 0);
            s.at = Some(start);
        });
        assert!(!publisher.due((5, 0), start + Duration::from_secs(1)));
        assert!(publisher.due((5, 0), start + LIVE_INTERVAL));
        assert_eq!(publisher.wake_at((5, 0)), Some(start + LIVE_INTERVAL));
        assert!(!publisher.due((3, 0), start + Duration::from_secs(10)), "unchanged");
        assert!(publisher.due((3, 0), start + LIVE_HEARTBEAT));
        publisher.was_reset(None);
        assert_eq!(publisher.wake_at((0, 0)), None);
    }
}
