//! Behaviour every adapter must show. Each function panics (test failure) on a violation.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use bytes::Bytes;
use futures::StreamExt;
use nimbus_shared::ports::{
    BlobStore, JobQueue, ListOrder, ListQuery, Priority, Record, SortCursor, StateStore, StorageError,
};
use nimbus_shared::scheduler::{DueIndex, DueItem};
use serde_json::json;
use std::collections::HashSet;
use std::sync::Arc;
use std::time::Duration;

/// Put, read whole / by range / as a stream, size, delete.
pub async fn blob_round_trip(blobs: &dyn BlobStore) {
    let key = "projects/p1/files/file-1";
    let body = Bytes::from((0..300_000u32).map(|i| (i % 251) as u8).collect::<Vec<_>>());
    blobs.put(key, body.clone()).await.unwrap();
    assert_eq!(blobs.get(key).await.unwrap(), body);
    assert_eq!(blobs.size(key).await.unwrap(), Some(body.len() as u64));
    assert_eq!(blobs.get_range(key, 10, 20).await.unwrap(), body.slice(10..20));
    assert_eq!(
        blobs.get_range(key, 299_990, 400_000).await.unwrap(),
        body.slice(299_990..)
    );
    let streamed: Vec<Bytes> = blobs
        .get_stream(key)
        .await
        .unwrap()
        .map(|chunk| chunk.unwrap())
        .collect()
        .await;
    assert_eq!(streamed.concat(), body.to_vec());

    // Overwrite replaces.
    blobs.put(key, Bytes::from_static(b"v2")).await.unwrap();
    assert_eq!(blobs.get(key).await.unwrap(), Bytes::from_static(b"v2"));

    blobs.delete(key).await.unwrap();
    assert_eq!(blobs.get(key).await, Err(StorageError::NotFound));
    assert_eq!(blobs.size(key).await.unwrap(), None);
    assert!(matches!(blobs.get_stream(key).await, Err(StorageError::NotFound)));
    // Deleting again is fine; bad keys are refused.
    blobs.delete(key).await.unwrap();
    assert!(matches!(
        blobs.put("../escape", Bytes::new()).await,
        Err(StorageError::Invalid(_))
    ));
}

fn record(kind: &str, id: &str, owner: &str, created_at_ms: i64) -> Record {
    Record {
        kind: kind.into(),
        id: id.into(),
        owner: owner.into(),
        created_at_ms,
        version: 1,
        expires_at: Some(4_000_000_000),
        body: json!({"id": id, "n": created_at_ms}),
    }
}

/// Create-if-absent, versioned updates that conflict, conditional delete.
pub async fn state_conditional_writes(state: &dyn StateStore) {
    let first = record("file", "file-a", "p1", 1_000);
    state.create(&first).await.unwrap();
    assert_eq!(state.create(&first).await, Err(StorageError::Conflict));
    assert_eq!(state.get("file", "file-a").await.unwrap(), Some(first.clone()));
    assert_eq!(state.get("file", "missing").await.unwrap(), None);
    // Same id under another kind is another record.
    assert_eq!(state.get("batch", "file-a").await.unwrap(), None);

    let mut second = first.clone();
    second.version = 2;
    second.body = json!({"status": "processed"});
    state.update(&second, 1).await.unwrap();
    // A writer still holding version 1 loses.
    let mut stale = first.clone();
    stale.version = 2;
    stale.body = json!({"status": "stale"});
    assert_eq!(state.update(&stale, 1).await, Err(StorageError::Conflict));
    assert_eq!(
        state.get("file", "file-a").await.unwrap().unwrap().body,
        json!({"status": "processed"})
    );
    // Updating a record that does not exist conflicts too.
    assert_eq!(
        state.update(&record("file", "nope", "p1", 1), 1).await,
        Err(StorageError::Conflict)
    );

    assert_eq!(
        state.delete("file", "file-a", Some(1)).await,
        Err(StorageError::Conflict)
    );
    assert!(state.delete("file", "file-a", Some(2)).await.unwrap());
    assert!(!state.delete("file", "file-a", None).await.unwrap());
}

/// Concurrent updates from the same version: exactly one wins.
pub async fn state_races_have_one_winner(state: Arc<dyn StateStore>) {
    let base = record("batch", "batch-race", "p1", 5);
    state.create(&base).await.unwrap();
    let mut tasks = Vec::new();
    for writer in 0..8 {
        let state = Arc::clone(&state);
        let mut next = base.clone();
        next.version = 2;
        next.body = json!({"writer": writer});
        tasks.push(tokio::spawn(async move { state.update(&next, 1).await }));
    }
    let mut wins = 0;
    for task in tasks {
        match task.await.unwrap() {
            Ok(()) => wins += 1,
            Err(StorageError::Conflict) => {}
            Err(other) => panic!("unexpected {other:?}"),
        }
    }
    assert_eq!(wins, 1);
}

/// Listing by owner in creation order, both directions, paged by cursor with an exact `has_more`.
pub async fn state_lists_by_owner_with_cursor(state: &dyn StateStore) {
    for i in 0..7i64 {
        state
            .create(&record("file", &format!("file-{i:02}"), "owner-a", 10_000 + i))
            .await
            .unwrap();
    }
    // Same millisecond: the id breaks the tie.
    state
        .create(&record("file", "file-07", "owner-a", 10_006))
        .await
        .unwrap();
    state
        .create(&record("file", "file-x", "owner-b", 10_003))
        .await
        .unwrap();
    state
        .create(&record("batch", "batch-x", "owner-a", 10_003))
        .await
        .unwrap();

    for order in [ListOrder::Asc, ListOrder::Desc] {
        let mut seen = Vec::new();
        let mut after: Option<SortCursor> = None;
        let mut pages = 0;
        loop {
            let page = state
                .list_by_owner(&ListQuery {
                    kind: "file".into(),
                    owner: "owner-a".into(),
                    after: after.clone(),
                    limit: 3,
                    order,
                })
                .await
                .unwrap();
            pages += 1;
            assert!(page.records.len() <= 3);
            seen.extend(page.records.iter().map(|r| r.id.clone()));
            after = page.records.last().map(Record::cursor);
            if !page.has_more {
                break;
            }
            assert!(pages < 10, "has_more never became false");
        }
        let mut expected: Vec<String> = (0..8).map(|i| format!("file-{i:02}")).collect();
        if order == ListOrder::Desc {
            expected.reverse();
        }
        assert_eq!(seen, expected, "{order:?}");
        assert_eq!(pages, 3, "8 records in pages of 3");
    }

    // Heads: the same records, page and `has_more`, every field but the body as listed.
    let query = ListQuery {
        kind: "file".into(),
        owner: "owner-a".into(),
        after: None,
        limit: 5,
        order: ListOrder::Asc,
    };
    let full = state.list_by_owner(&query).await.unwrap();
    let heads = state.list_heads_by_owner(&query).await.unwrap();
    assert_eq!(heads.has_more, full.has_more);
    assert_eq!(heads.records.len(), full.records.len());
    for (head, whole) in heads.records.iter().zip(&full.records) {
        assert_eq!(
            whole.body,
            json!({"id": whole.id, "n": whole.created_at_ms}),
            "list_by_owner reads bodies"
        );
        assert!(head.body.is_null() || head.body == whole.body, "{head:?}");
        let blank = |r: &Record| Record {
            body: serde_json::Value::Null,
            ..r.clone()
        };
        assert_eq!(blank(head), blank(whole));
    }

    // An exact page: has_more must be false, not "maybe".
    let exact = state
        .list_by_owner(&ListQuery {
            kind: "file".into(),
            owner: "owner-a".into(),
            after: None,
            limit: 8,
            order: ListOrder::Asc,
        })
        .await
        .unwrap();
    assert_eq!(exact.records.len(), 8);
    assert!(!exact.has_more);
    let empty = state
        .list_by_owner(&ListQuery {
            kind: "file".into(),
            owner: "nobody".into(),
            after: None,
            limit: 5,
            order: ListOrder::Desc,
        })
        .await
        .unwrap();
    assert!(empty.records.is_empty() && !empty.has_more);
}

/// Send, receive, hide while in flight, redeliver, acknowledge.
pub async fn queue_send_receive(queue: &dyn JobQueue) {
    let mut sent = HashSet::new();
    for i in 0..3 {
        queue.send(&format!("{{\"chunk\":{i}}}"), Duration::ZERO).await.unwrap();
        sent.insert(format!("{{\"chunk\":{i}}}"));
    }
    let mut received = Vec::new();
    for _ in 0..10 {
        received.extend(
            queue
                .receive(10, Duration::from_secs(1), Duration::from_secs(30))
                .await
                .unwrap(),
        );
        if received.len() >= 3 {
            break;
        }
    }
    let bodies: HashSet<String> = received.iter().map(|m| m.body.clone()).collect();
    assert_eq!(bodies, sent);
    assert!(received.iter().all(|m| m.receive_count == 1));
    // In flight: hidden.
    assert!(queue
        .receive(10, Duration::ZERO, Duration::from_secs(30))
        .await
        .unwrap()
        .is_empty());

    // Give one back: it is delivered again with a higher receive count.
    queue
        .change_visibility(&received[0].receipt, Duration::ZERO)
        .await
        .unwrap();
    let again = queue
        .receive(10, Duration::from_secs(2), Duration::from_secs(30))
        .await
        .unwrap();
    assert_eq!(again.len(), 1);
    assert_eq!(again[0].body, received[0].body);
    assert_eq!(again[0].receive_count, 2);

    queue.delete(&again[0].receipt).await.unwrap();
    for message in &received[1..] {
        queue.delete(&message.receipt).await.unwrap();
    }

    // Many at once (more than one SQS batch of ten): each delivered once.
    let many: Vec<String> = (0..23).map(|i| format!("{{\"many\":{i}}}")).collect();
    queue.send_all(&many).await.unwrap();
    let mut got = Vec::new();
    for _ in 0..20 {
        let batch = queue
            .receive(10, Duration::from_secs(1), Duration::from_secs(30))
            .await
            .unwrap();
        for message in &batch {
            queue.delete(&message.receipt).await.unwrap();
        }
        got.extend(batch.into_iter().map(|m| m.body));
        if got.len() >= many.len() {
            break;
        }
    }
    got.sort();
    let mut expected = many.clone();
    expected.sort();
    assert_eq!(got, expected);
    assert!(queue
        .receive(10, Duration::from_secs(1), Duration::ZERO)
        .await
        .unwrap()
        .is_empty());
}

/// The scheduler's due index: set creates or moves an item, due lists what is due by a time in due
/// order (at most `limit`), lanes are apart, clear removes.
pub async fn due_index_lists_due_work_in_order(state: Arc<dyn StateStore>) {
    let index = DueIndex::new(state);
    let due = |items: Vec<DueItem>| items.into_iter().map(|i| (i.target, i.due_at_ms)).collect::<Vec<_>>();
    index.set("async_request", "req-c", 3_000).await.unwrap();
    index.set("async_request", "req-a", 1_000).await.unwrap();
    index.set("async_request", "req-b", 2_000).await.unwrap();
    index.set("webhook", "req-a", 500).await.unwrap();
    // Setting again to the same time changes nothing; to another time moves it.
    index.set("async_request", "req-b", 2_000).await.unwrap();
    assert_eq!(
        due(index.due("async_request", 2_500, 10).await.unwrap()),
        [("req-a".to_owned(), 1_000), ("req-b".to_owned(), 2_000)]
    );
    index.set("async_request", "req-a", 5_000).await.unwrap();
    assert_eq!(
        due(index.due("async_request", 10_000, 10).await.unwrap()),
        [
            ("req-b".to_owned(), 2_000),
            ("req-c".to_owned(), 3_000),
            ("req-a".to_owned(), 5_000)
        ]
    );
    assert_eq!(
        due(index.due("async_request", 10_000, 2).await.unwrap()),
        [("req-b".to_owned(), 2_000), ("req-c".to_owned(), 3_000)]
    );
    assert!(index.due("async_request", 1_999, 10).await.unwrap().is_empty());
    // Due exactly at `now` counts; the other lane has its own items.
    assert_eq!(
        due(index.due("webhook", 500, 10).await.unwrap()),
        [("req-a".to_owned(), 500)]
    );

    index.clear("async_request", "req-b").await.unwrap();
    index.clear("async_request", "req-b").await.unwrap();
    assert_eq!(
        due(index.due("async_request", 10_000, 10).await.unwrap()),
        [("req-c".to_owned(), 3_000), ("req-a".to_owned(), 5_000)]
    );
    assert_eq!(
        due(index.due("webhook", 10_000, 10).await.unwrap()),
        [("req-a".to_owned(), 500)]
    );
    // Targets may hold ':'; lanes may not (the record id would be ambiguous).
    index.set("webhook", "d:1", 600).await.unwrap();
    assert_eq!(
        due(index.due("webhook", 600, 10).await.unwrap()),
        [("req-a".to_owned(), 500), ("d:1".to_owned(), 600)]
    );
    assert!(matches!(index.set("a:b", "x", 1).await, Err(StorageError::Invalid(_))));

    // create: one write for a new target, a move for a known one; reschedule: a move from a known
    // version, and a correct move (by reading) when the version it was given is stale.
    index.create("fast", "r", 100).await.unwrap();
    index.create("fast", "r", 200).await.unwrap();
    assert_eq!(
        due(index.due("fast", 1_000, 10).await.unwrap()),
        [("r".to_owned(), 200)]
    );
    index.reschedule("fast", "r", 300, 2).await.unwrap();
    assert_eq!(
        due(index.due("fast", 1_000, 10).await.unwrap()),
        [("r".to_owned(), 300)]
    );
    index.reschedule("fast", "r", 400, 1).await.unwrap();
    assert_eq!(
        due(index.due("fast", 1_000, 10).await.unwrap()),
        [("r".to_owned(), 400)]
    );
    index.clear("fast", "r").await.unwrap();
    index.reschedule("fast", "r", 500, 7).await.unwrap();
    assert_eq!(
        due(index.due("fast", 1_000, 10).await.unwrap()),
        [("r".to_owned(), 500)]
    );

    // More than one page of items (the index reads 100 at a time).
    for i in 0..130 {
        index.set("many", &format!("t{i:03}"), 10_000 + i).await.unwrap();
    }
    let listed = index.due("many", 10_000 + 120, 1_000).await.unwrap();
    assert_eq!(listed.len(), 121);
    assert!(listed.windows(2).all(|w| w[0].due_at_ms < w[1].due_at_ms));
    assert_eq!(listed.last().unwrap().target, "t120");
}

/// Every lane of the queue (the batch lane and one per priority): receives start with P0 and end
/// with P2; each lane's receipts acknowledge and hand back its own messages.
pub async fn queue_priority_lanes(queue: &dyn JobQueue) {
    queue
        .send_priority("lane-p2", Priority::P2, Duration::ZERO)
        .await
        .unwrap();
    queue
        .send_priority("lane-p1", Priority::P1, Duration::ZERO)
        .await
        .unwrap();
    queue.send("lane-batch", Duration::ZERO).await.unwrap();
    queue
        .send_priority("lane-p0", Priority::P0, Duration::ZERO)
        .await
        .unwrap();
    let mut received = Vec::new();
    for _ in 0..20 {
        received.extend(
            queue
                .receive(1, Duration::from_secs(1), Duration::from_secs(30))
                .await
                .unwrap(),
        );
        if received.len() >= 4 {
            break;
        }
    }
    let bodies: Vec<&str> = received.iter().map(|m| m.body.as_str()).collect();
    assert_eq!(bodies, ["lane-p0", "lane-p1", "lane-batch", "lane-p2"]);
    assert!(received.iter().all(|m| m.receive_count == 1));

    // Each message handed back through its receipt comes back on its own lane.
    for message in &received {
        queue.change_visibility(&message.receipt, Duration::ZERO).await.unwrap();
    }
    let mut again = Vec::new();
    for _ in 0..20 {
        again.extend(
            queue
                .receive(10, Duration::from_secs(1), Duration::from_secs(30))
                .await
                .unwrap(),
        );
        if again.len() >= 4 {
            break;
        }
    }
    let mut bodies: Vec<&str> = again.iter().map(|m| m.body.as_str()).collect();
    bodies.sort_unstable();
    assert_eq!(bodies, ["lane-batch", "lane-p0", "lane-p1", "lane-p2"]);
    assert!(again.iter().all(|m| m.receive_count == 2), "{again:?}");
    for message in &again {
        queue.delete(&message.receipt).await.unwrap();
    }
    assert!(queue
        .receive(10, Duration::from_secs(1), Duration::ZERO)
        .await
        .unwrap()
        .is_empty());
}

/// Streamed writes (large enough for S3 multipart), failed streams leave nothing, prefix deletes.
pub async fn blob_streams_and_prefixes(blobs: &dyn BlobStore) {
    let piece = Bytes::from(vec![7u8; 1024 * 1024]);
    let pieces = 20;
    let stream = futures::stream::iter((0..pieces).map({
        let piece = piece.clone();
        move |_| Ok(piece.clone())
    }))
    .boxed();
    let key = "projects/p1/files/big";
    assert_eq!(
        blobs.put_stream(key, stream).await.unwrap(),
        (pieces * piece.len()) as u64
    );
    assert_eq!(blobs.size(key).await.unwrap(), Some((pieces * piece.len()) as u64));
    assert_eq!(
        blobs
            .get_range(key, 9 * 1024 * 1024 - 1, 9 * 1024 * 1024 + 1)
            .await
            .unwrap()
            .len(),
        2
    );

    // A stream that fails part-way leaves no object behind, even past one multipart part.
    let failing = futures::stream::iter((0..12).map({
        let piece = piece.clone();
        move |i| {
            if i == 11 {
                Err(StorageError::Invalid("client went away".into()))
            } else {
                Ok(piece.clone())
            }
        }
    }))
    .boxed();
    assert!(blobs.put_stream("projects/p1/files/broken", failing).await.is_err());
    assert_eq!(blobs.size("projects/p1/files/broken").await.unwrap(), None);

    // Small streams work too.
    let small = futures::stream::iter(vec![Ok(Bytes::from_static(b"ab")), Ok(Bytes::from_static(b"c"))]).boxed();
    assert_eq!(
        blobs.put_stream("projects/p1/uploads/u1/parts/a", small).await.unwrap(),
        3
    );
    blobs
        .put("projects/p1/uploads/u1/parts/b", Bytes::from_static(b"x"))
        .await
        .unwrap();
    blobs
        .put("projects/p1/uploads/u10/parts/c", Bytes::from_static(b"y"))
        .await
        .unwrap();
    assert_eq!(blobs.delete_prefix("projects/p1/uploads/u1").await.unwrap(), 2);
    assert_eq!(blobs.size("projects/p1/uploads/u1/parts/a").await.unwrap(), None);
    // A sibling whose name merely starts the same survives.
    assert_eq!(blobs.size("projects/p1/uploads/u10/parts/c").await.unwrap(), Some(1));
    assert_eq!(blobs.delete_prefix("projects/p1/uploads/none").await.unwrap(), 0);
    blobs.delete(key).await.unwrap();
}

/// Several records updated at once: all or none, each at its expected version.
pub async fn state_update_all_is_all_or_nothing(state: &dyn StateStore) {
    let a = record("batch", "batch-a", "p1", 1);
    let b = record("batch_chunk", "batch-a.0", "batch-a", 2);
    state.create(&a).await.unwrap();
    state.create(&b).await.unwrap();
    let bumped = |r: &Record, status: &str| Record {
        version: r.version + 1,
        body: json!({"status": status}),
        ..r.clone()
    };
    state
        .update_all(&[(bumped(&a, "one"), 1), (bumped(&b, "one"), 1)])
        .await
        .unwrap();
    assert_eq!(state.get("batch", "batch-a").await.unwrap().unwrap().version, 2);
    // One stale version: nothing is written.
    let a2 = state.get("batch", "batch-a").await.unwrap().unwrap();
    assert_eq!(
        state
            .update_all(&[(bumped(&a2, "two"), 2), (bumped(&b, "two"), 1)])
            .await,
        Err(StorageError::Conflict)
    );
    assert_eq!(
        state.get("batch", "batch-a").await.unwrap().unwrap().body,
        json!({"status": "one"})
    );
    // A missing record conflicts too; naming a record twice is refused.
    let ghost = record("batch", "ghost", "p1", 3);
    assert_eq!(
        state.update_all(&[(bumped(&a2, "x"), 2), (ghost, 1)]).await,
        Err(StorageError::Conflict)
    );
    assert!(matches!(
        state.update_all(&[(bumped(&a2, "x"), 2), (bumped(&a2, "y"), 2)]).await,
        Err(StorageError::Invalid(_))
    ));
    state.update_all(&[]).await.unwrap();
}
