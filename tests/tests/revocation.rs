//! Revocation takes effect on the next request in every process: two service instances (two
//! authenticators, two webhook-secret signers, each with its own cache) over one SQLite state file.
//! One revokes; the other refuses the key, or stops signing with the secret, on its very next use,
//! with no cache TTL to wait out (every cache here is trusted for an hour).

use nimbus_shared::adapters::embedded::SqliteStateStore;
use nimbus_shared::auth::{ApiKeyService, AuthError, AuthMode, Authenticator};
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
        secrets: WebhookSecrets::new(state, Arc::new(SystemClock), Arc::new(UuidV7Ids)),
        keys,
    }
}

#[tokio::test]
async fn a_key_revoked_in_one_process_is_refused_by_the_other_on_its_next_request() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("state.sqlite3");
    let (admin, api) = (process(&path), process(&path));
    let revoked = admin.keys.create("team-a", None).await.unwrap();
    let kept = admin.keys.create("team-a", None).await.unwrap();
    let revoked_bearer = format!("Bearer {}", revoked.api_key);
    let kept_bearer = format!("Bearer {}", kept.api_key);
    for _ in 0..3 {
        // Served from the other process's cache after the first request.
        assert_eq!(
            api.auth.authenticate(Some(&revoked_bearer)).await.unwrap().project,
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
        api.auth.authenticate(Some(&kept_bearer)).await.unwrap().project,
        "team-a"
    );
}

#[tokio::test]
async fn a_webhook_secret_revoked_in_one_process_never_signs_in_the_other_again() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("state.sqlite3");
    let (api, worker) = (process(&path), process(&path));
    let old = api.secrets.create("team-a").await.unwrap();
    let new = api.secrets.create("team-a").await.unwrap();
    let signing = |secrets: Vec<nimbus_shared::webhooks::SigningSecret>| {
        secrets.iter().map(|s| s.as_str().to_owned()).collect::<Vec<_>>()
    };
    let both = vec![new.secret.clone(), old.secret.clone()];
    for _ in 0..3 {
        assert_eq!(signing(worker.secrets.signing_secrets("team-a").await.unwrap()), both);
    }
    api.secrets.revoke("team-a", &new.id).await.unwrap();
    assert_eq!(
        signing(worker.secrets.signing_secrets("team-a").await.unwrap()),
        vec![old.secret.clone()]
    );
    api.secrets.revoke("team-a", &old.id).await.unwrap();
    assert!(worker.secrets.signing_secrets("team-a").await.unwrap().is_empty());
}
