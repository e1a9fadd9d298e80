//! The ports' contract on the AWS adapters (S3, DynamoDB, SQS), against a moto server started for
//! this test on a free loopback port.

use bytes::Bytes;
use nimbus_integration_tests::contract;
use nimbus_integration_tests::moto::{create_bucket, create_queue, create_state_table, MotoServer};
use nimbus_shared::adapters::aws::{DynamoDbStateStore, S3BlobStore, SqsJobQueue};
use nimbus_shared::ports::BlobStore;
use std::sync::Arc;
use std::time::Duration;

#[tokio::test]
async fn aws_adapters_honour_the_contract_on_moto() {
    let moto = MotoServer::start().unwrap();
    let config = moto.sdk_config().await;

    create_bucket(&config, "nimbus-test").await.unwrap();
    let blobs = S3BlobStore::new(&config, "nimbus-test");
    contract::blob_round_trip(&blobs).await;
    contract::blob_streams_and_prefixes(&blobs).await;
    presigned_urls_work(&blobs).await;

    create_state_table(&config, "nimbus-state").await.unwrap();
    let state = DynamoDbStateStore::new(&config, "nimbus-state");
    contract::state_conditional_writes(&state).await;
    contract::state_update_all_is_all_or_nothing(&state).await;
    contract::state_lists_by_owner_with_cursor(&state).await;
    contract::state_races_have_one_winner(Arc::new(state)).await;

    let queue_url = create_queue(&config, "nimbus-jobs").await.unwrap();
    contract::queue_send_receive(&SqsJobQueue::new(&config, queue_url)).await;
}

async fn presigned_urls_work(blobs: &S3BlobStore) {
    let client = reqwest::Client::new();
    let put_url = blobs
        .presign_put("projects/p/files/direct", Duration::from_secs(300))
        .await
        .unwrap()
        .unwrap();
    let response = client.put(&put_url).body("direct bytes").send().await.unwrap();
    assert!(response.status().is_success(), "{}", response.status());
    assert_eq!(
        blobs.get("projects/p/files/direct").await.unwrap(),
        Bytes::from_static(b"direct bytes")
    );
    let get_url = blobs
        .presign_get("projects/p/files/direct", Duration::from_secs(300), "in put.jsonl")
        .await
        .unwrap()
        .unwrap();
    let response = client.get(&get_url).send().await.unwrap();
    assert!(response.status().is_success());
    assert_eq!(response.text().await.unwrap(), "direct bytes");
}
