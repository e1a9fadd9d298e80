//! Per-request authentication. A key without its tag is refused with no read at all (see
//! [`super::key_tags`]). A verified key is cached only for its project's revocation version
//! (see [`super::revocations`]): a hot request costs one read (that version), and a key revoked in
//! any process is refused on the next request here.

use super::keys::{ApiKeyService, KEY_PREFIX};
use super::revoked_keys::RevokedKeys;
use crate::ports::ProjectId;
use sha2::{Digest, Sha256};
use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// How requests are authenticated.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AuthMode {
    /// Every request needs a valid key (Lambda, or a server on a non-loopback address).
    Required,
    /// Open (project `default`) while no key has ever been created; keys are required for good
    /// once one has, revoked or not (key records are kept when revoked, so revoking every key
    /// never reopens the server). A key that is presented is checked even while open: a revoked
    /// or unknown `nmb_` key is refused. Only for a local server bound to loopback.
    OpenWhenNoKeys,
}

/// Who is calling.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Principal {
    pub project: ProjectId,
    /// `None` when the server is open.
    pub key_id: Option<String>,
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum AuthError {
    #[error("You didn't provide an API key. Provide it in the Authorization header as `Bearer <key>`.")]
    Missing,
    #[error("Incorrect API key provided.")]
    Invalid,
    #[error("authentication backend failed: {0}")]
    Backend(String),
}

/// Project used when the local server runs open.
pub const OPEN_PROJECT: &str = "default";
const CACHE_LIMIT: usize = 10_000;

/// What is known of a presented key (by the SHA-256 of the whole key).
#[derive(Clone)]
enum Checked {
    /// Unknown, wrong secret or revoked: stays so (keys are never unrevoked), kept for the TTL.
    Invalid { at: Instant },
    /// Valid while its project's revocation version is still `version` (and for the TTL at most).
    Valid {
        at: Instant,
        principal: Principal,
        version: u64,
    },
}

pub struct Authenticator {
    keys: ApiKeyService,
    mode: AuthMode,
    ttl: Duration,
    verified: Mutex<HashMap<String, Checked>>,
    /// Keys by id, for open streams.
    revoked: RevokedKeys,
    /// When the store was last seen without any key (open mode only).
    no_keys_seen: Mutex<Option<Instant>>,
    /// Latched once a key has been seen: closed for good (keys are never deleted).
    closed: AtomicBool,
}

impl Authenticator {
    /// `ttl` bounds how long a new key takes to be required (open mode) and how long a verified
    /// key is trusted without reading it again; revocation never waits for it.
    pub fn new(keys: ApiKeyService, mode: AuthMode, ttl: Duration) -> Self {
        Self {
            revoked: RevokedKeys::over(keys.clone()),
            keys,
            mode,
            ttl,
            verified: Mutex::new(HashMap::new()),
            no_keys_seen: Mutex::new(None),
            closed: AtomicBool::new(mode == AuthMode::Required),
        }
    }

    pub fn mode(&self) -> AuthMode {
        self.mode
    }

    /// Whether the key `key_id` was revoked since it was checked (one read when known): what an
    /// open stream asks now and then.
    pub(crate) async fn key_revoked(&self, key_id: &str) -> Result<bool, AuthError> {
        self.revoked
            .is_revoked(key_id)
            .await
            .map_err(|e| AuthError::Backend(e.to_string()))
    }

    /// Whether the server is still open: no key was ever created. Latches closed.
    async fn is_open(&self) -> Result<bool, AuthError> {
        if self.closed.load(Ordering::Acquire) {
            return Ok(false);
        }
        if let Ok(seen) = self.no_keys_seen.lock() {
            if seen.is_some_and(|at| at.elapsed() < self.ttl) {
                return Ok(true);
            }
        }
        let created = self
            .keys
            .any_created()
            .await
            .map_err(|e| AuthError::Backend(e.to_string()))?;
        if created {
            if !self.closed.swap(true, Ordering::AcqRel) {
                tracing::warn!("auth: an API key exists now; keys are required from here on, for good");
            }
            return Ok(false);
        }
        if let Ok(mut seen) = self.no_keys_seen.lock() {
            *seen = Some(Instant::now());
        }
        Ok(true)
    }

    /// Authenticate from the `Authorization` header value.
    pub async fn authenticate(&self, authorization: Option<&str>) -> Result<Principal, AuthError> {
        if self.is_open().await? {
            // Anything that is not one of our keys (an SDK's placeholder) is ignored; one of ours
            // is checked, so a revoked or foreign key is refused even now.
            let Some(key) = authorization
                .and_then(presented_key)
                .filter(|key| key.starts_with(KEY_PREFIX))
            else {
                return Ok(Principal {
                    project: ProjectId::new(OPEN_PROJECT),
                    key_id: None,
                });
            };
            return self.verify(key).await;
        }
        let key = authorization.and_then(presented_key).ok_or(AuthError::Missing)?;
        self.verify(key).await
    }

    /// The principal of a valid, unrevoked key: one read (its project's revocation version) when
    /// cached; the key record otherwise.
    async fn verify(&self, key: &str) -> Result<Principal, AuthError> {
        // A forged key (bad or missing tag) is refused before any read and is not cached: a flood
        // of them neither costs reads nor evicts the keys that are cached.
        let may_exist = self
            .keys
            .may_exist(key)
            .await
            .map_err(|e| AuthError::Backend(e.to_string()))?;
        if !may_exist {
            return Err(AuthError::Invalid);
        }
        let cache_key = hex::encode(Sha256::digest(key.as_bytes()));
        let cached = self
            .verified
            .lock()
            .ok()
            .and_then(|cache| cache.get(&cache_key).cloned());
        match cached {
            Some(Checked::Invalid { at }) if at.elapsed() < self.ttl => return Err(AuthError::Invalid),
            Some(Checked::Valid { at, principal, version }) => {
                let current = self.version(&principal.project).await?;
                if current == version && at.elapsed() < self.ttl {
                    return Ok(principal);
                }
                return self.fill(key, cache_key, current).await;
            }
            _ => {}
        }
        // Not seen yet: its project (hence the version to read first) comes from the key record.
        let Some(project) = self.read_key(key).await?.map(|p| p.project) else {
            self.remember(cache_key, Checked::Invalid { at: Instant::now() });
            return Err(AuthError::Invalid);
        };
        let version = self.version(&project).await?;
        self.fill(key, cache_key, version).await
    }

    /// Read the key (after `version` was read) and cache the answer under that version.
    async fn fill(&self, key: &str, cache_key: String, version: u64) -> Result<Principal, AuthError> {
        let at = Instant::now();
        match self.read_key(key).await? {
            Some(principal) => {
                self.remember(
                    cache_key,
                    Checked::Valid {
                        at,
                        principal: principal.clone(),
                        version,
                    },
                );
                Ok(principal)
            }
            None => {
                self.remember(cache_key, Checked::Invalid { at });
                Err(AuthError::Invalid)
            }
        }
    }

    async fn read_key(&self, key: &str) -> Result<Option<Principal>, AuthError> {
        Ok(self
            .keys
            .verify(key)
            .await
            .map_err(|e| AuthError::Backend(e.to_string()))?
            .map(|info| Principal {
                project: info.project,
                key_id: Some(info.key_id),
            }))
    }

    async fn version(&self, project: &ProjectId) -> Result<u64, AuthError> {
        self.keys
            .revocations()
            .version(project)
            .await
            .map_err(|e| AuthError::Backend(e.to_string()))
    }

    fn remember(&self, cache_key: String, checked: Checked) {
        if let Ok(mut cache) = self.verified.lock() {
            if cache.len() >= CACHE_LIMIT {
                cache.clear();
            }
            cache.insert(cache_key, checked);
        }
    }
}

/// The key of an `Authorization` header: `Bearer <key>`, or `Api-Key <key>` (Baseten's scheme;
/// its SDKs and examples send it).
fn presented_key(header: &str) -> Option<&str> {
    let header = header.trim();
    header
        .strip_prefix("Bearer ")
        .or_else(|| header.strip_prefix("bearer "))
        .or_else(|| header.strip_prefix("Api-Key "))
        .or_else(|| header.strip_prefix("api-key "))
        .map(str::trim)
        .filter(|k| !k.is_empty())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::adapters::embedded::SqliteStateStore;
    use crate::ports::{SystemClock, UuidV7Ids};
    use std::sync::Arc;

    fn keys() -> ApiKeyService {
        ApiKeyService::new(
            Arc::new(SqliteStateStore::in_memory().unwrap()),
            Arc::new(SystemClock),
            Arc::new(UuidV7Ids),
        )
    }

    #[tokio::test]
    async fn open_until_a_key_exists_then_required() {
        let keys = keys();
        let auth = Authenticator::new(keys.clone(), AuthMode::OpenWhenNoKeys, Duration::ZERO);
        assert_eq!(auth.authenticate(None).await.unwrap().project.as_str(), OPEN_PROJECT);
        let created = keys.create(&ProjectId::new("p1"), None).await.unwrap();
        assert_eq!(auth.authenticate(None).await, Err(AuthError::Missing));
        assert_eq!(auth.authenticate(Some("Bearer wrong")).await, Err(AuthError::Invalid));
        let bearer = format!("Bearer {}", created.api_key);
        assert!(auth
            .authenticate(Some(&format!("Api-Key {}", created.api_key)))
            .await
            .is_ok());
        assert_eq!(auth.authenticate(Some(&bearer)).await.unwrap().project.as_str(), "p1");
    }

    #[tokio::test]
    async fn revoking_every_key_never_reopens() {
        let keys = keys();
        let auth = Authenticator::new(keys.clone(), AuthMode::OpenWhenNoKeys, Duration::ZERO);
        assert_eq!(
            auth.authenticate(Some("Bearer sk-placeholder"))
                .await
                .unwrap()
                .project
                .as_str(),
            OPEN_PROJECT
        );
        let created = keys.create(&ProjectId::new("p1"), None).await.unwrap();
        let bearer = format!("Bearer {}", created.api_key);
        assert!(auth.authenticate(Some(&bearer)).await.is_ok());
        keys.revoke(&created.info.key_id).await.unwrap();
        assert!(!keys.any_active().await.unwrap());
        // No unrevoked key left: still closed, and the revoked key is refused.
        assert_eq!(auth.authenticate(None).await, Err(AuthError::Missing));
        assert_eq!(auth.authenticate(Some(&bearer)).await, Err(AuthError::Invalid));
        // A server started afresh on the same store starts closed too (the key record persists).
        let restarted = Authenticator::new(keys.clone(), AuthMode::OpenWhenNoKeys, Duration::ZERO);
        assert_eq!(restarted.authenticate(None).await, Err(AuthError::Missing));
        assert_eq!(restarted.authenticate(Some(&bearer)).await, Err(AuthError::Invalid));
    }

    #[tokio::test]
    async fn an_open_server_checks_a_presented_nimbus_key() {
        let auth = Authenticator::new(keys(), AuthMode::OpenWhenNoKeys, Duration::from_secs(60));
        let unknown = format!("Bearer nmb_{}_secret", "0".repeat(32));
        assert_eq!(auth.authenticate(Some(&unknown)).await, Err(AuthError::Invalid));
        assert_eq!(
            auth.authenticate(Some("Bearer nmb_garbage")).await,
            Err(AuthError::Invalid)
        );
        assert_eq!(
            auth.authenticate(Some("garbage")).await.unwrap().project.as_str(),
            OPEN_PROJECT
        );
        assert_eq!(auth.authenticate(None).await.unwrap().project.as_str(), OPEN_PROJECT);
    }

    #[tokio::test]
    async fn required_mode_never_opens_and_a_revoked_key_is_refused_at_once() {
        let state = Arc::new(SqliteStateStore::in_memory().unwrap());
        let service = |state: &Arc<SqliteStateStore>| {
            ApiKeyService::new(state.clone(), Arc::new(SystemClock), Arc::new(UuidV7Ids))
        };
        // Two processes over one store, each with an hour-long cache.
        let (here, there) = (service(&state), service(&state));
        let auth = Authenticator::new(here.clone(), AuthMode::Required, Duration::from_secs(3600));
        assert_eq!(auth.authenticate(None).await, Err(AuthError::Missing));
        let created = here.create(&ProjectId::new("p1"), None).await.unwrap();
        let other = here.create(&ProjectId::new("p1"), None).await.unwrap();
        let bearer = format!("Bearer {}", created.api_key);
        let other_bearer = format!("Bearer {}", other.api_key);
        assert!(auth.authenticate(Some(&bearer)).await.is_ok());
        assert!(auth.authenticate(Some(&other_bearer)).await.is_ok());
        there.revoke(&created.info.key_id).await.unwrap();
        assert_eq!(auth.authenticate(Some(&bearer)).await, Err(AuthError::Invalid));
        // The project's other key keeps working (read again once).
        assert_eq!(
            auth.authenticate(Some(&other_bearer)).await.unwrap().project.as_str(),
            "p1"
        );
    }
}
