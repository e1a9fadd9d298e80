//! `output_expires_after` on the embedded adapters: a batch's output and error files get
//! `expires_at` = their creation + the seconds asked, vanish from the API once that passes, and the
//! files janitor's sweep deletes their bytes, like any uploaded file with `expires_after`.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use nimbus_integration_tests::batch_harness::{custom_ids, lines_for, project, settings, Harness, MODEL, PROJECT};
use nimbus_shared::files::FilesError;
use nimbus_shared::openai::batches::{BatchObject, BatchStatus};
use nimbus_shared::openai::files::ExpiresAfter;
use nimbus_shared::ports::BlobStore;
use std::time::Duration;

/// Run a batch of six lines (two fail, so both result files exist) with this policy.
async fn run_batch(h: &Harness, policy: Option<ExpiresAfter>) -> BatchObject {
    let file = h.upload(&lines_for(MODEL, &custom_ids(6, Some(3)))).await;
    let mut request = Harness::create_request(&file.id);
    request.output_expires_after = policy;
    let created = h.api.create_batch(&project(), request, None).await.unwrap();
    let batch = h.run_to_end(&created.id).await;
    assert_eq!(batch.status, BatchStatus::Completed, "{batch:?}");
    assert_eq!((batch.request_counts.completed, batch.request_counts.failed), (4, 2));
    batch
}

fn result_file_ids(batch: &BatchObject) -> [String; 2] {
    [
        batch.output_file_id.clone().expect("an output file"),
        batch.error_file_id.clone().expect("an error file"),
    ]
}

fn blob_key(file_id: &str) -> String {
    format!("projects/{PROJECT}/files/{file_id}")
}

#[tokio::test]
async fn result_files_expire_as_the_batch_asked_and_the_sweep_deletes_their_bytes() {
    let (h, _provider) = Harness::with_model(settings(), Duration::ZERO);
    let policy = ExpiresAfter {
        anchor: "created_at".to_owned(),
        seconds: 3600,
    };
    let expiring = result_file_ids(&run_batch(&h, Some(policy)).await);
    let kept = result_file_ids(&run_batch(&h, None).await);

    for id in &expiring {
        let file = h.files.get_file(&project(), id).await.unwrap();
        assert_eq!(file.expires_at, Some(file.created_at + 3600), "{file:?}");
        assert!(!h.read_file_lines(id).await.is_empty());
    }
    for id in &kept {
        assert_eq!(h.files.get_file(&project(), id).await.unwrap().expires_at, None);
    }

    // Not yet due: nothing changes.
    h.clock.advance(Duration::from_secs(3590));
    h.files.sweep(100).await.unwrap();
    for id in expiring.iter().chain(&kept) {
        h.files.get_file(&project(), id).await.unwrap();
    }

    // Past the hour: gone from the API at once, the bytes once the sweep ran.
    h.clock.advance(Duration::from_secs(11));
    for id in &expiring {
        let err = h.files.get_file(&project(), id).await.unwrap_err();
        assert!(matches!(err, FilesError::NotFound { .. }), "{err:?}");
        assert!(
            h.blobs.size(&blob_key(id)).await.unwrap().is_some(),
            "bytes stay until the sweep"
        );
    }
    let report = h.files.sweep(100).await.unwrap();
    assert!(report.tasks_run >= 2, "{report:?}");
    for id in &expiring {
        assert_eq!(
            h.blobs.size(&blob_key(id)).await.unwrap(),
            None,
            "the sweep deleted {id}"
        );
        assert!(h.files.delete_file(&project(), id).await.is_err());
    }
    // The files of the batch without the policy stay.
    for id in &kept {
        h.files.get_file(&project(), id).await.unwrap();
        assert!(h.blobs.size(&blob_key(id)).await.unwrap().is_some());
    }
}

#[tokio::test]
async fn an_out_of_range_policy_is_refused_before_the_batch_exists() {
    let (h, _provider) = Harness::with_model(settings(), Duration::ZERO);
    let file = h.upload(&lines_for(MODEL, &custom_ids(1, None))).await;
    for (anchor, seconds, param) in [
        ("created_at", 3599, "output_expires_after.seconds"),
        ("created_at", 2_592_001, "output_expires_after.seconds"),
        ("completed_at", 3600, "output_expires_after.anchor"),
    ] {
        let mut request = Harness::create_request(&file.id);
        request.output_expires_after = Some(ExpiresAfter {
            anchor: anchor.to_owned(),
            seconds,
        });
        let err = h.api.create_batch(&project(), request, None).await.unwrap_err();
        let nimbus_shared::batches::BatchesError::Invalid { param: got, .. } = &err else {
            panic!("{err:?}");
        };
        assert_eq!(got.as_deref(), Some(param), "{err:?}");
    }
    assert!(h.queue.is_empty(), "no validation was enqueued");
}
