//! The files business layer on the embedded adapters.

use super::*;
use crate::adapters::embedded::{FileBlobStore, SqliteStateStore};
use crate::openai::files::{CreateUploadRequest, ExpiresAfter, FilePurpose};
use crate::ports::{BatchId, FileId, ProjectId};
use crate::ports::{ByteStream, ListOrder, SystemClock, UuidV7Ids};
use bytes::Bytes;
use futures::StreamExt;
use std::sync::atomic::{AtomicI64, Ordering};

/// A clock the test moves by hand.
struct TestClock(AtomicI64);

impl Clock for TestClock {
    fn now_unix_ms(&self) -> i64 {
        SystemClock.now_unix_ms() + self.0.load(Ordering::SeqCst)
    }
}

struct Fixture {
    files: FilesService,
    clock: Arc<TestClock>,
    dir: tempfile::TempDir,
}

impl Fixture {
    fn new() -> Self {
        let dir = tempfile::tempdir().unwrap();
        let clock = Arc::new(TestClock(AtomicI64::new(0)));
        let files = FilesService::new(
            Arc::new(SqliteStateStore::in_memory().unwrap()),
            Arc::new(FileBlobStore::open(dir.path()).unwrap()),
            clock.clone(),
            Arc::new(UuidV7Ids),
        );
        Self { files, clock, dir }
    }

    fn advance(&self, seconds: i64) {
        self.clock.0.fetch_add(seconds * 1000, Ordering::SeqCst);
    }

    fn blob_files_under(&self, prefix: &str) -> usize {
        fn count(path: &std::path::Path) -> usize {
            match std::fs::read_dir(path) {
                Err(_) => 0,
                Ok(entries) => entries
                    .flatten()
                    .map(|e| if e.path().is_dir() { count(&e.path()) } else { 1 })
                    .sum(),
            }
        }
        count(&self.dir.path().join("objects").join(prefix))
    }
}

fn body(bytes: &[u8]) -> ByteStream {
    let chunks: Vec<Result<Bytes, StorageError>> = bytes.chunks(3).map(|c| Ok(Bytes::copy_from_slice(c))).collect();
    futures::stream::iter(chunks).boxed()
}

fn new_file(name: &str, purpose: FilePurpose) -> NewFile {
    NewFile {
        filename: name.into(),
        purpose,
        expires_after: None,
    }
}

async fn read_all(files: &FilesService, project: &str, id: &str) -> Vec<u8> {
    match files
        .file_content(&ProjectId::new(project), id, u64::MAX)
        .await
        .unwrap()
    {
        FileContent::Stream { body, .. } => body.map(|c| c.unwrap().to_vec()).concat().await,
        FileContent::Redirect(_) => panic!("embedded store never redirects"),
    }
}

#[tokio::test]
async fn files_round_trip_and_are_scoped_to_their_project() {
    let f = Fixture::new();
    let file = f
        .files
        .create_file(
            &ProjectId::new("p1"),
            new_file("in.jsonl", FilePurpose::Batch),
            body(b"{\"a\":1}\n"),
        )
        .await
        .unwrap();
    assert_eq!(file.bytes, 8);
    assert_eq!(file.expires_at, Some(file.created_at + 30 * 24 * 3600));
    assert_eq!(read_all(&f.files, "p1", &file.id).await, b"{\"a\":1}\n");
    assert_eq!(f.files.get_file(&ProjectId::new("p1"), &file.id).await.unwrap(), file);
    // Another project sees nothing, and cannot delete it.
    assert!(matches!(
        f.files.get_file(&ProjectId::new("p2"), &file.id).await,
        Err(FilesError::NotFound { .. })
    ));
    assert!(matches!(
        f.files.delete_file(&ProjectId::new("p2"), &file.id).await,
        Err(FilesError::NotFound { .. })
    ));
    f.files.delete_file(&ProjectId::new("p1"), &file.id).await.unwrap();
    assert!(matches!(
        f.files.get_file(&ProjectId::new("p1"), &file.id).await,
        Err(FilesError::NotFound { .. })
    ));
    assert_eq!(f.blob_files_under("projects/p1/files"), 0);
}

#[tokio::test]
async fn listing_pages_exactly_in_both_orders_with_a_purpose_filter() {
    let f = Fixture::new();
    let mut created = Vec::new();
    for i in 0..7 {
        let purpose = if i % 2 == 0 {
            FilePurpose::UserData
        } else {
            FilePurpose::Vision
        };
        created.push(
            f.files
                .create_file(
                    &ProjectId::new("p"),
                    new_file(&format!("f{i}.txt"), purpose),
                    body(b"x"),
                )
                .await
                .unwrap()
                .id,
        );
    }
    for order in [ListOrder::Asc, ListOrder::Desc] {
        let mut seen = Vec::new();
        let mut after = None;
        loop {
            let page = f
                .files
                .list_files(
                    &ProjectId::new("p"),
                    ListFiles {
                        after: after.clone(),
                        limit: crate::files::FILE_PAGE.check(2).unwrap(),
                        order,
                        purpose: None,
                    },
                )
                .await
                .unwrap();
            seen.extend(page.data.iter().map(|file| file.id.clone()));
            after = page.last_id.clone();
            if !page.has_more {
                break;
            }
        }
        let mut expected = created.clone();
        if order == ListOrder::Desc {
            expected.reverse();
        }
        assert_eq!(seen, expected);
    }
    let vision = f
        .files
        .list_files(
            &ProjectId::new("p"),
            ListFiles {
                after: None,
                limit: crate::files::FILE_PAGE.check(3).unwrap(),
                order: ListOrder::Asc,
                purpose: Some(FilePurpose::Vision),
            },
        )
        .await
        .unwrap();
    assert_eq!(vision.data.len(), 3);
    assert!(!vision.has_more, "exactly three vision files: has_more must be false");
    let bad = f
        .files
        .list_files(
            &ProjectId::new("p"),
            ListFiles {
                after: Some("nope".into()),
                limit: crate::files::FILE_PAGE.check(2).unwrap(),
                ..Default::default()
            },
        )
        .await;
    assert!(matches!(bad, Err(FilesError::Invalid { .. })));
}

#[tokio::test]
async fn batch_files_must_be_jsonl_and_sizes_are_enforced_while_streaming() {
    let f = Fixture::new();
    let err = f
        .files
        .create_file(&ProjectId::new("p"), new_file("in.txt", FilePurpose::Batch), body(b"x"))
        .await
        .unwrap_err();
    assert!(err.to_string().contains("Must be .jsonl"), "{err}");
    let mut draft = f.files.start_file(&ProjectId::new("p")).await.unwrap();
    let err = f
        .files
        .write_file_bytes(&mut draft, body(&[0u8; 100]), 10)
        .await
        .unwrap_err();
    assert!(matches!(err, FilesError::TooLarge { .. }));
    f.files.discard_file(&draft).await;
    assert_eq!(f.blob_files_under("projects/p/files"), 0);
}

#[tokio::test]
async fn expired_files_vanish_and_the_sweep_deletes_their_bytes() {
    let f = Fixture::new();
    let new = NewFile {
        filename: "x.txt".into(),
        purpose: FilePurpose::UserData,
        expires_after: Some(ExpiresAfter {
            anchor: "created_at".into(),
            seconds: 3600,
        }),
    };
    let file = f
        .files
        .create_file(&ProjectId::new("p"), new, body(b"bytes"))
        .await
        .unwrap();
    assert_eq!(f.files.sweep(100).await.unwrap().tasks_run, 0, "nothing is due yet");
    f.advance(3601);
    assert!(matches!(
        f.files.get_file(&ProjectId::new("p"), &file.id).await,
        Err(FilesError::NotFound { .. })
    ));
    assert_eq!(f.blob_files_under("projects/p/files"), 1);
    assert_eq!(f.files.sweep(100).await.unwrap().tasks_run, 1);
    assert_eq!(f.blob_files_under("projects/p/files"), 0);
    // A second sweep (or a concurrent one) finds nothing left to do.
    assert_eq!(f.files.sweep(100).await.unwrap().tasks_run, 0);
    let bad = NewFile {
        filename: "x.txt".into(),
        purpose: FilePurpose::UserData,
        expires_after: Some(ExpiresAfter {
            anchor: "created_at".into(),
            seconds: 10,
        }),
    };
    assert!(matches!(
        f.files.create_file(&ProjectId::new("p"), bad, body(b"x")).await,
        Err(FilesError::Invalid { .. })
    ));
}

fn upload_request(bytes: u64) -> CreateUploadRequest {
    CreateUploadRequest {
        filename: "big.jsonl".into(),
        purpose: "batch".into(),
        bytes,
        mime_type: "application/jsonl".into(),
        expires_after: None,
    }
}

#[tokio::test]
async fn uploads_assemble_parts_in_the_given_order_and_check_md5() {
    let f = Fixture::new();
    let upload = f
        .files
        .create_upload(&ProjectId::new("p"), upload_request(6))
        .await
        .unwrap();
    let first = f
        .files
        .add_upload_part(&ProjectId::new("p"), &upload.id, body(b"abc"))
        .await
        .unwrap();
    let second = f
        .files
        .add_upload_part(&ProjectId::new("p"), &upload.id, body(b"def"))
        .await
        .unwrap();
    let order = vec![second.id.clone(), first.id.clone()];
    let err = f
        .files
        .complete_upload(
            &ProjectId::new("p"),
            &upload.id,
            &order,
            Some("00000000000000000000000000000000"),
        )
        .await
        .unwrap_err();
    assert!(
        matches!(err, FilesError::Invalid { param: Some(ref p), .. } if p == "md5"),
        "{err:?}"
    );
    assert_eq!(
        f.files
            .list_files(
                &ProjectId::new("p"),
                ListFiles {
                    limit: crate::files::FILE_PAGE.check(10).unwrap(),
                    ..Default::default()
                }
            )
            .await
            .unwrap()
            .data
            .len(),
        0
    );

    let md5 = hex::encode(<md5::Md5 as md5::Digest>::digest(b"defabc"));
    let done = f
        .files
        .complete_upload(&ProjectId::new("p"), &upload.id, &order, Some(&md5))
        .await
        .unwrap();
    assert_eq!(done.status, "completed");
    let file = done.file.unwrap();
    assert_eq!(read_all(&f.files, "p", &file.id).await, b"defabc");
    assert_eq!(
        f.blob_files_under(&format!("uploads/p/{}", upload.id)),
        0,
        "parts are cleaned up"
    );
    // Nothing more can happen to a completed upload.
    assert!(f
        .files
        .add_upload_part(&ProjectId::new("p"), &upload.id, body(b"x"))
        .await
        .is_err());
    assert!(f.files.cancel_upload(&ProjectId::new("p"), &upload.id).await.is_err());
}

#[tokio::test]
async fn uploads_reject_wrong_sizes_foreign_parts_and_expire() {
    let f = Fixture::new();
    let upload = f
        .files
        .create_upload(&ProjectId::new("p"), upload_request(5))
        .await
        .unwrap();
    let part = f
        .files
        .add_upload_part(&ProjectId::new("p"), &upload.id, body(b"abc"))
        .await
        .unwrap();
    let err = f
        .files
        .complete_upload(&ProjectId::new("p"), &upload.id, std::slice::from_ref(&part.id), None)
        .await
        .unwrap_err();
    assert!(err.to_string().contains("bytes"), "{err}");
    let other = f
        .files
        .create_upload(&ProjectId::new("p"), upload_request(3))
        .await
        .unwrap();
    assert!(f
        .files
        .complete_upload(&ProjectId::new("p"), &other.id, std::slice::from_ref(&part.id), None)
        .await
        .is_err());
    assert!(f
        .files
        .create_upload(&ProjectId::new("p2"), upload_request(1))
        .await
        .is_ok());
    assert!(matches!(
        f.files
            .add_upload_part(&ProjectId::new("p2"), &upload.id, body(b"x"))
            .await,
        Err(FilesError::NotFound { .. })
    ));

    f.advance(3601);
    assert!(f
        .files
        .add_upload_part(&ProjectId::new("p"), &upload.id, body(b"x"))
        .await
        .is_err());
    f.files.sweep(100).await.unwrap();
    assert_eq!(f.blob_files_under(&format!("uploads/p/{}", upload.id)), 0);
}

#[tokio::test]
async fn cancel_discards_parts() {
    let f = Fixture::new();
    let upload = f
        .files
        .create_upload(&ProjectId::new("p"), upload_request(3))
        .await
        .unwrap();
    f.files
        .add_upload_part(&ProjectId::new("p"), &upload.id, body(b"abc"))
        .await
        .unwrap();
    assert_eq!(
        f.files
            .cancel_upload(&ProjectId::new("p"), &upload.id)
            .await
            .unwrap()
            .status,
        "cancelled"
    );
    assert_eq!(f.blob_files_under(&format!("uploads/p/{}", upload.id)), 0);
}

#[tokio::test]
async fn direct_uploads_settle_when_bytes_land_and_vanish_when_they_never_do() {
    let f = Fixture::new();
    let target = f
        .files
        .create_direct_upload(
            &ProjectId::new("p"),
            "d.jsonl".into(),
            FilePurpose::Batch,
            declared(4, None),
            None,
        )
        .await
        .unwrap();
    assert_eq!(target.file.status, "uploaded");
    assert!(target.upload_url.is_none(), "the embedded store has no presigned URLs");
    assert!(
        f.files
            .put_direct_content(&ProjectId::new("p"), &target.file.id, body(b"12345"))
            .await
            .is_err(),
        "more than declared"
    );
    let landed = f
        .files
        .put_direct_content(&ProjectId::new("p"), &target.file.id, body(b"1234"))
        .await
        .unwrap();
    assert_eq!(landed.status, "processed");
    assert_eq!(read_all(&f.files, "p", &landed.id).await, b"1234");

    let abandoned = f
        .files
        .create_direct_upload(
            &ProjectId::new("p"),
            "e.jsonl".into(),
            FilePurpose::Batch,
            declared(4, None),
            None,
        )
        .await
        .unwrap();
    f.advance(2 * 3600);
    f.files.sweep(100).await.unwrap();
    assert!(matches!(
        f.files.get_file(&ProjectId::new("p"), &abandoned.file.id).await,
        Err(FilesError::NotFound { .. })
    ));
    assert_eq!(
        f.files.get_file(&ProjectId::new("p"), &landed.id).await.unwrap().status,
        "processed"
    );
}

fn declared(bytes: u64, sha256: Option<&str>) -> DeclaredBytes {
    DeclaredBytes {
        bytes,
        sha256: sha256.map(str::to_owned),
    }
}

#[tokio::test]
async fn a_direct_upload_with_a_declared_sha256_takes_only_those_bytes() {
    let f = Fixture::new();
    // sha256("1234")
    let digest = "03ac674216f3e15c761ee1a5e255f067953623c8b388b4459e13f978d7c846f4";
    let target = f
        .files
        .create_direct_upload(
            &ProjectId::new("p"),
            "d.jsonl".into(),
            FilePurpose::Batch,
            declared(4, Some(digest)),
            None,
        )
        .await
        .unwrap();
    let err = f
        .files
        .put_direct_content(&ProjectId::new("p"), &target.file.id, body(b"4321"))
        .await
        .unwrap_err();
    assert!(
        matches!(&err, FilesError::Invalid { param, .. } if param.as_deref() == Some("sha256")),
        "{err:?}"
    );
    assert_eq!(
        f.blob_files_under("projects/p/files"),
        0,
        "refused bytes are never visible"
    );
    assert_eq!(
        f.files
            .get_file(&ProjectId::new("p"), &target.file.id)
            .await
            .unwrap()
            .status,
        "uploaded"
    );
    let landed = f
        .files
        .put_direct_content(&ProjectId::new("p"), &target.file.id, body(b"1234"))
        .await
        .unwrap();
    assert_eq!(landed.status, "processed");
}

#[tokio::test]
async fn bytes_that_landed_are_never_replaced_nor_deleted_by_another_put() {
    let f = Fixture::new();
    let target = f
        .files
        .create_direct_upload(
            &ProjectId::new("p"),
            "d.jsonl".into(),
            FilePurpose::Batch,
            declared(4, None),
            None,
        )
        .await
        .unwrap();
    // The bytes land (as through a presigned URL), the status not yet settled.
    let key = format!("projects/p/files/{}", target.file.id);
    f.files.blobs.put(&key, Bytes::from_static(b"good")).await.unwrap();
    for attempt in [&b"evil"[..], &b"far too long"[..]] {
        let err = f
            .files
            .put_direct_content(&ProjectId::new("p"), &target.file.id, body(attempt))
            .await
            .unwrap_err();
        assert!(matches!(&err, FilesError::Invalid { .. }), "{err:?}");
    }
    assert_eq!(read_all(&f.files, "p", &target.file.id).await, b"good");
    assert_eq!(
        f.files
            .get_file(&ProjectId::new("p"), &target.file.id)
            .await
            .unwrap()
            .status,
        "processed"
    );
}

#[tokio::test]
async fn a_malformed_sha256_is_refused_naming_the_field() {
    let f = Fixture::new();
    for bad in ["xyz", "03ac67", &"g".repeat(64)] {
        let err = f
            .files
            .create_direct_upload(
                &ProjectId::new("p"),
                "d.jsonl".into(),
                FilePurpose::Batch,
                declared(4, Some(bad)),
                None,
            )
            .await
            .err()
            .unwrap();
        assert!(
            matches!(&err, FilesError::Invalid { param, .. } if param.as_deref() == Some("sha256")),
            "{bad}: {err:?}"
        );
    }
}

#[tokio::test]
async fn blobs_written_without_a_record_are_swept() {
    let f = Fixture::new();
    let mut draft = f.files.start_file(&ProjectId::new("p")).await.unwrap();
    f.files
        .write_file_bytes(&mut draft, body(b"orphan"), 100)
        .await
        .unwrap();
    // The process dies here: no record, no discard.
    drop(draft);
    assert_eq!(f.blob_files_under("projects/p/files"), 1);
    f.advance(3 * 3600);
    f.files.sweep(100).await.unwrap();
    assert_eq!(f.blob_files_under("projects/p/files"), 0);
}

// Holds: a batch keeps its input's bytes -------------------------------------------------------

async fn batch_file(f: &Fixture) -> (FileObject, String) {
    let file = f
        .files
        .create_file(
            &ProjectId::new("p"),
            new_file("in.jsonl", FilePurpose::Batch),
            body(b"{\"a\":1}\n"),
        )
        .await
        .unwrap();
    let key = format!("projects/p/files/{}", file.id);
    (file, key)
}

#[tokio::test]
async fn a_delete_landing_between_the_check_and_the_hold_is_seen_by_the_holder() {
    let f = Fixture::new();
    let batch_a = BatchId::new("batch_a");
    let (file, key) = batch_file(&f).await;
    let file_id = FileId::new(&file.id);
    // The holder checked the file and writes its hold; the delete comes right after.
    f.files.add_holder(&key, &file.id, "batch_a").await.unwrap();
    f.files.delete_file(&ProjectId::new("p"), &file.id).await.unwrap();
    assert_eq!(f.blob_files_under("projects/p/files"), 1, "the delete saw the hold");
    // The holder's second look finds the file gone: it lets go, and the bytes go.
    assert!(matches!(
        f.files.hold_batch_input(&ProjectId::new("p"), &file_id, &batch_a).await,
        Err(FilesError::NotFound { .. })
    ));
    f.files.release_hold(&key, &file_id, &batch_a).await.unwrap();
    assert_eq!(f.blob_files_under("projects/p/files"), 0);
    assert!(f.files.holders_of(&key).await.unwrap().is_empty());
    assert!(f.files.state.get(holds::HOLD_KIND, &key).await.unwrap().is_none());
}

#[tokio::test]
async fn releasing_before_or_after_the_delete_never_leaves_or_loses_bytes() {
    let f = Fixture::new();
    let (batch_a, batch_b) = (BatchId::new("batch_a"), BatchId::new("batch_b"));
    // Released while the file lives: the bytes stay with the file; its delete removes them.
    let (file, key) = batch_file(&f).await;
    let file_id = FileId::new(&file.id);
    f.files
        .hold_batch_input(&ProjectId::new("p"), &file_id, &batch_a)
        .await
        .unwrap();
    f.files.release_hold(&key, &file_id, &batch_a).await.unwrap();
    assert_eq!(read_all(&f.files, "p", &file.id).await, b"{\"a\":1}\n");
    f.files.delete_file(&ProjectId::new("p"), &file.id).await.unwrap();
    assert_eq!(f.blob_files_under("projects/p/files"), 0);

    // Deleted while held by two: the bytes go with the last release; releasing twice is harmless.
    let (file, key) = batch_file(&f).await;
    let file_id = FileId::new(&file.id);
    f.files
        .hold_batch_input(&ProjectId::new("p"), &file_id, &batch_a)
        .await
        .unwrap();
    f.files
        .hold_batch_input(&ProjectId::new("p"), &file_id, &batch_b)
        .await
        .unwrap();
    f.files
        .hold_batch_input(&ProjectId::new("p"), &file_id, &batch_b)
        .await
        .unwrap();
    f.files.delete_file(&ProjectId::new("p"), &file.id).await.unwrap();
    f.files.release_hold(&key, &file_id, &batch_a).await.unwrap();
    f.files.release_hold(&key, &file_id, &batch_a).await.unwrap();
    assert_eq!(f.blob_files_under("projects/p/files"), 1);
    f.files.release_hold(&key, &file_id, &batch_b).await.unwrap();
    assert_eq!(f.blob_files_under("projects/p/files"), 0);
    f.files.release_hold(&key, &file_id, &batch_b).await.unwrap();
}

#[tokio::test]
async fn an_expired_file_keeps_its_held_bytes_until_release() {
    let f = Fixture::new();
    let batch_a = BatchId::new("batch_a");
    let (file, key) = batch_file(&f).await;
    let file_id = FileId::new(&file.id);
    f.files
        .hold_batch_input(&ProjectId::new("p"), &file_id, &batch_a)
        .await
        .unwrap();
    f.advance(31 * 24 * 3600);
    f.files.sweep(100).await.unwrap();
    assert!(
        f.files.state.get(FILE_KIND, &file.id).await.unwrap().is_none(),
        "expired"
    );
    assert_eq!(f.blob_files_under("projects/p/files"), 1, "held");
    f.files.release_hold(&key, &file_id, &batch_a).await.unwrap();
    assert_eq!(f.blob_files_under("projects/p/files"), 0);
}

#[tokio::test]
async fn an_idempotency_key_gives_the_same_upload_and_completion() {
    let f = Fixture::new();
    let first = f
        .files
        .create_upload_once(&ProjectId::new("p"), upload_request(6), Some("k"))
        .await
        .unwrap();
    let again = f
        .files
        .create_upload_once(&ProjectId::new("p"), upload_request(6), Some("k"))
        .await
        .unwrap();
    assert_eq!(again.id, first.id);
    assert_eq!(again.status, "pending");
    // Same key, other parameters: refused like a batch's; another project is another key.
    let reused = f
        .files
        .create_upload_once(&ProjectId::new("p"), upload_request(7), Some("k"))
        .await;
    assert!(matches!(reused, Err(FilesError::KeyReused)), "{reused:?}");
    let elsewhere = f
        .files
        .create_upload_once(&ProjectId::new("q"), upload_request(6), Some("k"))
        .await
        .unwrap();
    assert_ne!(elsewhere.id, first.id);

    let part = f
        .files
        .add_upload_part(&ProjectId::new("p"), &first.id, body(b"abcdef"))
        .await
        .unwrap();
    let parts = vec![part.id];
    let md5 = hex::encode(<md5::Md5 as md5::Digest>::digest(b"abcdef"));
    let done = f
        .files
        .complete_upload_once(&ProjectId::new("p"), &first.id, &parts, Some(&md5), Some("c"))
        .await
        .unwrap();
    assert_eq!(done.status, "completed");
    // A retried completion answers with the same file instead of "accepts no more changes".
    let retried = f
        .files
        .complete_upload_once(&ProjectId::new("p"), &first.id, &parts, Some(&md5), Some("c"))
        .await
        .unwrap();
    assert_eq!(
        retried.file.as_ref().map(|file| &file.id),
        done.file.as_ref().map(|file| &file.id)
    );
    let other_md5 = f
        .files
        .complete_upload_once(&ProjectId::new("p"), &first.id, &parts, None, Some("c"))
        .await;
    assert!(matches!(other_md5, Err(FilesError::KeyReused)), "{other_md5:?}");
    // A repeated create finds the upload completed, with its file: nothing to send again.
    let repeated = f
        .files
        .create_upload_once(&ProjectId::new("p"), upload_request(6), Some("k"))
        .await
        .unwrap();
    assert_eq!(repeated.status, "completed");
    assert_eq!(repeated.file.map(|file| file.id), done.file.map(|file| file.id));
}
