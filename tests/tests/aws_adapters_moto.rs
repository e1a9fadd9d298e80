//! The ports' contract on the AWS adapters (S3, DynamoDB, SQS, KMS, SSM), against a moto server started for
//! this test on a free loopback port.

use bytes::Bytes;
use nimbus_integration_tests::contract;
use nimbus_integration_tests::moto::{create_bucket, create_queue, create_sealing_key, create_state_table, MotoServer};
use nimbus_integration_tests::sealer_contract;
use nimbus_shared::adapters::aws::{
    delivered_receipt, DynamoDbStateStore, KmsSealer, ParameterKeySealer, S3BlobStore, SqsJobQueue, SsmParameters,
    SEALING_KEY_ENV, SEALING_KEY_PARAMETER_ENV,
};
use nimbus_shared::ports::{
    BlobStore, CredentialSealer, JobQueue, ListOrder, ListQuery, OneTimePut, Priority, SealError, StateStore,
};
use sha2::{Digest, Sha256};
use std::sync::Arc;
use std::time::Duration;

/// The table as the template creates it: `by_owner` projects no bodies, so a listing's bodies
/// come from reading the items (the contract above checked they are all there).
async fn the_owner_index_holds_no_bodies(state: &DynamoDbStateStore) {
    let query = ListQuery {
        kind: "file".into(),
        owner: "owner-a".into(),
        after: None,
        limit: 3,
        order: ListOrder::Asc,
    };
    let heads = state.list_heads_by_owner(&query).await.unwrap();
    assert_eq!(heads.records.len(), 3);
    assert!(heads.records.iter().all(|head| head.body.is_null()), "{heads:?}");
    let full = state.list_by_owner(&query).await.unwrap();
    assert!(full.records.iter().all(|record| record.body.is_object()), "{full:?}");
}

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
    the_owner_index_holds_no_bodies(&state).await;
    contract::state_races_have_one_winner(Arc::new(state)).await;
    create_state_table(&config, "nimbus-due").await.unwrap();
    contract::due_index_lists_due_work_in_order(Arc::new(DynamoDbStateStore::new(&config, "nimbus-due"))).await;
    nimbus_integration_tests::due_index_contract::due_index_shards_and_the_unsharded_partition(Arc::new(
        DynamoDbStateStore::new(&config, "nimbus-due"),
    ))
    .await;

    let queue_url = create_queue(&config, "nimbus-jobs").await.unwrap();
    contract::queue_send_receive(&SqsJobQueue::new(&config, queue_url)).await;
    priority_queues_work(&config).await;
}

#[tokio::test]
async fn the_kms_sealer_honours_the_contract_on_moto() {
    let moto = MotoServer::start().unwrap();
    let config = moto.sdk_config().await;
    let key_id = create_sealing_key(&config).await.unwrap();
    let sealer = KmsSealer::new(&config, &key_id);
    sealer_contract::sealer_honours_the_contract(&sealer).await;
    assert!(sealer.seal("c", b"x").await.unwrap().starts_with("kms1."));
    create_state_table(&config, "nimbus-sealed").await.unwrap();
    sealer_contract::webhook_secrets_are_sealed_at_rest(
        Arc::new(DynamoDbStateStore::new(&config, "nimbus-sealed")),
        Arc::new(sealer.clone()),
    )
    .await;

    // Functions that never seal start without the key's variable; sealing then names it.
    assert!(
        std::env::var(SEALING_KEY_ENV).is_err(),
        "the test run must not set {SEALING_KEY_ENV}"
    );
    let unconfigured = KmsSealer::from_env(&config);
    let sealed = sealer.seal("c", b"x").await.unwrap();
    for err in [
        unconfigured.seal("c", b"x").await.unwrap_err(),
        unconfigured.open("c", &sealed).await.unwrap_err(),
    ] {
        assert!(
            matches!(&err, SealError::Unavailable(message) if message.contains(SEALING_KEY_ENV)),
            "{err:?}"
        );
    }
}

#[tokio::test]
async fn the_parameter_key_sealer_honours_the_contract_on_moto() {
    let moto = MotoServer::start().unwrap();
    let config = moto.sdk_config().await;
    let name = "/nimbus/test/sealing-key";
    let sealer = ParameterKeySealer::new(SsmParameters::new(&config), name);
    sealer_contract::sealer_honours_the_contract(&sealer).await;
    assert!(sealer.seal("c", b"x").await.unwrap().starts_with("ssm1."));
    // The AWS default seals webhook secrets at rest like the KMS sealer does.
    create_state_table(&config, "nimbus-sealed").await.unwrap();
    sealer_contract::webhook_secrets_are_sealed_at_rest(
        Arc::new(DynamoDbStateStore::new(&config, "nimbus-sealed")),
        Arc::new(ParameterKeySealer::new(SsmParameters::new(&config), name)),
    )
    .await;

    // The first use made the key: a SecureString parameter, whose value is not what is sealed.
    let ssm = aws_sdk_ssm::Client::new(&config);
    let parameter = ssm.get_parameter().name(name).send().await.unwrap();
    let parameter = parameter.parameter().unwrap();
    assert_eq!(
        parameter.r#type(),
        Some(&aws_sdk_ssm::types::ParameterType::SecureString)
    );

    // Another process (a new sealer) reads the same key: what one sealed, the other opens; and
    // two processes racing to make the key agree on one (the second finds the first's).
    let sealed = sealer.seal("batch-1", b"secret").await.unwrap();
    let other = ParameterKeySealer::new(SsmParameters::new(&config), name);
    assert_eq!(other.open("batch-1", &sealed).await.unwrap(), b"secret");
    let (a, b) = (
        ParameterKeySealer::new(SsmParameters::new(&config), "/nimbus/test/raced"),
        ParameterKeySealer::new(SsmParameters::new(&config), "/nimbus/test/raced"),
    );
    let (sealed_a, sealed_b) = tokio::join!(a.seal("c", b"from a"), b.seal("c", b"from b"));
    assert_eq!(b.open("c", &sealed_a.unwrap()).await.unwrap(), b"from a");
    assert_eq!(a.open("c", &sealed_b.unwrap()).await.unwrap(), b"from b");

    // A parameter that is not a key is refused, naming it, never silently replaced.
    ssm.put_parameter()
        .name("/nimbus/test/not-a-key")
        .value("hello")
        .r#type(aws_sdk_ssm::types::ParameterType::SecureString)
        .send()
        .await
        .unwrap();
    let err = ParameterKeySealer::new(SsmParameters::new(&config), "/nimbus/test/not-a-key")
        .seal("c", b"x")
        .await
        .unwrap_err();
    assert!(
        matches!(&err, SealError::Unavailable(m) if m.contains("/nimbus/test/not-a-key")),
        "{err:?}"
    );

    // Without the parameter's variable, sealing names it.
    assert!(std::env::var(SEALING_KEY_PARAMETER_ENV).is_err());
    let err = ParameterKeySealer::from_env(SsmParameters::new(&config))
        .seal("c", b"x")
        .await
        .unwrap_err();
    assert!(
        matches!(&err, SealError::Unavailable(m) if m.contains(SEALING_KEY_PARAMETER_ENV)),
        "{err:?}"
    );
}

/// The jobs queue plus one queue per priority: each lane's messages land in its own queue, and a
/// receipt the event source delivered (qualified with the queue's ARN) acknowledges on that queue.
async fn priority_queues_work(config: &aws_config::SdkConfig) {
    let jobs_url = create_queue(config, "lanes-jobs").await.unwrap();
    let mut queue = SqsJobQueue::new(config, &jobs_url);
    let mut urls = Vec::new();
    for priority in Priority::ALL {
        let url = create_queue(config, &format!("lanes-AsyncQueueP{}", priority.level()))
            .await
            .unwrap();
        queue = queue.with_priority_queue(priority, &url);
        urls.push((priority, url));
    }
    contract::queue_priority_lanes(&queue).await;

    let sqs = aws_sdk_sqs::Client::new(config);
    for (priority, url) in &urls {
        let body = format!("{{\"job\":\"probe\",\"priority\":{}}}", priority.level());
        queue.send_priority(&body, *priority, Duration::ZERO).await.unwrap();
        let received = sqs
            .receive_message()
            .queue_url(url)
            .max_number_of_messages(10)
            .send()
            .await
            .unwrap();
        let messages = received.messages();
        assert_eq!(messages.len(), 1, "{priority:?}: {messages:?}");
        assert_eq!(messages[0].body(), Some(body.as_str()));
        // As the worker gets it from Lambda: the handle, and the ARN of the queue it came from.
        let arn = format!(
            "arn:aws:sqs:us-east-1:123456789012:lanes-AsyncQueueP{}",
            priority.level()
        );
        let receipt = delivered_receipt(Some(&arn), messages[0].receipt_handle().unwrap());
        queue.change_visibility(&receipt, Duration::ZERO).await.unwrap();
        let again = queue
            .receive(10, Duration::from_secs(1), Duration::from_secs(30))
            .await
            .unwrap();
        assert_eq!(again.len(), 1, "{priority:?}: {again:?}");
        assert_eq!(again[0].body, body);
        assert_eq!(again[0].receive_count, 2);
        queue.delete(&again[0].receipt).await.unwrap();
    }
    // Nothing strayed into the jobs queue.
    let jobs = sqs.receive_message().queue_url(&jobs_url).send().await.unwrap();
    assert!(jobs.messages().is_empty(), "{jobs:?}");

    // A function without the P1 queue's URL cannot send at P1, and says which variable is missing.
    let without_p1 = SqsJobQueue::new(config, &jobs_url).with_priority_queue(Priority::P0, &urls[0].1);
    let err = without_p1
        .send_priority("x", Priority::P1, Duration::ZERO)
        .await
        .unwrap_err();
    assert!(err.to_string().contains("NIMBUS_ASYNC_QUEUE_URL_P1"), "{err}");
}

async fn presigned_urls_work(blobs: &S3BlobStore) {
    let client = reqwest::Client::new();
    let body: &'static str = "direct bytes";
    let put = OneTimePut {
        bytes: 12,
        sha256: Some(Sha256::digest(body).into()),
    };
    let presigned = blobs
        .presign_put("projects/p/files/direct", Duration::from_secs(300), &put)
        .await
        .unwrap()
        .unwrap();
    let send = |body: &'static [u8]| {
        let mut request = client.put(&presigned.url).body(body);
        for (name, value) in &presigned.headers {
            request = request.header(name, value);
        }
        request.send()
    };
    // S3 answers 400 BadDigest to other bytes under the signed checksum; moto does not check
    // checksums (the unit tests of `S3BlobStore::presign_put` check that it is signed).
    let response = send(body.as_bytes()).await.unwrap();
    assert!(response.status().is_success(), "{}", response.status());
    assert_eq!(
        blobs.get("projects/p/files/direct").await.unwrap(),
        Bytes::from_static(b"direct bytes")
    );
    // The URL stores once: the same PUT again cannot replace the checked bytes.
    let response = send(body.as_bytes()).await.unwrap();
    assert_eq!(response.status(), 412, "{}", response.text().await.unwrap());
    let get_url = blobs
        .presign_get("projects/p/files/direct", Duration::from_secs(300), "in put.jsonl")
        .await
        .unwrap()
        .unwrap();
    let response = client.get(&get_url).send().await.unwrap();
    assert!(response.status().is_success());
    assert_eq!(response.text().await.unwrap(), "direct bytes");
}
