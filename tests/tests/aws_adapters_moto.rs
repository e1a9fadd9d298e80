//! The ports' contract on the AWS adapters (S3, DynamoDB, SQS), against a moto server started for
//! this test on a free loopback port.

use nimbus_integration_tests::contract;
use nimbus_integration_tests::moto::{create_bucket, create_queue, create_state_table, MotoServer};
use nimbus_shared::adapters::aws::{DynamoDbStateStore, S3BlobStore, SqsJobQueue};
use std::sync::Arc;

#[tokio::test]
async fn aws_adapters_honour_the_contract_on_moto() {
    let moto = MotoServer::start().unwrap();
    let config = moto.sdk_config().await;

    create_bucket(&config, "nimbus-test").await.unwrap();
    contract::blob_round_trip(&S3BlobStore::new(&config, "nimbus-test")).await;

    create_state_table(&config, "nimbus-state").await.unwrap();
    let state = DynamoDbStateStore::new(&config, "nimbus-state");
    contract::state_conditional_writes(&state).await;
    contract::state_lists_by_owner_with_cursor(&state).await;
    contract::state_races_have_one_winner(Arc::new(state)).await;

    let queue_url = create_queue(&config, "nimbus-jobs").await.unwrap();
    contract::queue_send_receive(&SqsJobQueue::new(&config, queue_url)).await;
}
