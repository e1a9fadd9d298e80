//! Per-model concurrency across every worker (`[models.NAME] max_concurrency`), shared by batch
//! lines and async requests: one `model_slots` record per model holds the leases of the runs
//! using it, and the async requests waiting for one. A run takes slots until its lease ends; a
//! run that dies leaves a lease that simply expires.
//!
//! **Who gets a freed slot.** An async request that finds no slot it may take joins the model's
//! waiting list (its priority and submit time; the entry lives until a little after its next
//! look, and each look refreshes it). A slot goes only to a requester no better-ranked live
//! waiter is ahead of: rank is priority (0 first), then age. Whoever hands slots back wakes the
//! head waiters — one per free slot — by queueing their `async_run` at once on their priority's
//! lane (a waiter's own delayed re-look stays as the fallback for a lost wake). Batch lines rank
//! as priority 1 requests submitted at the moment they ask (the lane order of the in-process
//! queue: P0, then P1 and batches, then P2): they yield to every waiting P0 and P1 request and go
//! ahead of waiting P2 ones; they poll, never wait in the list. A request that ends while waiting
//! (cancelled, expired) leaves the list through [`release`].

use crate::jobs::JobMessage;
use crate::ports::{AsyncRequestId, JobQueue, Priority, StateStore, StorageError};
#[cfg(feature = "embedded")]
use crate::records::list_all;
use crate::records::LeaseUntil;
use crate::records::{edit, Edit};
use serde::{Deserialize, Serialize};
use std::time::Duration;

const KIND: &str = "model_slots";
const OWNER: &str = "_slots";
/// The priority batch lines rank at.
const BATCH_PRIORITY: u8 = 1;
/// At most this many waiters are listed (the record stays small): a request ranked below all of
/// them keeps polling and joins once it ranks among them.
const MAX_WAITERS: usize = 256;
/// A woken waiter is not woken again for this long (its message is on its way).
const WAKE_GRACE_MS: i64 = 30_000;

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
struct SlotLease {
    token: String,
    slots: u32,
    until_ms: LeaseUntil,
}

/// An async request waiting for a slot.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
struct Waiter {
    token: String,
    priority: u8,
    created_at_ms: i64,
    /// Listed until then unless it looks again.
    until_ms: i64,
    /// When its `async_run` was last sent by a release (0: never).
    #[serde(default)]
    woken_at_ms: i64,
    /// When the look it queued for itself (a delayed `async_run`) is due (0: none known).
    #[serde(default)]
    look_at_ms: i64,
}

impl Waiter {
    fn rank(&self) -> (u8, i64, &str) {
        (self.priority, self.created_at_ms, &self.token)
    }
}

#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
struct Leases {
    leases: Vec<SlotLease>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    waiters: Vec<Waiter>,
    /// The model's limit as its last requester knew it (a release wakes one waiter per free slot).
    #[serde(default)]
    limit: u32,
}

impl Leases {
    fn used(&self) -> u32 {
        self.leases.iter().map(|lease| lease.slots).sum()
    }

    /// Drop expired leases and waiters, and `token`'s own lease and listing.
    fn purge(&mut self, token: &str, now_ms: i64) -> bool {
        let before = (self.leases.len(), self.waiters.len());
        self.leases
            .retain(|lease| lease.until_ms.held_at(now_ms) && lease.token != token);
        self.waiters
            .retain(|waiter| waiter.until_ms > now_ms && waiter.token != token);
        before != (self.leases.len(), self.waiters.len())
    }
}

/// An async request's place in the waiting list, should it find no slot.
#[derive(Debug, Clone, Copy)]
pub struct Waiting {
    pub priority: Priority,
    pub created_at_ms: i64,
    /// Listed until then: a little after its next look (each look refreshes it).
    pub until_ms: i64,
    /// When the look it would queue for itself now would be due.
    pub look_at_ms: i64,
}

/// How a request for slots ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Acquired {
    /// This many slots were granted.
    Granted(u32),
    /// None: the request is listed as a waiter. `look_queued` says a later look of its own is
    /// already on the queue (this message was a wake or a duplicate): queue no other.
    Waiting { look_queued: bool },
}

/// A look queued for a waiter is taken as still coming while it is due later than this from now.
const LOOK_TOLERANCE_MS: i64 = 1_000;

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
    /// An async request's rank, and its listing while it waits; `None` for a batch line.
    pub waiting: Option<Waiting>,
}

/// Take up to `want` of the model's free slots that no better-ranked waiter is owed; how many
/// were granted (0 when none: an async request is then listed as a waiter).
pub async fn acquire(state: &dyn StateStore, request: SlotRequest<'_>) -> Result<u32, StorageError> {
    Ok(match acquire_or_wait(state, request).await? {
        Acquired::Granted(slots) => slots,
        Acquired::Waiting { .. } => 0,
    })
}

/// [`acquire`], telling a waiter whether a look of its own is already queued.
pub(crate) async fn acquire_or_wait(
    state: &dyn StateStore,
    request: SlotRequest<'_>,
) -> Result<Acquired, StorageError> {
    let SlotRequest {
        model,
        limit,
        want,
        token,
        now_ms,
        until_ms,
        waiting,
    } = request;
    let rank = waiting.map_or((BATCH_PRIORITY, now_ms), |w| (w.priority.level(), w.created_at_ms));
    for _ in 0..2 {
        let edited = edit(state, KIND, model, |slots: &mut Leases| {
            let queued_look = slots
                .waiters
                .iter()
                .find(|waiter| waiter.token == token)
                .map(|waiter| waiter.look_at_ms)
                .filter(|at| *at > now_ms + LOOK_TOLERANCE_MS);
            let mut changed = slots.purge(token, now_ms);
            if slots.limit != limit {
                slots.limit = limit;
                changed = true;
            }
            let ahead = slots
                .waiters
                .iter()
                .filter(|waiter| waiter.rank() < (rank.0, rank.1, token))
                .count();
            let owed = u32::try_from(ahead).unwrap_or(u32::MAX);
            let granted = want.min(limit.saturating_sub(slots.used()).saturating_sub(owed));
            if granted > 0 {
                slots.leases.push(SlotLease {
                    token: token.to_owned(),
                    slots: granted,
                    until_ms: LeaseUntil::until(until_ms),
                });
                return Edit::Save(Acquired::Granted(granted));
            }
            let mut outcome = Acquired::Waiting { look_queued: false };
            if let Some(waiting) = waiting {
                outcome = Acquired::Waiting {
                    look_queued: queued_look.is_some(),
                };
                slots.waiters.push(Waiter {
                    token: token.to_owned(),
                    priority: waiting.priority.level(),
                    created_at_ms: waiting.created_at_ms,
                    until_ms: waiting.until_ms.max(queued_look.unwrap_or(0)),
                    woken_at_ms: 0,
                    look_at_ms: queued_look.unwrap_or(waiting.look_at_ms),
                });
                slots.waiters.sort_by(|a, b| a.rank().cmp(&b.rank()));
                slots.waiters.truncate(MAX_WAITERS);
                changed = true;
            }
            if changed {
                Edit::Save(outcome)
            } else {
                Edit::Keep(outcome)
            }
        })
        .await?;
        if let Some((outcome, _)) = edited {
            return Ok(outcome);
        }
        // The model's first use: make its record, then take slots from it.
        let record = crate::records::new_record(
            KIND.to_owned(),
            model.to_owned(),
            OWNER.to_owned(),
            0,
            None,
            &Leases::default(),
        )?;
        match state.create(&record).await {
            Ok(()) | Err(StorageError::Conflict) => {}
            Err(err) => return Err(err),
        }
    }
    Err(StorageError::Conflict)
}

/// Hand back the run's slots (and take it off the waiting list, for a request that ends while
/// waiting), then wake the waiters now owed a free slot: their `async_run` is queued at once on
/// their priority's lane. A lost wake costs only time: every waiter also looks again by itself.
pub async fn release(
    state: &dyn StateStore,
    queue: &dyn JobQueue,
    model: &str,
    token: &str,
    now_ms: i64,
) -> Result<(), StorageError> {
    let edited = edit(state, KIND, model, |slots: &mut Leases| {
        let changed = slots.purge(token, now_ms);
        let free = usize::try_from(slots.limit.saturating_sub(slots.used())).unwrap_or(usize::MAX);
        slots.waiters.sort_by(|a, b| a.rank().cmp(&b.rank()));
        let mut wake = Vec::new();
        for waiter in slots.waiters.iter_mut().take(free) {
            if waiter.woken_at_ms + WAKE_GRACE_MS <= now_ms {
                waiter.woken_at_ms = now_ms;
                wake.push((waiter.token.clone(), waiter.priority));
            }
        }
        if changed || !wake.is_empty() {
            Edit::Save(wake)
        } else {
            Edit::Keep(wake)
        }
    })
    .await?;
    for (request_id, level) in edited.map(|(wake, _)| wake).unwrap_or_default() {
        let job = JobMessage::AsyncRun {
            request_id: AsyncRequestId::new(request_id),
        };
        let priority = Priority::from_level(level).unwrap_or(Priority::P2);
        if let Err(err) = queue.send_priority(&job.to_body(), priority, Duration::ZERO).await {
            tracing::warn!(model, error = %err, "could not wake a request waiting for a slot; it looks again by itself");
        }
    }
    Ok(())
}

/// Drop the slot leases of every run, of every model; how many. Only for a worker that knows no
/// other run is alive. (Waiters stay listed: their requests are queued again at the same time.)
#[cfg(feature = "embedded")]
pub(crate) async fn clear_all(state: &dyn StateStore) -> Result<u64, StorageError> {
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

#[cfg(test)]
#[path = "model_slots_tests.rs"]
mod tests;
