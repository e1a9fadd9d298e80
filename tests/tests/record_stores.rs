//! The records ports (inferences, model cache, feedback) over the embedded adapters (SQLite and
//! files) and over the AWS adapters (DynamoDB and S3) on a moto server.

use nimbus_integration_tests::moto::{create_bucket, create_state_table, MotoServer};
use nimbus_integration_tests::records_contract as contract;
use nimbus_shared::adapters::aws::{DynamoDbStateStore, S3BlobStore};
use nimbus_shared::adapters::embedded::{FileBlobStore, SqliteStateStore};
use nimbus_shared::ports::{BlobStore, StateStore};
use std::sync::Arc;

async fn run_contract(state: Arc<dyn StateStore>, blobs: Arc<dyn BlobStore>) {
    contract::inference_records_round_trip(Arc::clone(&state), Arc::clone(&blobs)).await;
    contract::large_inference_records_spill_to_blobs(Arc::clone(&state), Arc::clone(&blobs)).await;
    contract::episode_listing_pages_oldest_first(Arc::clone(&state), Arc::clone(&blobs)).await;
    contract::batch_pages_find_items_by_id_and_range(Arc::clone(&state), Arc::clone(&blobs)).await;
    contract::feedback_round_trip(Arc::clone(&state), Arc::clone(&blobs)).await;
    contract::records_past_their_retention_are_gone(Arc::clone(&state), Arc::clone(&blobs)).await;
    contract::model_cache_expiry_and_max_age(state, blobs).await;
}

#[tokio::test]
async fn records_honour_the_contract_on_the_embedded_adapters() {
    let dir = tempfile::tempdir().unwrap();
    let state = SqliteStateStore::open(&dir.path().join("state.sqlite3")).unwrap();
    let blobs = FileBlobStore::open(dir.path().join("blobs")).unwrap();
    run_contract(Arc::new(state), Arc::new(blobs)).await;
}

#[tokio::test]
async fn records_honour_the_contract_on_moto() {
    let moto = MotoServer::start().unwrap();
    let config = moto.sdk_config().await;
    create_bucket(&config, "nimbus-records").await.unwrap();
    create_state_table(&config, "nimbus-records").await.unwrap();
    run_contract(
        Arc::new(DynamoDbStateStore::new(&config, "nimbus-records")),
        Arc::new(S3BlobStore::new(&config, "nimbus-records")),
    )
    .await;
}
