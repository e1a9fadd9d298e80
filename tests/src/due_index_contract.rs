//! The due-work index over shards, on each set of adapters. Each function panics (test failure)
//! on a violation.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use nimbus_shared::ports::StateStore;
use nimbus_shared::scheduler::{DueIndex, DueItem};
use std::collections::HashSet;
use std::sync::Arc;

/// A lane spread over shards: listings merge every shard (and the unsharded partition entries
/// written before lanes were sharded live in) by due time, then target; a `set` moves an old
/// entry to its shard; a target has one entry whatever the shard count that wrote it.
pub async fn due_index_shards_and_the_unsharded_partition(state: Arc<dyn StateStore>) {
    let due = |items: Vec<DueItem>| items.into_iter().map(|i| (i.target, i.due_at_ms)).collect::<Vec<_>>();
    let unsharded = DueIndex::new(Arc::clone(&state)).with_shards(1);
    let sharded = DueIndex::new(Arc::clone(&state)).with_shards(4);
    for i in 0..10i64 {
        unsharded
            .set("lane", &format!("old-{i}"), 1_000 + i * 10)
            .await
            .unwrap();
    }
    for i in 0..30i64 {
        sharded
            .set("lane", &format!("new-{i:02}"), 1_005 + i * 10)
            .await
            .unwrap();
    }
    // Same due time in several shards: the target breaks the tie.
    for target in ["tie-c", "tie-a", "tie-b"] {
        sharded.set("lane", target, 1_001).await.unwrap();
    }
    let mut owners = HashSet::new();
    for i in 0..30 {
        let record = state
            .get("due_work", &format!("lane:new-{i:02}"))
            .await
            .unwrap()
            .unwrap();
        owners.insert(record.owner);
    }
    assert!(owners.len() >= 3, "30 targets over 4 shards: {owners:?}");
    assert!(owners
        .iter()
        .all(|owner| owner == "due:lane" || owner.starts_with("due:lane#")));

    let listed = due(sharded.due("lane", i64::MAX, 1_000).await.unwrap());
    assert_eq!(listed.len(), 43);
    let mut sorted = listed.clone();
    sorted.sort_by(|a, b| (a.1, &a.0).cmp(&(b.1, &b.0)));
    assert_eq!(listed, sorted, "one order across shards");
    assert_eq!(
        listed[..5],
        [
            ("old-0".to_owned(), 1_000),
            ("tie-a".to_owned(), 1_001),
            ("tie-b".to_owned(), 1_001),
            ("tie-c".to_owned(), 1_001),
            ("new-00".to_owned(), 1_005),
        ]
    );
    // A limit takes the earliest of all shards; `now` stops each shard.
    assert_eq!(due(sharded.due("lane", i64::MAX, 3).await.unwrap()), listed[..3]);
    assert_eq!(
        due(sharded.due("lane", 1_015, 100).await.unwrap()),
        listed
            .iter()
            .filter(|(_, at)| *at <= 1_015)
            .cloned()
            .collect::<Vec<_>>()
    );

    // An old entry set again moves to its shard, keeping one entry per target.
    sharded.set("lane", "old-3", 5_000).await.unwrap();
    let moved = state.get("due_work", "lane:old-3").await.unwrap().unwrap();
    assert_eq!(moved.created_at_ms, 5_000);
    let again = due(sharded.due("lane", i64::MAX, 1_000).await.unwrap());
    assert_eq!(again.iter().filter(|(target, _)| target == "old-3").count(), 1);
    assert_eq!(again.last().unwrap(), &("old-3".to_owned(), 5_000));
    // Old entries clear like new ones; the unsharded reader still sees its own partition.
    sharded.clear("lane", "old-0").await.unwrap();
    assert!(state.get("due_work", "lane:old-0").await.unwrap().is_none());
    let old_reader = due(unsharded.due("lane", i64::MAX, 1_000).await.unwrap());
    assert!(old_reader.iter().all(|(target, _)| target != "old-0"));
    assert_eq!(due(sharded.due("lane", i64::MAX, 1_000).await.unwrap()).len(), 42);
}
