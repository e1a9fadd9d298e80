use super::*;
use crate::ports::ProjectId;
use crate::ports::UuidV7Ids;
use crate::webhooks::standard_signature;
use crate::webhooks::test_support::{memory_state, test_sealer, ManualClock};

struct Fixture {
    state: Arc<dyn StateStore>,
    clock: Arc<ManualClock>,
    sealer: Arc<dyn CredentialSealer>,
    secrets: WebhookSecrets,
}

impl Fixture {
    fn new() -> Self {
        let state = memory_state();
        let clock = ManualClock::new();
        let sealer = test_sealer();
        let secrets = WebhookSecrets::new(
            Arc::clone(&state),
            clock.clone(),
            Arc::new(UuidV7Ids),
            Arc::clone(&sealer),
        );
        Self {
            state,
            clock,
            sealer,
            secrets,
        }
    }

    /// Another process over the same storage (its own cache).
    fn other_process(&self) -> WebhookSecrets {
        WebhookSecrets::new(
            Arc::clone(&self.state),
            self.clock.clone(),
            Arc::new(UuidV7Ids),
            Arc::clone(&self.sealer),
        )
    }

    fn now(&self) -> i64 {
        self.clock.now_unix_ms()
    }
}

fn strings(secrets: &[SigningSecret]) -> Vec<String> {
    secrets.iter().map(|s| s.as_str().to_owned()).collect()
}

#[tokio::test]
async fn a_new_secret_is_shown_once_then_listed_masked() {
    let f = Fixture::new();
    let created = f.secrets.create(&ProjectId::new("p1")).await.unwrap();
    assert!(created.id.starts_with("wsec_"));
    assert_eq!(created.object, "webhook_secret");
    assert!(created.secret.starts_with("whsec_"));
    assert_eq!(created.created_at, ManualClock::START_MS / 1000);

    let listed = f.secrets.list(&ProjectId::new("p1")).await.unwrap();
    assert_eq!(listed.len(), 1);
    let summary = &listed[0];
    assert_eq!(summary.id, created.id);
    assert_eq!(summary.expires_at, None);
    assert!(summary.secret.starts_with("whsec_"));
    assert_ne!(summary.secret, created.secret);
    let shown = summary.secret.trim_end_matches('…').trim_end_matches("...");
    assert!(shown.len() < 16, "masked too little: {}", summary.secret);
    assert_eq!(
        strings(&f.secrets.signing(&ProjectId::new("p1"), f.now()).await.unwrap()),
        vec![created.secret]
    );
}

#[tokio::test]
async fn a_new_secret_rotates_the_old_one_out_after_24_hours() {
    let f = Fixture::new();
    let old = f.secrets.create(&ProjectId::new("p1")).await.unwrap();
    f.clock.advance_ms(5_000);
    let rotated_at = f.now();
    let new = f.secrets.create(&ProjectId::new("p1")).await.unwrap();

    // Both sign during the overlap, newest first.
    let listed = f.secrets.list(&ProjectId::new("p1")).await.unwrap();
    let ids: Vec<_> = listed.iter().map(|s| s.id.as_str()).collect();
    assert_eq!(ids, [new.id.as_str(), old.id.as_str()]);
    let overlap_end_ms = rotated_at + ROTATION_OVERLAP_MS;
    assert_eq!(listed[0].expires_at, None);
    assert_eq!(listed[1].expires_at, Some(overlap_end_ms / 1000));
    let both = vec![new.secret.clone(), old.secret.clone()];
    assert_eq!(
        strings(
            &f.secrets
                .signing(&ProjectId::new("p1"), overlap_end_ms - 1)
                .await
                .unwrap()
        ),
        both
    );

    // The old record carries its TTL for the store.
    let record = f.state.get(SECRET_KIND, &old.id).await.unwrap().unwrap();
    assert_eq!(record.expires_at, Some(overlap_end_ms / 1000 + 1));

    // Once expired it neither signs nor lists (even from a cache read during the overlap).
    assert_eq!(
        strings(&f.secrets.signing(&ProjectId::new("p1"), overlap_end_ms).await.unwrap()),
        vec![new.secret.clone()]
    );
    f.clock.advance_ms(ROTATION_OVERLAP_MS);
    let listed = f.secrets.list(&ProjectId::new("p1")).await.unwrap();
    assert_eq!(listed.len(), 1);
    assert_eq!(listed[0].id, new.id);
    assert_eq!(
        strings(&f.other_process().signing(&ProjectId::new("p1"), f.now()).await.unwrap()),
        vec![new.secret]
    );
}

#[tokio::test]
async fn a_third_secret_does_not_extend_the_second_ones_expiry() {
    let f = Fixture::new();
    let first = f.secrets.create(&ProjectId::new("p1")).await.unwrap();
    let first_expiry = (f.now() + ROTATION_OVERLAP_MS) / 1000;
    f.secrets.create(&ProjectId::new("p1")).await.unwrap();
    f.clock.advance_ms(3_600_000);
    f.secrets.create(&ProjectId::new("p1")).await.unwrap();
    let listed = f.secrets.list(&ProjectId::new("p1")).await.unwrap();
    assert_eq!(listed.len(), 3);
    let first_listed = listed.iter().find(|s| s.id == first.id).unwrap();
    assert_eq!(first_listed.expires_at, Some(first_expiry));
}

#[tokio::test]
async fn revoking_stops_signing_and_hides_the_secret() {
    let f = Fixture::new();
    let old = f.secrets.create(&ProjectId::new("p1")).await.unwrap();
    let new = f.secrets.create(&ProjectId::new("p1")).await.unwrap();
    let revoked = f.secrets.revoke(&ProjectId::new("p1"), &new.id).await.unwrap();
    assert_eq!(
        revoked,
        RevokedSecret {
            id: new.id.clone(),
            object: "webhook_secret",
            deleted: true
        }
    );
    let listed = f.secrets.list(&ProjectId::new("p1")).await.unwrap();
    assert_eq!(
        listed.iter().map(|s| s.id.as_str()).collect::<Vec<_>>(),
        [old.id.as_str()]
    );
    assert_eq!(
        strings(&f.secrets.signing(&ProjectId::new("p1"), f.now()).await.unwrap()),
        vec![old.secret]
    );
    // The store may remove a revoked record at once.
    let record = f.state.get(SECRET_KIND, &new.id).await.unwrap().unwrap();
    assert_eq!(record.expires_at, Some(f.now() / 1000));
    // Revoking again, or an unknown id, is not found.
    for id in [new.id.as_str(), "wsec_nope"] {
        let err = f.secrets.revoke(&ProjectId::new("p1"), id).await.unwrap_err();
        assert!(matches!(err, WebhooksError::NotFound { .. }), "{err:?}");
    }
}

#[tokio::test]
async fn projects_never_see_or_revoke_each_others_secrets() {
    let f = Fixture::new();
    let theirs = f.secrets.create(&ProjectId::new("p1")).await.unwrap();
    assert!(f.secrets.list(&ProjectId::new("p2")).await.unwrap().is_empty());
    assert!(f
        .secrets
        .signing(&ProjectId::new("p2"), f.now())
        .await
        .unwrap()
        .is_empty());
    let err = f.secrets.revoke(&ProjectId::new("p2"), &theirs.id).await.unwrap_err();
    assert!(matches!(err, WebhooksError::NotFound { .. }), "{err:?}");
    // A new secret in p2 does not rotate p1's.
    f.secrets.create(&ProjectId::new("p2")).await.unwrap();
    assert_eq!(f.secrets.list(&ProjectId::new("p1")).await.unwrap()[0].expires_at, None);
    assert_eq!(
        f.secrets.signing(&ProjectId::new("p1"), f.now()).await.unwrap().len(),
        1
    );
}

#[tokio::test]
async fn another_process_stops_signing_with_a_revoked_secret_at_once() {
    let f = Fixture::new();
    let old = f.secrets.create(&ProjectId::new("p1")).await.unwrap();
    let created = f.secrets.create(&ProjectId::new("p1")).await.unwrap();
    let mine = f.secrets.create(&ProjectId::new("p2")).await.unwrap();
    let worker = f.other_process();
    assert_eq!(worker.signing_secrets(&ProjectId::new("p1")).await.unwrap().len(), 2);
    assert_eq!(worker.signing_secrets(&ProjectId::new("p2")).await.unwrap().len(), 1);
    f.secrets.revoke(&ProjectId::new("p1"), &created.id).await.unwrap();
    // Both processes know on their next use, with no clock moving.
    for process in [&f.secrets, &worker] {
        assert_eq!(
            strings(&process.signing_secrets(&ProjectId::new("p1")).await.unwrap()),
            vec![old.secret.clone()]
        );
    }
    // Another project's cache is untouched.
    assert_eq!(
        strings(&worker.signing_secrets(&ProjectId::new("p2")).await.unwrap()),
        vec![mine.secret]
    );
}

#[tokio::test]
async fn live_secrets_are_capped_per_project() {
    let f = Fixture::new();
    for _ in 0..MAX_LIVE_SECRETS {
        f.secrets.create(&ProjectId::new("p1")).await.unwrap();
    }
    let err = f.secrets.create(&ProjectId::new("p1")).await.unwrap_err();
    assert!(matches!(err, WebhooksError::LimitReached { .. }), "{err:?}");
    // Once the rotated ones expire there is room again.
    f.clock.advance_ms(ROTATION_OVERLAP_MS);
    f.secrets.create(&ProjectId::new("p1")).await.unwrap();
    assert!(f.secrets.create(&ProjectId::new("bad project")).await.is_err());
}

#[tokio::test]
async fn a_secret_is_stored_sealed_to_its_record_and_signs_as_created() {
    let f = Fixture::new();
    let created = f.secrets.create(&ProjectId::new("p1")).await.unwrap();
    let record = f.state.get(SECRET_KIND, &created.id).await.unwrap().unwrap();
    let stored = record.body.to_string();
    assert!(!stored.contains(&created.secret["whsec_".len()..]), "{stored}");
    assert!(
        stored.contains("\"sealed\"") && stored.contains("\"masked\""),
        "{stored}"
    );
    // Another process (same store and key) opens it: the receiver's signatures are unchanged.
    let signing = f.other_process().signing(&ProjectId::new("p1"), f.now()).await.unwrap();
    assert_eq!(strings(&signing), vec![created.secret.clone()]);
    let body = br#"{"ok":true}"#;
    let expected = standard_signature(&[SigningSecret::parse(&created.secret).unwrap()], "msg_1", 1, body);
    assert_eq!(standard_signature(&signing, "msg_1", 1, body), expected);

    // The sealed value copied into another secret's record does not open there.
    let other = f.secrets.create(&ProjectId::new("p2")).await.unwrap();
    let mut copied = f.state.get(SECRET_KIND, &other.id).await.unwrap().unwrap();
    copied.body = record.body.clone();
    copied.version += 1;
    f.state.update(&copied, copied.version - 1).await.unwrap();
    assert!(f.other_process().signing(&ProjectId::new("p2"), f.now()).await.is_err());
}

#[tokio::test]
async fn a_secret_stored_before_sealing_signs_and_is_sealed_when_listed() {
    let f = Fixture::new();
    let created = f.secrets.create(&ProjectId::new("p1")).await.unwrap();
    let mut record = f.state.get(SECRET_KIND, &created.id).await.unwrap().unwrap();
    // As an older version stored it: the secret in plain text.
    record.body = serde_json::json!({
        "secret": created.secret,
        "created_at_ms": f.now(),
        "expires_at_ms": null,
        "revoked": false,
    });
    record.version += 1;
    f.state.update(&record, record.version - 1).await.unwrap();
    let signing = f.other_process().signing(&ProjectId::new("p1"), f.now()).await.unwrap();
    assert_eq!(strings(&signing), vec![created.secret.clone()]);
    let listed = f.secrets.list(&ProjectId::new("p1")).await.unwrap();
    assert_eq!(
        listed[0].secret,
        SigningSecret::parse(&created.secret).unwrap().masked()
    );
    let stored = f
        .state
        .get(SECRET_KIND, &created.id)
        .await
        .unwrap()
        .unwrap()
        .body
        .to_string();
    assert!(!stored.contains(&created.secret["whsec_".len()..]), "{stored}");
    let signing = f.other_process().signing(&ProjectId::new("p1"), f.now()).await.unwrap();
    assert_eq!(strings(&signing), vec![created.secret]);
}
