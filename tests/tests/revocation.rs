//! Revocation takes effect on the next request in every process: two service instances (two
//! authenticators, two webhook-secret signers, each with its own cache) over one SQLite state file.
//! One revokes; the other refuses the key, or stops signing with the secret, on its very next use,
//! with no cache TTL to wait out (every cache here is trusted for an hour).

use nimbus_shared::adapters::embedded::{LocalSealer, SqliteStateStore};
use nimbus_shared::auth::{ApiKeyService, AuthError, AuthMode, Authenticator};
use nimbus_shared::ports::ProjectId;
use nimbus_shared::ports::{StateStore, SystemClock, UuidV7Ids};
use nimbus_shared::webhooks::{SecretSource, WebhookSecrets};
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

/// One "process": its own connection to the shared state file and its own caches.
struct Process {
    keys: ApiKeyService,
    auth: Authenticator,
    secrets: WebhookSecrets,
}

fn process(path: &Path) -> Process {
    let state: Arc<dyn StateStore> = Arc::new(SqliteStateStore::open(path).unwrap());
    let keys = ApiKeyService::new(Arc::clone(&state), Arc::new(SystemClock), Arc::new(UuidV7Ids));
    Process {
        auth: Authenticator::new(keys.clone(), AuthMode::Required, Duration::from_secs(3600)),
        secrets: WebhookSecrets::new(
            state,
            Arc::new(SystemClock),
            Arc::new(UuidV7Ids),
            Arc::new(LocalSealer::in_data_dir(path.parent().unwrap())),
        ),
        keys,
    }
}

#[tokio::test]
async fn a_key_revoked_in_one_process_is_refused_by_the_other_on_its_next_request() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("state.sqlite3");
    let (admin, api) = (process(&path), process(&path));
    let revoked = admin.keys.create(&ProjectId::new("team-a"), None).await.unwrap();
    let kept = admin.keys.create(&ProjectId::new("team-a"), None).await.unwrap();
    let revoked_bearer = format!("Bearer {}", revoked.api_key);
    let kept_bearer = format!("Bearer {}", kept.api_key);
    for _ in 0..3 {
        // Served from the other process's cache after the first request.
        assert_eq!(
            api.auth
                .authenticate(Some(&revoked_bearer))
                .await
                .unwrap()
                .project
                .as_str(),
            "team-a"
        );
        assert!(api.auth.authenticate(Some(&kept_bearer)).await.is_ok());
    }
    admin.keys.revoke(&revoked.info.key_id).await.unwrap();
    assert_eq!(
        api.auth.authenticate(Some(&revoked_bearer)).await,
        Err(AuthError::Invalid)
    );
    assert_eq!(
        admin.auth.authenticate(Some(&revoked_bearer)).await,
        Err(AuthError::Invalid)
    );
    // The project's other key is unaffected.
    assert_eq!(
        api.auth
            .authenticate(Some(&kept_bearer))
            .await
            .unwrap()
            .project
            .as_str(),
        "team-a"
    );
}

#[tokio::test]
async fn a_webhook_secret_revoked_in_one_process_never_signs_in_the_other_again() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("state.sqlite3");
    let (api, worker) = (process(&path), process(&path));
    let old = api.secrets.create(&ProjectId::new("team-a")).await.unwrap();
    let new = api.secrets.create(&ProjectId::new("team-a")).await.unwrap();
    let signing = |secrets: Vec<nimbus_shared::webhooks::SigningSecret>| {
        secrets.iter().map(|s| s.as_str().to_owned()).collect::<Vec<_>>()
    };
    let both = vec![new.secret.clone(), old.secret.clone()];
    for _ in 0..3 {
        assert_eq!(
            signing(worker.secrets.signing_secrets(&ProjectId::new("team-a")).await.unwrap()),
            both
        );
    }
    api.secrets.revoke(&ProjectId::new("team-a"), &new.id).await.unwrap();
    assert_eq!(
        signing(worker.secrets.signing_secrets(&ProjectId::new("team-a")).await.unwrap()),
        vec![old.secret.clone()]
    );
    api.secrets.revoke(&ProjectId::new("team-a"), &old.id).await.unwrap();
    assert!(worker
        .secrets
        .signing_secrets(&ProjectId::new("team-a"))
        .await
        .unwrap()
        .is_empty());
}

#[tokio::test]
async fn a_queued_async_request_of_a_revoked_key_fails_unrun_with_api_key_revoked() {
    use nimbus_integration_tests::async_harness::{project, settings, submission, AsyncHarness};
    use nimbus_shared::ports::JobOutcome;

    let h = AsyncHarness::embedded(settings());
    let path = h.dir.as_ref().unwrap().path().join("state.sqlite3");
    // The API process that takes the requests and revokes the key: another connection.
    let api = process(&path);
    let revoked = api.keys.create(&project(), None).await.unwrap().info.key_id;
    let kept = api.keys.create(&project(), None).await.unwrap().info.key_id;
    let submit = |key: String| {
        let serde_json::Value::Object(body) = submission("hi", serde_json::json!({})) else {
            panic!("a submission is an object")
        };
        let async_api = std::sync::Arc::clone(&h.api);
        async move { async_api.submit_by(&project(), Some(&key), body, None).await.unwrap() }
    };
    let doomed = submit(revoked.clone()).await;
    let fine = submit(kept).await;
    api.keys.revoke(&revoked).await.unwrap();

    assert_eq!(h.run_request(&doomed).await, JobOutcome::Done);
    let view = h.view(&doomed).await;
    assert_eq!(view.status, "FAILED");
    assert_eq!(view.errors[0].code, "API_KEY_REVOKED");
    assert!(view.attempts.is_empty());
    assert_eq!(h.model.calls(), 0, "never run");
    // A redelivered message changes nothing (one end, one webhook at most).
    assert_eq!(h.run_request(&doomed).await, JobOutcome::Done);
    assert_eq!(h.view(&doomed).await.errors.len(), 1);

    assert_eq!(h.run_request(&fine).await, JobOutcome::Done);
    assert_eq!(h.view(&fine).await.status, "SUCCEEDED");
    assert_eq!(h.model.calls(), 1);
}

#[tokio::test]
async fn a_batch_of_a_revoked_key_fails_its_unrun_lines_with_api_key_revoked_once_each() {
    use nimbus_integration_tests::batch_harness::{custom_ids, lines_for, project, settings, Harness, MODEL};

    let (h, provider) = Harness::with_model(settings(), Duration::ZERO);
    let api = process(&h.dir.path().join("state.sqlite3"));
    let revoked = api.keys.create(&project(), None).await.unwrap().info.key_id;
    let kept = api.keys.create(&project(), None).await.unwrap().info.key_id;
    let ids = custom_ids(25, None);
    let create = |key: String| {
        let lines = lines_for(MODEL, &ids);
        let (h, batches) = (&h, std::sync::Arc::clone(&h.api));
        async move {
            let file = h.upload(&lines).await;
            batches
                .create_batch_by(&project(), Some(&key), Harness::create_request(&file.id), None)
                .await
                .unwrap()
        }
    };
    let doomed = create(revoked.clone()).await;
    api.keys.revoke(&revoked).await.unwrap();
    let doomed = h.run_to_end(&doomed.id).await;
    let results = h.results(&doomed).await;
    results.assert_each_once(&ids);
    assert_eq!(results.not_run_with("api_key_revoked").len(), ids.len());
    assert_eq!((doomed.request_counts.completed, doomed.request_counts.failed), (0, 25));
    assert!(provider.calls().is_empty(), "nothing ran: {:?}", provider.calls());

    // Another key of the project is not affected.
    let fine = create(kept).await;
    let fine = h.run_to_end(&fine.id).await;
    assert_eq!((fine.request_counts.completed, fine.request_counts.failed), (25, 0));
}
