//! A forged API key costs no storage read: every key carries a tag (an HMAC under the deployment's
//! tag secret, read once per process), checked before the key record. Proved by counting every
//! `StateStore` call of an "API process" over the embedded store and over DynamoDB (moto), while an
//! "admin process" mints keys over the same store.

use async_trait::async_trait;
use nimbus_integration_tests::moto::{create_state_table, MotoServer};
use nimbus_shared::adapters::aws::DynamoDbStateStore;
use nimbus_shared::adapters::embedded::SqliteStateStore;
use nimbus_shared::auth::{ApiKeyService, AuthError, AuthMode, Authenticator, KeyTags, UntaggedKeys};
use nimbus_shared::ports::ProjectId;
use nimbus_shared::ports::{ListQuery, Page, Record, StateStore, StorageError, SystemClock, UuidV7Ids};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

/// Counts every call (reads and writes alike) it passes on.
struct CountingState {
    inner: Arc<dyn StateStore>,
    calls: AtomicUsize,
}

impl CountingState {
    fn calls(&self) -> usize {
        self.calls.load(Ordering::SeqCst)
    }

    fn count(&self) {
        self.calls.fetch_add(1, Ordering::SeqCst);
    }
}

#[async_trait]
impl StateStore for CountingState {
    async fn create(&self, record: &Record) -> Result<(), StorageError> {
        self.count();
        self.inner.create(record).await
    }

    async fn get(&self, kind: &str, id: &str) -> Result<Option<Record>, StorageError> {
        self.count();
        self.inner.get(kind, id).await
    }

    async fn update(&self, record: &Record, expected_version: u64) -> Result<(), StorageError> {
        self.count();
        self.inner.update(record, expected_version).await
    }

    async fn update_all(&self, updates: &[(Record, u64)]) -> Result<(), StorageError> {
        self.count();
        self.inner.update_all(updates).await
    }

    async fn delete(&self, kind: &str, id: &str, expected_version: Option<u64>) -> Result<bool, StorageError> {
        self.count();
        self.inner.delete(kind, id, expected_version).await
    }

    async fn list_by_owner(&self, query: &ListQuery) -> Result<Page, StorageError> {
        self.count();
        self.inner.list_by_owner(query).await
    }

    async fn list_heads_by_owner(&self, query: &ListQuery) -> Result<Page, StorageError> {
        self.count();
        self.inner.list_heads_by_owner(query).await
    }
}

fn keys_over(state: Arc<dyn StateStore>, untagged: UntaggedKeys) -> ApiKeyService {
    let tags = Arc::new(KeyTags::new(Arc::clone(&state), untagged));
    ApiKeyService::new(state, Arc::new(SystemClock), Arc::new(UuidV7Ids)).with_tags(tags)
}

/// An API process (a fresh one: nothing read yet) over `shared`, and the count of its store calls.
fn counted_api(shared: &Arc<dyn StateStore>, untagged: UntaggedKeys) -> (Arc<CountingState>, Authenticator) {
    let counted = Arc::new(CountingState {
        inner: Arc::clone(shared),
        calls: AtomicUsize::new(0),
    });
    let auth = Authenticator::new(
        keys_over(counted.clone(), untagged),
        AuthMode::Required,
        Duration::from_secs(3600),
    );
    (counted, auth)
}

/// Forgeries of `key` (a real, tagged key): a wrong tag, another key's tag, no tag, a made-up id.
fn forgeries(key: &str, other: &str) -> Vec<String> {
    let (body, tag) = key.split_once('.').unwrap();
    let flipped = if tag.starts_with('a') { 'b' } else { 'a' };
    vec![
        format!("{body}.{flipped}{}", &tag[1..]),
        format!("{body}.{}", other.split_once('.').unwrap().1),
        format!("{body}.{}", "0".repeat(32)),
        format!("{body}."),
        body.to_owned(),
        format!("nmb_{}_{}.{}", "f".repeat(32), "s".repeat(43), "0".repeat(32)),
        format!("nmb_{}_madeup", "e".repeat(32)),
    ]
}

async fn forged_keys_cost_no_read(shared: Arc<dyn StateStore>) {
    let admin = keys_over(Arc::clone(&shared), UntaggedKeys::Refuse);
    let real = admin.create(&ProjectId::new("team-a"), None).await.unwrap();
    let other = admin.create(&ProjectId::new("team-b"), None).await.unwrap();

    let (counted, api) = counted_api(&shared, UntaggedKeys::Refuse);
    // The process reads the tag secret once, with its first key (a forged one here).
    let forged = forgeries(&real.api_key, &other.api_key);
    assert_eq!(
        api.authenticate(Some(&format!("Bearer {}", forged[0]))).await,
        Err(AuthError::Invalid)
    );
    assert_eq!(
        counted.calls(),
        1,
        "the first key of a process reads the tag secret, once"
    );
    let before = counted.calls();
    for _ in 0..3 {
        for key in &forged {
            assert_eq!(
                api.authenticate(Some(&format!("Bearer {key}"))).await,
                Err(AuthError::Invalid),
                "{key}"
            );
        }
    }
    assert_eq!(
        counted.calls(),
        before,
        "a forged key must be refused without any storage read"
    );
    // A real key is read as before (record and revocation version), and revocation still works.
    let bearer = format!("Bearer {}", real.api_key);
    assert_eq!(
        api.authenticate(Some(&bearer)).await.unwrap().project.as_str(),
        "team-a"
    );
    assert!(counted.calls() > before);
    admin.revoke(&real.info.key_id).await.unwrap();
    assert_eq!(api.authenticate(Some(&bearer)).await, Err(AuthError::Invalid));
}

async fn untagged_keys_are_a_migration_switch(shared: Arc<dyn StateStore>) {
    let admin = keys_over(Arc::clone(&shared), UntaggedKeys::Refuse);
    let created = admin.create(&ProjectId::new("team-c"), None).await.unwrap();
    // What a key minted before this change looks like: the same record, no tag.
    let legacy = format!("Bearer {}", created.api_key.split_once('.').unwrap().0);
    let (counted, refusing) = counted_api(&shared, UntaggedKeys::Refuse);
    assert_eq!(refusing.authenticate(Some(&legacy)).await, Err(AuthError::Invalid));
    assert_eq!(counted.calls(), 0, "an untagged key is refused with no read by default");
    let (_, accepting) = counted_api(&shared, UntaggedKeys::Accept);
    assert_eq!(
        accepting.authenticate(Some(&legacy)).await.unwrap().project.as_str(),
        "team-c"
    );
}

#[tokio::test]
async fn forged_keys_cost_no_read_on_the_embedded_store() {
    let dir = tempfile::tempdir().unwrap();
    let shared: Arc<dyn StateStore> = Arc::new(SqliteStateStore::open(&dir.path().join("state.sqlite3")).unwrap());
    forged_keys_cost_no_read(Arc::clone(&shared)).await;
    untagged_keys_are_a_migration_switch(shared).await;
}

#[tokio::test]
async fn forged_keys_cost_no_read_on_dynamodb() {
    let moto = MotoServer::start().unwrap();
    let config = moto.sdk_config().await;
    create_state_table(&config, "nimbus-keys").await.unwrap();
    let shared: Arc<dyn StateStore> = Arc::new(DynamoDbStateStore::new(&config, "nimbus-keys"));
    forged_keys_cost_no_read(Arc::clone(&shared)).await;
    untagged_keys_are_a_migration_switch(shared).await;
}

#[tokio::test]
async fn concurrent_first_mints_agree_on_one_tag_secret() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("state.sqlite3");
    let minters: Vec<ApiKeyService> = (0..4)
        .map(|_| {
            let state: Arc<dyn StateStore> = Arc::new(SqliteStateStore::open(&path).unwrap());
            keys_over(state, UntaggedKeys::Refuse)
        })
        .collect();
    let project = ProjectId::new("p");
    let created = futures::future::join_all(minters.iter().map(|keys| keys.create(&project, None))).await;
    let checker = keys_over(Arc::new(SqliteStateStore::open(&path).unwrap()), UntaggedKeys::Refuse);
    for key in created {
        assert!(checker.verify(&key.unwrap().api_key).await.unwrap().is_some());
    }
}
