//! Running one chunk: take its lease, skip the lines whose results are saved, run the rest with
//! bounded concurrency (and the models' slot limits), save progress in segments, stop starting
//! lines on cancel, expiry or the run's deadline.

use super::finalize::Finalizer;
use super::lines::LineKinds;
use super::lines::{BatchLine, LineKind};
use super::live::Live;
use super::segment::PendingSegment;
use super::stored::{Loaded, StoredBatch, StoredChunk, BATCH_KIND};
use super::{BatchSettings, BatchesError};
use crate::auth::RevokedKeys;
use crate::openai::batches::BatchStatus;
use crate::ports::{
    BlobStore, Clock, CredentialSealer, IdSource, JobOutcome, JobQueue, MetricsSink, StateStore, StorageError,
};
use bytes::Bytes;
use futures::StreamExt;
use std::collections::{BTreeSet, HashMap};
use std::sync::atomic::{AtomicBool, AtomicI64, Ordering};
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::Semaphore;
use tokio::time::Instant;

/// In-flight lines get this long before the deadline to finish; later ones are abandoned (and
/// run again by the next run, since their results were not saved).
const FINISH_GRACE: Duration = Duration::from_secs(10);
/// No line starts later than this before the deadline.
const START_GRACE: Duration = Duration::from_secs(30);
/// The lease outlives the run's deadline by this much.
const LEASE_MARGIN: Duration = Duration::from_secs(30);
/// A run saves at least every this many checkpoint intervals while it has unsaved results (5
/// minutes at the default 10 s: longer than a Lambda run's 4 minutes, which saves at its end
/// anyway, so a chunk on a slow model saves once per run — #26 E16).
const CHECKPOINT_MAX_GAPS: u32 = 30;
/// How long a run waits for a model's slots before handing the chunk back.
const SLOT_WAIT: Duration = Duration::from_secs(10);

/// The error code of a provider-native line whose dynamic credentials are too large to seal.
pub(crate) const CREDENTIALS_TOO_LARGE: &str = "credentials_too_large";
/// The code of a line not run because the API key that created its batch was revoked.
pub(crate) const API_KEY_REVOKED_CODE: &str = "api_key_revoked";
pub(crate) const API_KEY_REVOKED_MESSAGE: &str =
    "The API key that created this batch was revoked before this request ran.";

/// Why a line with [`CREDENTIALS_TOO_LARGE`] failed.
fn credentials_too_large_message() -> String {
    format!(
        "The request's `credentials` are too large to be kept sealed for its provider batch: at most {} bytes as JSON.",
        crate::ports::MAX_SEALED_PLAINTEXT
    )
}

/// Whether a staged line's dynamic credentials can be sealed (none at all need no seal).
fn credentials_sealable(credentials: &HashMap<String, String>) -> bool {
    credentials.is_empty()
        || serde_json::to_vec(credentials).is_ok_and(|json| crate::ports::check_sealable(&json).is_ok())
}

/// Whether a run with `pending` unsaved results, `since` its last save, saves a segment now:
/// once `checkpoint_lines` are pending (so a batch's saves grow with its lines, whatever its
/// model's latency), no sooner than `checkpoint_interval` after the last save, and at the latest
/// after [`CHECKPOINT_MAX_GAPS`] intervals (bounding what a crash makes run again; a run that
/// ends saves what it has anyway).
fn checkpoint_due(settings: &super::BatchSettings, pending: u64, since: Duration) -> bool {
    let interval = settings.checkpoint_interval;
    pending > 0
        && since >= interval
        && (pending >= settings.checkpoint_lines || since >= interval * CHECKPOINT_MAX_GAPS)
}

fn until(deadline: Instant, before: Duration) -> Instant {
    deadline.checked_sub(before).unwrap_or(deadline)
}

/// One run of one chunk: who it is (`token`), until when it holds the chunk, and what its lines are.
pub(crate) struct ChunkRun<'a> {
    pub batch: &'a StoredBatch,
    pub lines: Arc<dyn LineKind>,
    pub index: u32,
    pub token: String,
    pub lease_until_ms: i64,
    /// Publishes the run's unsaved counts (see `live.rs`).
    pub live: super::live::LivePublisher,
    /// The key that created the batch was revoked: every line of the run fails unrun.
    pub key_revoked: bool,
}

/// Whether a chunk could be taken.
pub(crate) enum LeaseOutcome {
    /// Taken: the chunk as this run wrote it.
    Taken(Box<Loaded<StoredChunk>>),
    /// Finished already.
    Done,
    /// Another run holds it until then.
    HeldUntil(i64),
    Missing,
}

/// Runs the `chunk` job: leases a chunk, runs its lines under the models' slot limits, saves
/// their results in segments (`progress.rs`), and stops on cancel, expiry or the deadline.
#[derive(Clone)]
pub(crate) struct ChunkRunner {
    pub(super) state: Arc<dyn StateStore>,
    pub(super) blobs: Arc<dyn BlobStore>,
    /// Releasing model slots wakes the async requests waiting for them.
    pub(super) queue: Arc<dyn JobQueue>,
    pub(super) clock: Arc<dyn Clock>,
    /// Lease tokens and the ids of error lines.
    pub(super) ids: Arc<dyn IdSource>,
    pub(super) settings: Arc<BatchSettings>,
    pub(super) metrics: Arc<dyn MetricsSink>,
    pub(super) revoked_keys: Arc<RevokedKeys>,
    /// Seals the credentials of lines staged for provider batches.
    pub(super) sealer: Arc<dyn CredentialSealer>,
    pub(super) kinds: LineKinds,
    pub(super) live: Live,
    pub(super) finalizer: Arc<Finalizer>,
}

impl ChunkRunner {
    /// Run chunk `index` of `batch_id` until it is done, stopped, or `deadline` nears.
    pub(crate) async fn run_chunk(
        &self,
        batch_id: &str,
        index: u32,
        deadline: Instant,
    ) -> Result<JobOutcome, BatchesError> {
        let Some(batch) = Loaded::<StoredBatch>::get(self.state.as_ref(), BATCH_KIND, batch_id).await? else {
            return Ok(JobOutcome::Done);
        };
        let batch = batch.body;
        if batch.batch.status != BatchStatus::InProgress || batch.is_overdue(self.clock.as_ref()) {
            self.finalizer.finalize_quietly(batch_id).await;
            return Ok(JobOutcome::Done);
        }
        let token = self.ids.new_uuid().simple().to_string();
        let run_for = deadline.saturating_duration_since(Instant::now());
        let lease_until_ms =
            self.clock.now_unix_ms() + i64::try_from((run_for + LEASE_MARGIN).as_millis()).unwrap_or(i64::MAX);
        let chunk = match self.lease_chunk(batch_id, index, &token, lease_until_ms).await? {
            LeaseOutcome::Taken(chunk) => *chunk,
            LeaseOutcome::Done | LeaseOutcome::Missing => return Ok(JobOutcome::Done),
            LeaseOutcome::HeldUntil(until_ms) => {
                let wait_ms = u64::try_from((until_ms - self.clock.now_unix_ms()).max(1000)).unwrap_or(1000);
                return Ok(JobOutcome::Retry {
                    retry_after: Duration::from_millis(wait_ms),
                });
            }
        };
        // The key that created the batch, revoked since: this run's lines fail unrun.
        let key_revoked = match &batch.key_id {
            Some(key_id) => match self.revoked_keys.is_revoked(key_id).await {
                Ok(revoked) => revoked,
                Err(err) => {
                    if let Err(release) = self.release_chunk(batch_id, index, &token).await {
                        tracing::warn!(batch = %batch_id, chunk = index, error = %release, "could not release the chunk; its lease expires");
                    }
                    return Err(err.into());
                }
            },
            None => false,
        };
        let run = ChunkRun {
            key_revoked,
            batch: &batch,
            lines: self.kinds.running(&batch).await?,
            index,
            token: token.clone(),
            lease_until_ms,
            live: super::live::LivePublisher::new(batch_id, index),
        };
        let input = match self
            .blobs
            .get_range(&batch.input_blob_key, chunk.body.range.start, chunk.body.range.end)
            .await
        {
            Ok(input) => input,
            Err(StorageError::NotFound) => {
                return match self.fail_chunk_for_missing_input(&run, chunk).await {
                    Ok(result) => Ok(result),
                    Err(err) => Err(self.give_back(&run, err).await),
                }
            }
            Err(err) => return Err(self.give_back(&run, err.into()).await),
        };
        let lines = crate::jsonl::line_bytes(&input);
        let total = lines.len() as u64;
        let skip = usize::try_from(chunk.body.lines_done).unwrap_or(usize::MAX);
        // Slices of the input: each is read (`BatchLine`) only when it runs, so a run holds the
        // parsed form of the lines in flight, not of the whole chunk.
        let pending: Vec<Bytes> = lines.into_iter().skip(skip).collect();

        let limits = match self
            .take_model_slots(run.lines.as_ref(), &pending, &token, lease_until_ms)
            .await
        {
            Ok(Some(limits)) => limits,
            Ok(None) => {
                self.release_chunk(batch_id, index, &token).await?;
                return Ok(JobOutcome::Retry {
                    retry_after: Duration::from_secs(5),
                });
            }
            Err(err) => return Err(self.give_back(&run, err).await),
        };
        let signal = Arc::new(StopSignal {
            stop: AtomicBool::new(false),
            status_seen_ms: AtomicI64::new(self.clock.now_unix_ms()),
            live_until_ms: AtomicI64::new(batch.live_until_ms),
        });
        let watcher = tokio::spawn(self.clone().watch_for_stop(batch_id.to_owned(), Arc::clone(&signal)));
        let progress = Progress { chunk, total };
        let outcome = self
            .run_lines(&run, progress, pending, &limits, &signal, deadline)
            .await;
        watcher.abort();
        for model in limits.keys() {
            if let Err(err) = self.release_slots(model, &token).await {
                tracing::warn!(model, error = %err, "could not release model slots; they expire with the lease");
            }
        }
        let outcome = match outcome {
            Ok(outcome) => outcome,
            Err(err) => return Err(self.give_back(&run, err).await),
        };
        let end = if outcome.lease_lost {
            "lease_lost"
        } else if signal.stop.load(Ordering::SeqCst) {
            "stopped"
        } else if outcome.finished {
            "finished"
        } else {
            "deadline"
        };
        self.metrics
            .record("chunk_runs", crate::ports::MetricUnit::Count, 1.0, &[("end", end)]);
        if !outcome.finished {
            self.release_chunk(batch_id, index, &token).await?;
        }
        let all_done = outcome.batch.as_ref().is_some_and(StoredBatch::all_chunks_done);
        if all_done || signal.stop.load(Ordering::SeqCst) {
            self.finalizer.finalize_quietly(batch_id).await;
            return Ok(JobOutcome::Done);
        }
        if outcome.finished || outcome.lease_lost {
            Ok(JobOutcome::Done)
        } else {
            // The deadline came first: run the rest in a fresh run.
            Ok(JobOutcome::Retry {
                retry_after: Duration::ZERO,
            })
        }
    }

    /// A run that fails hands its chunk back (saved progress stays), so the retry does not find
    /// it held by a run that is over; returns `err` to report.
    async fn give_back(&self, run: &ChunkRun<'_>, err: BatchesError) -> BatchesError {
        let batch_id = &run.batch.batch.id;
        if let Err(release) = self.release_chunk(batch_id, run.index, &run.token).await {
            tracing::warn!(batch = %batch_id, chunk = run.index, error = %release, "could not release the chunk; its lease expires");
        }
        err
    }

    /// Slots for every limited model among `lines`: a semaphore per model, or `None` when some
    /// model had no free slot within [`SLOT_WAIT`] (what was taken is handed back).
    async fn take_model_slots(
        &self,
        kind: &dyn LineKind,
        lines: &[Bytes],
        token: &str,
        until_ms: i64,
    ) -> Result<Option<HashMap<String, Arc<Semaphore>>>, BatchesError> {
        let models: BTreeSet<String> = lines
            .iter()
            .filter_map(|line| kind.slot_of(line))
            .filter(|model| self.model_limit(model).is_some())
            .collect();
        let want = u32::try_from(self.settings.line_concurrency).unwrap_or(u32::MAX);
        let mut granted = HashMap::new();
        let give_up_at = Instant::now() + SLOT_WAIT;
        for model in models {
            let Some(limit) = self.model_limit(&model) else {
                continue;
            };
            loop {
                let slots = self.acquire_slots(&model, limit, want, token, until_ms).await?;
                if slots > 0 {
                    granted.insert(model.clone(), Arc::new(Semaphore::new(slots as usize)));
                    break;
                }
                if Instant::now() >= give_up_at {
                    for taken in granted.keys() {
                        self.release_slots(taken, token).await?;
                    }
                    return Ok(None);
                }
                tokio::time::sleep(Duration::from_millis(250)).await;
            }
        }
        Ok(Some(granted))
    }

    /// Sets the stop flag once the batch is no longer running (cancelled) or its window has
    /// passed. A checkpoint reads the batch too; the watcher reads it only when none did lately.
    async fn watch_for_stop(self, batch_id: String, signal: Arc<StopSignal>) {
        let interval = self.settings.status_poll_interval;
        let interval_ms = i64::try_from(interval.as_millis()).unwrap_or(i64::MAX);
        loop {
            tokio::time::sleep(interval).await;
            if self.clock.now_unix_ms() - signal.status_seen_ms.load(Ordering::SeqCst) < interval_ms {
                continue;
            }
            match Loaded::<StoredBatch>::get(self.state.as_ref(), BATCH_KIND, &batch_id).await {
                Ok(Some(batch)) => {
                    if self.observe(&signal, &batch.body) {
                        return;
                    }
                }
                Ok(None) => {
                    signal.stop.store(true, Ordering::SeqCst);
                    return;
                }
                Err(err) => tracing::warn!(batch = %batch_id, error = %err, "could not read the batch status"),
            }
        }
    }

    /// Note a fresh view of the batch; true (and the stop flag set) when lines must stop starting.
    fn observe(&self, signal: &StopSignal, batch: &StoredBatch) -> bool {
        signal.status_seen_ms.store(self.clock.now_unix_ms(), Ordering::SeqCst);
        signal.live_until_ms.store(batch.live_until_ms, Ordering::SeqCst);
        let stop = batch.batch.status != BatchStatus::InProgress || batch.is_overdue(self.clock.as_ref());
        if stop {
            signal.stop.store(true, Ordering::SeqCst);
        }
        stop
    }

    async fn run_lines(
        &self,
        run: &ChunkRun<'_>,
        progress: Progress,
        pending: Vec<Bytes>,
        limits: &HashMap<String, Arc<Semaphore>>,
        signal: &StopSignal,
        deadline: Instant,
    ) -> Result<RunOutcome, BatchesError> {
        let kind = run.lines.as_ref();
        let total = progress.total;
        let first_segment = progress.chunk.body.segments.len();
        let lines_done = progress.chunk.body.lines_done;
        let mut known_chunk = Some(progress.chunk);
        let stop = &signal.stop;
        let last_start = until(deadline, START_GRACE);
        let hard_stop = until(deadline, FINISH_GRACE);
        let chunk_index = run.index;
        let ids = self.ids.as_ref();
        let mut results = futures::stream::iter(pending.into_iter().enumerate())
            .map(|(position, stored)| async move {
                if stop.load(Ordering::SeqCst) || Instant::now() >= last_start {
                    return None;
                }
                let line = BatchLine::read(&stored);
                if run.key_revoked {
                    // Neither run nor staged for a provider batch: counted failed once, here.
                    let line = kind.not_run(ids, &line, API_KEY_REVOKED_CODE, API_KEY_REVOKED_MESSAGE);
                    return Some(Ok(LineOutput::Ran(super::lines::LineResult {
                        line,
                        ok: false,
                        usage: Default::default(),
                    })));
                }
                if let Some(request) = kind.native_request(&line) {
                    if !credentials_sealable(&request.credentials) {
                        // Its credentials cannot be kept sealed while the provider batch runs:
                        // the line fails now (staging it would fail at every retry).
                        let line = kind.not_run(ids, &line, CREDENTIALS_TOO_LARGE, &credentials_too_large_message());
                        return Some(Ok(LineOutput::Ran(super::lines::LineResult {
                            line,
                            ok: false,
                            usage: Default::default(),
                        })));
                    }
                    // Its provider's own batch API runs it: staged, under an id naming its place.
                    let line_in_chunk = lines_done + position as u64;
                    let custom_id = native_custom_id(chunk_index, line_in_chunk);
                    return Some(Ok(LineOutput::Staged(custom_id, Box::new(request))));
                }
                let permit = match kind.slot_of(&stored).and_then(|model| limits.get(&model)) {
                    Some(semaphore) => Some(semaphore.acquire().await.ok()?),
                    None => None,
                };
                if stop.load(Ordering::SeqCst) {
                    return None;
                }
                let result = kind.run(line).await.map(LineOutput::Ran);
                drop(permit);
                Some(result)
            })
            .buffered(self.settings.line_concurrency.max(1));

        let mut outcome = RunOutcome::default();
        let mut segment = PendingSegment::default();
        let mut segment_number = first_segment;
        let mut saved = lines_done;
        let mut last_save = Instant::now();
        let mut interrupted = false;
        loop {
            let live = self.live.live_now(signal.live_until_ms.load(Ordering::SeqCst));
            let pending_counts = (segment.completed, segment.failed);
            let wake = match run.live.wake_at(pending_counts).filter(|_| live) {
                Some(at) => at.min(hard_stop),
                None => hard_stop,
            };
            let next = tokio::time::timeout_at(wake, results.next()).await;
            if next.is_err() && Instant::now() < hard_stop {
                // Woken to publish: no line finished meanwhile.
                if run.live.due(pending_counts, Instant::now()) {
                    self.live.publish_live(&run.live, pending_counts).await;
                }
                continue;
            }
            match next {
                Ok(Some(Some(Ok(LineOutput::Ran(result))))) => segment.push(result),
                Ok(Some(Some(Ok(LineOutput::Staged(custom_id, request))))) => {
                    segment.stage(&run.batch.batch.id, &custom_id, *request);
                }
                // The line's result could not be kept: stop; what is unsaved runs again.
                Ok(Some(Some(Err(err)))) => return Err(err),
                Ok(None) => break,
                Ok(Some(None)) | Err(_) => {
                    interrupted = true;
                    break;
                }
            }
            let live = self.live.live_now(signal.live_until_ms.load(Ordering::SeqCst));
            let pending_counts = (segment.completed, segment.failed);
            if live && !checkpoint_due(&self.settings, segment.lines, last_save.elapsed()) {
                if run.live.due(pending_counts, Instant::now()) {
                    self.live.publish_live(&run.live, pending_counts).await;
                }
                continue;
            }
            if checkpoint_due(&self.settings, segment.lines, last_save.elapsed()) {
                let lines = segment.lines;
                let finished = saved + lines == total;
                match self
                    .save_segment(
                        run,
                        &mut known_chunk,
                        segment_number,
                        std::mem::take(&mut segment),
                        finished,
                    )
                    .await?
                {
                    Some(after) => {
                        self.observe(signal, &after);
                        outcome.batch = Some(after);
                    }
                    None => {
                        outcome.lease_lost = true;
                        return Ok(outcome);
                    }
                }
                saved += lines;
                segment_number += 1;
                last_save = Instant::now();
                outcome.finished = finished;
            }
        }
        drop(results);
        let finished = !interrupted && saved + segment.lines == total;
        if !segment.is_empty() || (finished && !outcome.finished) {
            match self
                .save_segment(run, &mut known_chunk, segment_number, segment, finished)
                .await?
            {
                Some(after) => outcome.batch = Some(after),
                None => outcome.lease_lost = true,
            }
            outcome.finished = finished && !outcome.lease_lost;
        }
        Ok(outcome)
    }
}

/// What a line of a run became: a result, or a request staged for its provider's batch API.
enum LineOutput {
    Ran(super::lines::LineResult),
    Staged(String, Box<super::lines::NativeRequest>),
}

/// The `custom_id` of a staged line in its provider batch: where the line is in the input.
pub(crate) fn native_custom_id(chunk: u32, line_in_chunk: u64) -> String {
    format!("{chunk:05}-{line_in_chunk:07}")
}

/// The chunk index and line (from the chunk's start) a staged line's `custom_id` names.
pub(crate) fn parse_native_custom_id(custom_id: &str) -> Option<(u32, u64)> {
    let (chunk, line) = custom_id.split_once('-')?;
    Some((chunk.parse().ok()?, line.parse().ok()?))
}

/// The chunk as this run took it, and how many request lines it has.
struct Progress {
    chunk: Loaded<StoredChunk>,
    total: u64,
}

/// Tells the lines of a run to stop starting; `status_seen_ms` is when the batch was last read.
struct StopSignal {
    stop: AtomicBool,
    status_seen_ms: AtomicI64,
    /// Until when the batch was last seen live (see `live.rs`).
    live_until_ms: AtomicI64,
}

#[derive(Default)]
struct RunOutcome {
    finished: bool,
    lease_lost: bool,
    /// The batch after the last save.
    batch: Option<StoredBatch>,
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::checkpoint_due;
    use std::time::Duration;

    #[test]
    fn checkpoints_come_with_lines_not_with_time() {
        let config = crate::config::Config::from_toml("").unwrap();
        let settings = crate::batches::BatchSettings::from_config(&config);
        assert_eq!(
            (settings.checkpoint_lines, settings.checkpoint_interval),
            (1_000, Duration::from_secs(10)),
            "by default a whole chunk (lines_per_chunk) before a save"
        );
        let secs = Duration::from_secs;
        // A slow model: half a chunk is no reason to save; a whole one is.
        assert!(!checkpoint_due(&settings, 500, secs(60)));
        assert!(checkpoint_due(&settings, 1_000, secs(60)));
        // A fast one: a chunk's lines in a second wait for the interval.
        assert!(!checkpoint_due(&settings, 5_000, secs(1)));
        assert!(checkpoint_due(&settings, 5_000, secs(10)));
        // A very slow one still saves every 5 minutes (a Lambda run saves at its end, within
        // 4); nothing pending, nothing to save.
        assert!(!checkpoint_due(&settings, 3, secs(120)));
        assert!(checkpoint_due(&settings, 3, secs(300)));
        assert!(!checkpoint_due(&settings, 0, secs(600)));
        // A 1,000-line chunk on a 2 s model (16 at once, ~126 s): one save, when its last line
        // is in (#26 E16: it was two, then ~13 when saves came every 10 s).
        let (mut left, mut pending, mut since, mut saves) = (1_000_u64, 0, Duration::ZERO, 0);
        while left > 0 {
            let wave = left.min(16);
            (left, pending, since) = (left - wave, pending + wave, since + secs(2));
            if checkpoint_due(&settings, pending, since) {
                (pending, since, saves) = (0, Duration::ZERO, saves + 1);
            }
        }
        assert_eq!((saves, pending), (1, 0), "the chunk's one save is its last");
    }

    #[test]
    fn checkpoint_lines_default_to_a_chunk_and_status_looks_come_once_a_minute() {
        let settings =
            |toml: &str| crate::batches::BatchSettings::from_config(&crate::config::Config::from_toml(toml).unwrap());
        let small_chunks = settings("[batches]\nlines_per_chunk = 200\n");
        assert_eq!(small_chunks.checkpoint_lines, 200);
        let explicit = settings("[batches]\nlines_per_chunk = 200\ncheckpoint_lines = 50\n");
        assert_eq!(explicit.checkpoint_lines, 50);
        // In Lambda a chunk's run reads its batch once a minute (a cancel is noticed within it).
        assert_eq!(small_chunks.status_poll_interval, Duration::from_secs(60));
        assert!(crate::config::Config::from_toml("[batches]\ncheckpoint_lines = 0\n").is_err());
    }
}
