//! Adaptive experiments' records (episode bindings, counted feedback, decisions) over the
//! embedded adapters (SQLite) and over DynamoDB on a moto server.

use nimbus_integration_tests::moto::{create_state_table, MotoServer};
use nimbus_shared::adapters::aws::DynamoDbStateStore;
use nimbus_shared::adapters::embedded::SqliteStateStore;
use nimbus_shared::ports::{ProjectId, StateStore};
use nimbus_shared::tensorzero::experiments::{Decision, ExperimentStore, StoredExperiment, VariantStats};
use std::sync::Arc;
use std::time::Duration;
use uuid::Uuid;

const NOW: i64 = 1_750_000_000_000;

async fn contract(state: Arc<dyn StateStore>) {
    let store = ExperimentStore::new(state, Some(Duration::from_secs(3600)));
    let (one, two) = (ProjectId::new("one"), ProjectId::new("two"));

    // The first binding of an episode wins, per project and function.
    let episode = Uuid::now_v7();
    assert_eq!(store.bind_episode(&one, "f", episode, "a", NOW).await.unwrap(), "a");
    assert_eq!(store.bind_episode(&one, "f", episode, "b", NOW + 1).await.unwrap(), "a");
    assert_eq!(store.bind_episode(&two, "f", episode, "b", NOW + 2).await.unwrap(), "b");
    assert_eq!(store.bind_episode(&one, "g", episode, "c", NOW + 3).await.unwrap(), "c");

    // Counted values: the latest N per variant, newest first, across pages; other variants,
    // metrics and expired rows are not among them.
    for n in 0..7u8 {
        let at = NOW + i64::from(n) * 10;
        store
            .observe(&one, ("f", "m", "a"), Uuid::now_v7(), f64::from(n), at)
            .await
            .unwrap();
    }
    store
        .observe(&two, ("f", "m", "b"), Uuid::now_v7(), 9.0, NOW)
        .await
        .unwrap();
    store
        .observe(&two, ("f", "other", "a"), Uuid::now_v7(), 9.0, NOW)
        .await
        .unwrap();
    let latest = store.latest_values(("f", "m", "a"), 5, NOW + 100).await.unwrap();
    assert_eq!(latest, [6.0, 5.0, 4.0, 3.0, 2.0]);
    assert_eq!(
        store
            .latest_values(("f", "m", "a"), 100, NOW + 100)
            .await
            .unwrap()
            .len(),
        7
    );
    assert_eq!(
        store.latest_values(("f", "m", "b"), 100, NOW + 100).await.unwrap(),
        [9.0]
    );
    let after_an_hour = NOW + 3_600_000 + 1_000;
    assert!(store
        .latest_values(("f", "m", "a"), 100, after_an_hour)
        .await
        .unwrap()
        .is_empty());
    // The same feedback counted twice is one row.
    let feedback = Uuid::now_v7();
    store.observe(&one, ("h", "m", "a"), feedback, 1.0, NOW).await.unwrap();
    store.observe(&one, ("h", "m", "a"), feedback, 1.0, NOW).await.unwrap();
    assert_eq!(store.latest_values(("h", "m", "a"), 100, NOW).await.unwrap(), [1.0]);

    // The decision: stored, then replaced.
    assert_eq!(store.load("f").await.unwrap(), None);
    let mut experiment = StoredExperiment {
        metric: "m".into(),
        decision: Decision::Nursery {
            nursery: vec!["a".into(), "b".into()],
        },
        variants: vec![VariantStats {
            variant: "a".into(),
            count: 7,
            mean: 3.0,
            variance: 4.666,
        }],
        computed_at_ms: NOW,
    };
    store.save("f", &experiment).await.unwrap();
    assert_eq!(store.load("f").await.unwrap().as_ref(), Some(&experiment));
    experiment.decision = Decision::Stopped { winner: "a".into() };
    experiment.computed_at_ms = NOW + 1_000;
    store.save("f", &experiment).await.unwrap();
    assert_eq!(store.load("f").await.unwrap(), Some(experiment));
}

#[tokio::test]
async fn experiment_records_on_the_embedded_adapters() {
    let dir = tempfile::tempdir().unwrap();
    let state = SqliteStateStore::open(&dir.path().join("state.sqlite3")).unwrap();
    contract(Arc::new(state)).await;
}

#[tokio::test]
async fn experiment_records_on_moto() {
    let moto = MotoServer::start().unwrap();
    let config = moto.sdk_config().await;
    create_state_table(&config, "nimbus-experiments").await.unwrap();
    contract(Arc::new(DynamoDbStateStore::new(&config, "nimbus-experiments"))).await;
}
