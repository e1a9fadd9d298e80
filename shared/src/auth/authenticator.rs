//! Per-request authentication with a short-lived cache, so a hot path costs no storage round trip.

use super::keys::ApiKeyService;
use sha2::{Digest, Sha256};
use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// How requests are authenticated.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AuthMode {
    /// Every request needs a valid key (Lambda, or a server on a non-loopback address).
    Required,
    /// Open (project `default`) while no active key exists; keys are required once one does.
    /// Only for a local server bound to loopback.
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
    any_keys: Mutex<Option<(Instant, bool)>>,
}

impl Authenticator {
    /// `ttl` bounds how long a revoked key keeps working and a new key takes to be required.
    pub fn new(keys: ApiKeyService, mode: AuthMode, ttl: Duration) -> Self {
        Self {
            keys,
            mode,
            ttl,
            verified: Mutex::new(HashMap::new()),
            any_keys: Mutex::new(None),
        }
    }

    pub fn mode(&self) -> AuthMode {
        self.mode
    }

    async fn keys_exist(&self) -> Result<bool, AuthError> {
        if let Ok(cached) = self.any_keys.lock() {
            if let Some((at, exists)) = *cached {
                if at.elapsed() < self.ttl {
                    return Ok(exists);
                }
            }
        }
        let exists = self
            .keys
            .any_active()
            .await
            .map_err(|e| AuthError::Backend(e.to_string()))?;
        if let Ok(mut cached) = self.any_keys.lock() {
            *cached = Some((Instant::now(), exists));
        }
        Ok(exists)
    }

    /// Authenticate from the `Authorization` header value.
    pub async fn authenticate(&self, authorization: Option<&str>) -> Result<Principal, AuthError> {
        if self.mode == AuthMode::OpenWhenNoKeys && !self.keys_exist().await? {
            return Ok(Principal {
                project: OPEN_PROJECT.to_owned(),
                key_id: None,
            });
        }
        let header = authorization
            .map(str::trim)
            .filter(|h| !h.is_empty())
            .ok_or(AuthError::Missing)?;
        // `Api-Key <key>` is Baseten's scheme; its SDKs and examples send it.
        let key = header
            .strip_prefix("Bearer ")
            .or_else(|| header.strip_prefix("bearer "))
            .or_else(|| header.strip_prefix("Api-Key "))
            .or_else(|| header.strip_prefix("api-key "))
            .map(str::trim)
            .filter(|k| !k.is_empty())
            .ok_or(AuthError::Missing)?;
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
