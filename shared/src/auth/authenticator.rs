//! Per-request authentication with a short-lived cache, so a hot path costs no storage round trip.

use super::keys::{ApiKeyService, KEY_PREFIX};
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
    pub project: String,
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

pub struct Authenticator {
    keys: ApiKeyService,
    mode: AuthMode,
    ttl: Duration,
    verified: Mutex<HashMap<String, (Instant, Option<Principal>)>>,
    /// When the store was last seen without any key (open mode only).
    no_keys_seen: Mutex<Option<Instant>>,
    /// Latched once a key has been seen: closed for good (keys are never deleted).
    closed: AtomicBool,
}

impl Authenticator {
    /// `ttl` bounds how long a revoked key keeps working and a new key takes to be required.
    pub fn new(keys: ApiKeyService, mode: AuthMode, ttl: Duration) -> Self {
        Self {
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
                    project: OPEN_PROJECT.to_owned(),
                    key_id: None,
                });
            };
            return self.verify(key).await;
        }
        let key = authorization.and_then(presented_key).ok_or(AuthError::Missing)?;
        self.verify(key).await
    }

    /// The principal of a valid, unrevoked key (cached for the TTL).
    async fn verify(&self, key: &str) -> Result<Principal, AuthError> {
        let cache_key = hex::encode(Sha256::digest(key.as_bytes()));
        if let Ok(cache) = self.verified.lock() {
            if let Some((at, principal)) = cache.get(&cache_key) {
                if at.elapsed() < self.ttl {
                    return principal.clone().ok_or(AuthError::Invalid);
                }
            }
        }
        let principal = self
            .keys
            .verify(key)
            .await
            .map_err(|e| AuthError::Backend(e.to_string()))?
            .map(|info| Principal {
                project: info.project,
                key_id: Some(info.key_id),
            });
        if let Ok(mut cache) = self.verified.lock() {
            if cache.len() >= CACHE_LIMIT {
                cache.clear();
            }
            cache.insert(cache_key, (Instant::now(), principal.clone()));
        }
        principal.ok_or(AuthError::Invalid)
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
        assert_eq!(auth.authenticate(None).await.unwrap().project, OPEN_PROJECT);
        let created = keys.create("p1", None).await.unwrap();
        assert_eq!(auth.authenticate(None).await, Err(AuthError::Missing));
        assert_eq!(auth.authenticate(Some("Bearer wrong")).await, Err(AuthError::Invalid));
        let bearer = format!("Bearer {}", created.api_key);
        assert!(auth
            .authenticate(Some(&format!("Api-Key {}", created.api_key)))
            .await
            .is_ok());
        assert_eq!(auth.authenticate(Some(&bearer)).await.unwrap().project, "p1");
    }

    #[tokio::test]
    async fn revoking_every_key_never_reopens() {
        let keys = keys();
        let auth = Authenticator::new(keys.clone(), AuthMode::OpenWhenNoKeys, Duration::ZERO);
        assert_eq!(
            auth.authenticate(Some("Bearer sk-placeholder")).await.unwrap().project,
            OPEN_PROJECT
        );
        let created = keys.create("p1", None).await.unwrap();
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
        assert_eq!(auth.authenticate(Some("garbage")).await.unwrap().project, OPEN_PROJECT);
        assert_eq!(auth.authenticate(None).await.unwrap().project, OPEN_PROJECT);
    }

    #[tokio::test]
    async fn required_mode_never_opens_and_cache_expires() {
        let keys = keys();
        let auth = Authenticator::new(keys.clone(), AuthMode::Required, Duration::from_millis(50));
        assert_eq!(auth.authenticate(None).await, Err(AuthError::Missing));
        let created = keys.create("p1", None).await.unwrap();
        let bearer = format!("Bearer {}", created.api_key);
        assert!(auth.authenticate(Some(&bearer)).await.is_ok());
        keys.revoke(&created.info.key_id).await.unwrap();
        // Still cached within the TTL, refused after it.
        assert!(auth.authenticate(Some(&bearer)).await.is_ok());
        tokio::time::sleep(Duration::from_millis(60)).await;
        assert_eq!(auth.authenticate(Some(&bearer)).await, Err(AuthError::Invalid));
    }
}
