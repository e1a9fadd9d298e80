#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use super::*;
use crate::adapters::embedded::{MemoryQueue, SqliteStateStore};
use std::sync::Arc;

const MODEL: &str = "m";
const NOW: i64 = 1_000_000;

struct World {
    state: Arc<SqliteStateStore>,
    queue: Arc<MemoryQueue>,
}

fn world() -> World {
    World {
        state: Arc::new(SqliteStateStore::in_memory().unwrap()),
        queue: Arc::new(MemoryQueue::new()),
    }
}

fn request(token: &str, priority: Priority, created_at_ms: i64, now_ms: i64) -> SlotRequest<'_> {
    SlotRequest {
        model: MODEL,
        limit: 1,
        want: 1,
        token,
        now_ms,
        until_ms: now_ms + 60_000,
        waiting: Some(Waiting {
            priority,
            created_at_ms,
            until_ms: now_ms + 30_000,
            look_at_ms: now_ms + 10_000,
        }),
    }
}

fn batch(token: &str, now_ms: i64) -> SlotRequest<'_> {
    SlotRequest {
        model: MODEL,
        limit: 1,
        want: 4,
        token,
        now_ms,
        until_ms: now_ms + 60_000,
        waiting: None,
    }
}

/// The request ids of the `async_run` messages queued (and take them off the queue).
async fn woken(queue: &MemoryQueue) -> Vec<String> {
    let mut ids = Vec::new();
    for message in queue
        .receive(100, Duration::ZERO, Duration::from_secs(60))
        .await
        .unwrap()
    {
        match serde_json::from_str::<JobMessage>(&message.body).unwrap() {
            JobMessage::AsyncRun { request_id } => ids.push(request_id.to_string()),
            other => panic!("unexpected {other:?}"),
        }
        queue.delete(&message.receipt).await.unwrap();
    }
    ids
}

#[tokio::test]
async fn a_freed_slot_goes_to_the_best_ranked_waiter_not_to_whoever_looks_first() {
    let w = world();
    let state = w.state.as_ref();
    assert_eq!(
        acquire(state, request("busy", Priority::P1, NOW, NOW)).await.unwrap(),
        1
    );
    // Eight P2 requests, then two P0, find it taken and wait.
    for i in 0..8 {
        let token = format!("p2-{i}");
        assert_eq!(
            acquire(state, request(&token, Priority::P2, NOW + i, NOW + 10))
                .await
                .unwrap(),
            0
        );
    }
    for i in 0..2 {
        let token = format!("p0-{i}");
        assert_eq!(
            acquire(state, request(&token, Priority::P0, NOW + 20 + i, NOW + 30))
                .await
                .unwrap(),
            0
        );
    }
    release(state, w.queue.as_ref(), MODEL, "busy", NOW + 40).await.unwrap();
    assert_eq!(woken(&w.queue).await, ["p0-0"], "the head waiter is woken at once");
    // A P2 looking again before the woken one arrives does not take the slot it is owed.
    assert_eq!(
        acquire(state, request("p2-0", Priority::P2, NOW, NOW + 41))
            .await
            .unwrap(),
        0
    );
    assert_eq!(
        acquire(state, request("p0-1", Priority::P0, NOW + 21, NOW + 41))
            .await
            .unwrap(),
        0
    );
    assert_eq!(
        acquire(state, request("p0-0", Priority::P0, NOW + 20, NOW + 42))
            .await
            .unwrap(),
        1
    );
    release(state, w.queue.as_ref(), MODEL, "p0-0", NOW + 50).await.unwrap();
    assert_eq!(woken(&w.queue).await, ["p0-1"]);
    assert_eq!(
        acquire(state, request("p0-1", Priority::P0, NOW + 21, NOW + 51))
            .await
            .unwrap(),
        1
    );
    release(state, w.queue.as_ref(), MODEL, "p0-1", NOW + 60).await.unwrap();
    assert_eq!(woken(&w.queue).await, ["p2-0"], "then the oldest P2");
}

#[tokio::test]
async fn a_waiter_that_ends_or_stops_looking_no_longer_holds_others_back() {
    let w = world();
    let state = w.state.as_ref();
    assert_eq!(
        acquire(state, request("busy", Priority::P1, NOW, NOW)).await.unwrap(),
        1
    );
    assert_eq!(
        acquire(state, request("canceled", Priority::P0, NOW, NOW))
            .await
            .unwrap(),
        0
    );
    assert_eq!(
        acquire(state, request("gone", Priority::P0, NOW + 1, NOW))
            .await
            .unwrap(),
        0
    );
    assert_eq!(
        acquire(state, request("next", Priority::P1, NOW + 2, NOW))
            .await
            .unwrap(),
        0
    );
    release(state, w.queue.as_ref(), MODEL, "busy", NOW + 10).await.unwrap();
    assert_eq!(woken(&w.queue).await, ["canceled"]);
    // The woken request had been cancelled: it leaves the list, which wakes the next one.
    release(state, w.queue.as_ref(), MODEL, "canceled", NOW + 11)
        .await
        .unwrap();
    assert_eq!(woken(&w.queue).await, ["gone"]);
    // "gone" never looks again: once its listing lapses, the next waiter is not held back.
    assert_eq!(
        acquire(state, request("next", Priority::P1, NOW + 2, NOW + 12))
            .await
            .unwrap(),
        0
    );
    assert_eq!(
        acquire(state, request("next", Priority::P1, NOW + 2, NOW + 30_001))
            .await
            .unwrap(),
        1
    );
}

#[tokio::test]
async fn batch_lines_rank_between_waiting_p1_and_p2_requests() {
    let w = world();
    let state = w.state.as_ref();
    assert_eq!(
        acquire(state, request("busy", Priority::P1, NOW, NOW)).await.unwrap(),
        1
    );
    assert_eq!(acquire(state, request("low", Priority::P2, NOW, NOW)).await.unwrap(), 0);
    release(state, w.queue.as_ref(), MODEL, "busy", NOW + 1).await.unwrap();
    assert_eq!(woken(&w.queue).await, ["low"]);
    assert_eq!(
        acquire(state, batch("batch_1.0", NOW + 2)).await.unwrap(),
        1,
        "ahead of P2"
    );
    assert_eq!(
        acquire(state, request("normal", Priority::P1, NOW + 3, NOW + 3))
            .await
            .unwrap(),
        0
    );
    release(state, w.queue.as_ref(), MODEL, "batch_1.0", NOW + 4)
        .await
        .unwrap();
    assert_eq!(woken(&w.queue).await, ["normal"]);
    assert_eq!(
        acquire(state, batch("batch_1.0", NOW + 5)).await.unwrap(),
        0,
        "behind a waiting P1"
    );
}

#[tokio::test]
async fn free_slots_beyond_the_waiters_owed_are_granted_and_each_free_slot_wakes_one() {
    let w = world();
    let state = w.state.as_ref();
    let wide = |token, priority, created| SlotRequest {
        limit: 3,
        ..request(token, priority, created, NOW)
    };
    for token in ["a", "b", "c"] {
        assert_eq!(acquire(state, wide(token, Priority::P1, NOW)).await.unwrap(), 1);
    }
    assert_eq!(acquire(state, wide("w1", Priority::P0, NOW)).await.unwrap(), 0);
    assert_eq!(acquire(state, wide("w2", Priority::P1, NOW)).await.unwrap(), 0);
    release(state, w.queue.as_ref(), MODEL, "a", NOW + 1).await.unwrap();
    release(state, w.queue.as_ref(), MODEL, "b", NOW + 2).await.unwrap();
    assert_eq!(woken(&w.queue).await, ["w1", "w2"], "w1 is not woken twice");
    release(state, w.queue.as_ref(), MODEL, "c", NOW + 3).await.unwrap();
    assert_eq!(woken(&w.queue).await, Vec::<String>::new(), "nobody else waits");
    // One slot is free beyond the two owed: a newcomer gets it.
    assert_eq!(acquire(state, wide("late", Priority::P2, NOW + 4)).await.unwrap(), 1);
}

#[tokio::test]
async fn a_waiter_whose_own_look_is_queued_is_told_so_until_that_look_is_due() {
    let w = world();
    let state = w.state.as_ref();
    assert_eq!(acquire(state, batch("line", NOW)).await.unwrap(), 1);
    let first = acquire_or_wait(state, request("p2", Priority::P2, NOW, NOW))
        .await
        .unwrap();
    assert_eq!(
        first,
        Acquired::Waiting { look_queued: false },
        "the first look queues one"
    );
    // A wake (or a duplicate) before its look is due: no second look may be queued.
    let woken_early = acquire_or_wait(state, request("p2", Priority::P2, NOW, NOW + 2_000))
        .await
        .unwrap();
    assert_eq!(woken_early, Acquired::Waiting { look_queued: true });
    // Its own look, when due, queues the next one.
    let own_look = acquire_or_wait(state, request("p2", Priority::P2, NOW, NOW + 10_000))
        .await
        .unwrap();
    assert_eq!(own_look, Acquired::Waiting { look_queued: false });
}
