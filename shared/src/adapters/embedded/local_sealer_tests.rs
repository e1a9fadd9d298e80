//! The key file: made on first use, private, kept across restarts, refused when it is not a key.
//! (The sealing behaviour itself is the port's contract: tests/src/sealer_contract.rs.)

use super::*;
use crate::ports::{open_json, seal_json};
use std::collections::HashMap;

#[tokio::test]
async fn the_key_file_is_made_on_first_use_and_kept_across_restarts() {
    let dir = tempfile::tempdir().unwrap();
    let sealer = LocalSealer::in_data_dir(dir.path());
    assert!(!sealer.key_path().exists(), "nothing is written before first use");

    let credentials = HashMap::from([("openai_api_key".to_owned(), "sk-test".to_owned())]);
    let sealed = seal_json(&sealer, "batch-1", &credentials).await.unwrap();
    let key = std::fs::read(dir.path().join(SEALING_KEY_FILE)).unwrap();
    assert_eq!(key.len(), KEY_LEN);
    assert!(!sealed.contains("sk-test"));

    // A new process on the same data directory reads the same key.
    let restarted = LocalSealer::in_data_dir(dir.path());
    assert_eq!(open_json(&restarted, "batch-1", &sealed).await.unwrap(), credentials);
    assert_eq!(std::fs::read(dir.path().join(SEALING_KEY_FILE)).unwrap(), key);
    // No temporary files are left behind.
    assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 1);
}

#[cfg(unix)]
#[tokio::test]
async fn the_key_file_is_readable_by_its_owner_only() {
    use std::os::unix::fs::PermissionsExt as _;
    let dir = tempfile::tempdir().unwrap();
    let sealer = LocalSealer::in_data_dir(dir.path());
    sealer.seal("c", b"x").await.unwrap();
    let mode = std::fs::metadata(sealer.key_path()).unwrap().permissions().mode();
    assert_eq!(mode & 0o777, 0o600, "mode {mode:o}");
}

#[tokio::test]
async fn a_value_sealed_under_another_key_does_not_open() {
    let (first, second) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let sealed = LocalSealer::in_data_dir(first.path())
        .seal("c", b"secret")
        .await
        .unwrap();
    let err = LocalSealer::in_data_dir(second.path())
        .open("c", &sealed)
        .await
        .unwrap_err();
    assert!(matches!(err, SealError::Corrupt(_)), "{err:?}");
}

#[tokio::test]
async fn a_key_file_of_the_wrong_length_is_refused_and_left_alone() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join(SEALING_KEY_FILE);
    std::fs::write(&path, b"too short").unwrap();
    let sealer = LocalSealer::in_data_dir(dir.path());
    let err = sealer.seal("c", b"x").await.unwrap_err();
    let SealError::Unavailable(message) = err else {
        panic!("expected Unavailable, got {err:?}");
    };
    assert!(
        message.contains("sealing.key") && message.contains("9 bytes"),
        "{message}"
    );
    assert_eq!(std::fs::read(&path).unwrap(), b"too short");
}

#[tokio::test]
async fn concurrent_first_uses_agree_on_one_key() {
    let dir = tempfile::tempdir().unwrap();
    let sealers: Vec<_> = (0..8).map(|_| LocalSealer::in_data_dir(dir.path())).collect();
    let sealed = futures::future::join_all(sealers.iter().map(|sealer| sealer.seal("c", b"same"))).await;
    for value in sealed {
        let value = value.unwrap();
        for sealer in &sealers {
            assert_eq!(sealer.open("c", &value).await.unwrap(), b"same");
        }
    }
}

#[tokio::test]
async fn malformed_values_are_corrupt() {
    let dir = tempfile::tempdir().unwrap();
    let sealer = LocalSealer::in_data_dir(dir.path());
    for value in ["", "v1.", "v1.!!!", "v2.AAAA", "kms1.AAAA", "v1.AAAA"] {
        let err = sealer.open("c", value).await.unwrap_err();
        assert!(matches!(err, SealError::Corrupt(_)), "{value}: {err:?}");
    }
}
