//! The ports' contract on the embedded adapters (files, SQLite, in-process queue).

use nimbus_integration_tests::contract;
use nimbus_shared::adapters::embedded::{FileBlobStore, MemoryQueue, SqliteStateStore};
use nimbus_shared::ports::{BlobStore, Record, StateStore};
use std::sync::Arc;

#[tokio::test]
async fn file_blobs_honour_the_contract() {
    let dir = tempfile::tempdir().unwrap();
    let blobs = FileBlobStore::open(dir.path()).unwrap();
    contract::blob_round_trip(&blobs).await;
    contract::blob_streams_and_prefixes(&blobs).await;
    assert_eq!(
        blobs
            .presign_get("a/b", std::time::Duration::from_secs(60), "b")
            .await
            .unwrap(),
        None
    );
}

#[tokio::test]
async fn sqlite_state_honours_the_contract() {
    let dir = tempfile::tempdir().unwrap();
    let state = SqliteStateStore::open(&dir.path().join("state.sqlite3")).unwrap();
    contract::state_conditional_writes(&state).await;
    contract::state_update_all_is_all_or_nothing(&state).await;
    contract::state_lists_by_owner_with_cursor(&state).await;
    contract::state_races_have_one_winner(Arc::new(state)).await;
}

#[tokio::test]
async fn the_due_index_works_on_sqlite() {
    let dir = tempfile::tempdir().unwrap();
    let state = SqliteStateStore::open(&dir.path().join("state.sqlite3")).unwrap();
    contract::due_index_lists_due_work_in_order(Arc::new(state)).await;
}

#[tokio::test]
async fn the_sharded_due_index_works_on_sqlite() {
    let dir = tempfile::tempdir().unwrap();
    let state = SqliteStateStore::open(&dir.path().join("state.sqlite3")).unwrap();
    nimbus_integration_tests::due_index_contract::due_index_shards_and_the_unsharded_partition(Arc::new(state)).await;
}

#[tokio::test]
async fn sqlite_state_survives_reopening_and_is_shared_between_handles() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("state.sqlite3");
    let record = Record {
        kind: "file".into(),
        id: "file-1".into(),
        owner: "p".into(),
        created_at_ms: 1,
        version: 1,
        expires_at: None,
        body: serde_json::json!({"kept": true}),
    };
    {
        let first = SqliteStateStore::open(&path).unwrap();
        first.create(&record).await.unwrap();
        // A second handle (another process in real life, e.g. `nimbus keys`) sees it at once.
        let second = SqliteStateStore::open(&path).unwrap();
        assert_eq!(second.get("file", "file-1").await.unwrap(), Some(record.clone()));
    }
    let reopened = SqliteStateStore::open(&path).unwrap();
    assert_eq!(reopened.get("file", "file-1").await.unwrap(), Some(record));
}

#[tokio::test]
async fn memory_queue_honours_the_contract() {
    contract::queue_send_receive(&MemoryQueue::new()).await;
    contract::queue_priority_lanes(&MemoryQueue::new()).await;
}

#[tokio::test]
async fn the_local_sealer_honours_the_contract() {
    let dir = tempfile::tempdir().unwrap();
    let sealer = nimbus_shared::adapters::embedded::LocalSealer::in_data_dir(dir.path());
    nimbus_integration_tests::sealer_contract::sealer_honours_the_contract(&sealer).await;
    let state = Arc::new(SqliteStateStore::open(&dir.path().join("state.sqlite3")).unwrap());
    nimbus_integration_tests::sealer_contract::webhook_secrets_are_sealed_at_rest(state, Arc::new(sealer)).await;
}
