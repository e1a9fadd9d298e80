//! A batch keeps its input: deleting the input file of a running batch removes the file from the
//! files API at once, but its bytes stay until no batch needs them. And a batch whose input
//! bytes vanish anyway fails those requests clearly instead of retrying forever.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use nimbus_integration_tests::batch_assertions::{assert_cleaned_up, run_to_end_exactly_once};
use nimbus_integration_tests::batch_harness::{custom_ids, lines_for, project, settings, Harness, MODEL, PROJECT};
use nimbus_shared::files::{FilesError, HOLD_BACKSTOP_MS};
use nimbus_shared::openai::batches::BatchStatus;
use nimbus_shared::ports::{BlobStore, JobOutcome, QueueMessage};
use std::time::Duration;

fn blob_key(file_id: &str) -> String {
    format!("projects/{PROJECT}/files/{file_id}")
}

async fn bytes_exist(h: &Harness, file_id: &str) -> bool {
    h.blobs.size(&blob_key(file_id)).await.unwrap().is_some()
}

async fn assert_file_gone_from_the_api(h: &Harness, file_id: &str) {
    let err = h.files.get_file(&project(), file_id).await.unwrap_err();
    assert!(matches!(err, FilesError::NotFound { .. }), "{err:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn deleting_the_input_of_a_running_batch_keeps_its_bytes_until_the_batch_ends() {
    let (h, provider) = Harness::with_model(settings(), Duration::from_millis(2));
    let ids = custom_ids(30, None);
    let created = h.create_batch(&lines_for(MODEL, &ids)).await;
    let file_id = created.input_file_id.clone();
    h.validate().await;
    let chunk0 = h.receive().await.unwrap();
    assert_eq!(h.handle(&chunk0).await, JobOutcome::Done);

    let deleted = h.files.delete_file(&project(), &file_id).await.unwrap();
    assert!(deleted.deleted);
    assert_file_gone_from_the_api(&h, &file_id).await;
    assert!(
        bytes_exist(&h, &file_id).await,
        "the running batch still holds the bytes"
    );
    assert_eq!(
        h.files.holders_of(&blob_key(&file_id)).await.unwrap(),
        vec![created.id.clone()]
    );

    run_to_end_exactly_once(&h, &created.id, &ids, &provider).await;
    assert!(
        !bytes_exist(&h, &file_id).await,
        "the batch ended: the deleted file's bytes went with it"
    );
    assert!(h.files.holders_of(&blob_key(&file_id)).await.unwrap().is_empty());
    assert_cleaned_up(&h, &created.id).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn deleting_the_input_before_validation_still_runs_every_line() {
    let (h, _provider) = Harness::with_model(settings(), Duration::from_millis(2));
    let ids = custom_ids(25, Some(6));
    let created = h.create_batch(&lines_for(MODEL, &ids)).await;
    h.files.delete_file(&project(), &created.input_file_id).await.unwrap();
    assert_file_gone_from_the_api(&h, &created.input_file_id).await;

    let batch = h.run_to_end(&created.id).await;
    assert_eq!(batch.status, BatchStatus::Completed, "{batch:?}");
    h.results(&batch).await.assert_each_once(&ids);
    assert!(!bytes_exist(&h, &created.input_file_id).await);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn bytes_held_by_two_batches_go_when_the_second_ends() {
    let (h, _provider) = Harness::with_model(settings(), Duration::from_millis(2));
    let ids = custom_ids(15, None);
    let file = h.upload(&lines_for(MODEL, &ids)).await;
    let first = h
        .api
        .create_batch(&project(), Harness::create_request(&file.id), None)
        .await
        .unwrap();
    let second = h
        .api
        .create_batch(&project(), Harness::create_request(&file.id), None)
        .await
        .unwrap();
    h.files.delete_file(&project(), &file.id).await.unwrap();
    let mut holders = h.files.holders_of(&blob_key(&file.id)).await.unwrap();
    holders.sort();
    let mut expected = vec![first.id.clone(), second.id.clone()];
    expected.sort();
    assert_eq!(holders, expected);

    // Run the first batch to its end, leaving the second's messages aside.
    let mut aside: Vec<QueueMessage> = Vec::new();
    while h.batch(&first.id).await.status != BatchStatus::Completed {
        let message = h.receive().await.expect("work for the first batch");
        if message.body.contains(&second.id) {
            aside.push(message);
        } else {
            assert_eq!(h.handle(&message).await, JobOutcome::Done);
        }
    }
    assert!(bytes_exist(&h, &file.id).await, "the second batch still holds them");
    assert_eq!(
        h.files.holders_of(&blob_key(&file.id)).await.unwrap(),
        vec![second.id.clone()]
    );

    for message in &aside {
        h.settle(
            message,
            JobOutcome::Retry {
                retry_after: Duration::ZERO,
            },
        )
        .await;
    }
    let batch = h.run_to_end(&second.id).await;
    assert_eq!(batch.status, BatchStatus::Completed);
    h.results(&batch).await.assert_each_once(&ids);
    assert!(!bytes_exist(&h, &file.id).await);
}

#[tokio::test]
async fn a_batch_cannot_be_created_from_a_deleted_file_and_holds_nothing() {
    let (h, _provider) = Harness::with_model(settings(), Duration::from_millis(2));
    let file = h.upload(&lines_for(MODEL, &custom_ids(3, None))).await;
    h.files.delete_file(&project(), &file.id).await.unwrap();
    let err = h
        .api
        .create_batch(&project(), Harness::create_request(&file.id), None)
        .await
        .unwrap_err();
    assert!(
        matches!(
            &err,
            nimbus_shared::batches::BatchesError::NotFound {
                param: "input_file_id",
                ..
            }
        ),
        "{err:?}"
    );
    assert!(h.files.holders_of(&blob_key(&file.id)).await.unwrap().is_empty());
    assert!(!bytes_exist(&h, &file.id).await);
}

#[tokio::test]
async fn the_janitor_deletes_held_bytes_of_a_deleted_file_after_the_longest_window() {
    let (h, _provider) = Harness::with_model(settings(), Duration::from_millis(2));
    let created = h.create_batch(&lines_for(MODEL, &custom_ids(3, None))).await;
    let file_id = created.input_file_id.clone();
    h.files.delete_file(&project(), &file_id).await.unwrap();
    // Nothing runs the batch (its holder never lets go).
    h.files.sweep(100).await.unwrap();
    assert!(bytes_exist(&h, &file_id).await);
    h.clock
        .advance(Duration::from_millis(u64::try_from(HOLD_BACKSTOP_MS).unwrap() + 1000));
    let report = h.files.sweep(100).await.unwrap();
    assert_eq!(report.tasks_failed, 0);
    assert!(!bytes_exist(&h, &file_id).await, "the backstop removed them");
    assert!(h.files.holders_of(&blob_key(&file_id)).await.unwrap().is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_batch_whose_input_object_vanished_fails_those_requests_instead_of_retrying() {
    let (h, provider) = Harness::with_model(settings(), Duration::from_millis(2));
    let ids = custom_ids(30, None);
    let created = h.create_batch(&lines_for(MODEL, &ids)).await;
    h.validate().await;
    let chunk0 = h.receive().await.unwrap();
    assert_eq!(h.handle(&chunk0).await, JobOutcome::Done);
    // The bytes disappear behind the engine's back (an operator, a bucket rule).
    h.blobs.delete(&blob_key(&created.input_file_id)).await.unwrap();

    let batch = h.run_to_end(&created.id).await;
    assert_eq!(batch.status, BatchStatus::Completed);
    let counts = &batch.request_counts;
    assert_eq!((counts.total, counts.completed, counts.failed), (30, 10, 20));
    let results = h.results(&batch).await;
    assert_eq!(results.output.len(), 10);
    assert_eq!(
        results.errors.len(),
        20,
        "one error line per request that could not be read"
    );
    for line in &results.errors {
        assert_eq!(line["error"]["code"], "input_file_missing", "{line}");
        assert!(line["custom_id"].is_null(), "{line}");
        let message = line["error"]["message"].as_str().unwrap();
        assert!(message.contains(&created.input_file_id), "{message}");
    }
    assert_eq!(provider.total_calls(), 10);
    assert_cleaned_up(&h, &created.id).await;
}
