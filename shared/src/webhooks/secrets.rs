//! A project's webhook signing secrets (`/v1/webhook_secrets`, `nimbus webhook-secrets`): every
//! unexpired, unrevoked secret signs the project's async-request webhooks. Creating a secret is
//! rotation: every older secret keeps signing for [`ROTATION_OVERLAP_MS`] more, then expires, so
//! receivers can switch to the new one without missing a webhook.
//!
//! Signers read the secrets through [`SecretSource`], cached per project for [`CACHE_TTL_MS`] in
//! each process and only while the project's revocation version ([`Revocations`]) is the one the
//! cache was filled under: a revoked secret never signs again in any process (one read per use);
//! a new secret is used everywhere within 30 seconds (at once in the process that made it).
//!
//! A secret is stored sealed ([`StoredSigningSecret`]): the record holds its mask and the sealed
//! value, opened only by the signers. A record written before sealing is sealed when written again
//! and when the project's secrets are listed or a secret created (the management paths).

use super::errors::WebhooksError;
use super::sealed_secret::{context, StoredSigningSecret};
use super::signing::SigningSecret;
use crate::auth::{valid_project, Revocations};
use crate::ports::{Clock, CredentialSealer, IdSource, ProjectId, Record, StateStore, StorageError};
use crate::records::{decode, get_owned, list_all};
use async_trait::async_trait;
use serde::{Deserialize, Serialize};
use std::collections::HashMap;
use std::sync::{Arc, Mutex};

pub(crate) const SECRET_KIND: &str = "webhook_secret";
const ID_PREFIX: &str = "wsec_";
const OBJECT: &str = "webhook_secret";

/// How long an older secret keeps signing after a new one is created.
pub(crate) const ROTATION_OVERLAP_MS: i64 = 24 * 3600 * 1000;

/// How long a process reuses a project's secrets before reading them again.
pub(crate) const CACHE_TTL_MS: i64 = 30_000;

/// At most this many live secrets per project (each signs every webhook).
pub(crate) const MAX_LIVE_SECRETS: usize = 10;

/// What is stored for a secret: sealed (signing needs the `whsec_` string), and its mask.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, utoipa::ToSchema)]
struct StoredSecret {
    #[serde(flatten)]
    secret: StoredSigningSecret,
    created_at_ms: i64,
    expires_at_ms: Option<i64>,
    revoked: bool,
}

impl StoredSecret {
    fn live_at(&self, now_ms: i64) -> bool {
        !self.revoked && self.expires_at_ms.is_none_or(|expires| expires > now_ms)
    }
}

/// A new secret: the only answer that shows it whole.
#[derive(Debug, Clone, Serialize, PartialEq, utoipa::ToSchema)]
pub struct CreatedSecret {
    pub id: String,
    pub object: &'static str,
    pub secret: String,
    /// Unix seconds.
    pub created_at: i64,
}

/// A secret as listed: masked, with its expiry (`null`: no expiry yet).
#[derive(Debug, Clone, Serialize, PartialEq, utoipa::ToSchema)]
pub struct SecretSummary {
    pub id: String,
    pub object: &'static str,
    pub secret: String,
    /// Unix seconds.
    pub created_at: i64,
    /// Unix seconds; `None` until a newer secret starts the rotation.
    pub expires_at: Option<i64>,
}

/// A revoked secret.
#[derive(Debug, Clone, Serialize, PartialEq, utoipa::ToSchema)]
pub struct RevokedSecret {
    pub id: String,
    pub object: &'static str,
    pub deleted: bool,
}

/// The secrets that sign a project's webhooks right now.
#[async_trait]
pub trait SecretSource: Send + Sync {
    /// Unexpired, unrevoked secrets, newest first (empty: the project has none).
    async fn signing_secrets(&self, project: &ProjectId) -> Result<Vec<SigningSecret>, StorageError>;
}

/// A live secret as cached: its expiry is checked on every use.
#[derive(Clone)]
struct CachedSecret {
    secret: SigningSecret,
    expires_at_ms: Option<i64>,
}

struct CacheEntry {
    read_at_ms: i64,
    /// The project's revocation version, read before the secrets.
    version: u64,
    secrets: Vec<CachedSecret>,
}

/// Creates, lists and revokes secrets; signers read them through [`SecretSource`].
pub struct WebhookSecrets {
    state: Arc<dyn StateStore>,
    clock: Arc<dyn Clock>,
    ids: Arc<dyn IdSource>,
    /// Seals each secret at rest; opened only to sign.
    sealer: Arc<dyn CredentialSealer>,
    revocations: Revocations,
    cache: Mutex<HashMap<ProjectId, CacheEntry>>,
}

fn seconds(ms: i64) -> i64 {
    ms.div_euclid(1000)
}

/// The record TTL (Unix seconds) of a secret that stops signing at `expires_at_ms`.
fn record_ttl(expires_at_ms: i64) -> i64 {
    expires_at_ms.div_euclid(1000) + 1
}

impl WebhookSecrets {
    pub fn new(
        state: Arc<dyn StateStore>,
        clock: Arc<dyn Clock>,
        ids: Arc<dyn IdSource>,
        sealer: Arc<dyn CredentialSealer>,
    ) -> Self {
        let revocations = Revocations::new(Arc::clone(&state), Arc::clone(&clock));
        Self {
            state,
            clock,
            ids,
            sealer,
            revocations,
            cache: Mutex::new(HashMap::new()),
        }
    }

    /// A new secret for `project`; every older live secret expires in 24 hours (rotation).
    pub async fn create(&self, project: &ProjectId) -> Result<CreatedSecret, WebhooksError> {
        if !valid_project(project.as_str()) {
            return Err(WebhooksError::invalid(
                "Invalid project: use 1 to 64 letters, digits, `-` or `_`.",
                "project",
            ));
        }
        let now_ms = self.clock.now_unix_ms();
        let older = self.live_records(project, now_ms).await?;
        if older.len() >= MAX_LIVE_SECRETS {
            return Err(WebhooksError::LimitReached {
                message: format!(
                    "A project may have at most {MAX_LIVE_SECRETS} live webhook secrets; revoke one first."
                ),
            });
        }
        let secret = SigningSecret::generate();
        let id = self.ids.prefixed(ID_PREFIX);
        let stored = StoredSecret {
            secret: StoredSigningSecret::seal(self.sealer.as_ref(), &context(SECRET_KIND, &id), &secret)
                .await
                .map_err(StorageError::from)?,
            created_at_ms: now_ms,
            expires_at_ms: None,
            revoked: false,
        };
        let record = crate::records::new_record(SECRET_KIND, id, project.to_string(), now_ms, None, &stored)?;
        // The new secret exists before any older one gets its expiry: something always signs.
        self.state.create(&record).await?;
        let expires_at_ms = now_ms + ROTATION_OVERLAP_MS;
        // Only secrets older than this one: of two secrets created at once, the newer survives.
        for (older, _) in older
            .iter()
            .filter(|(r, _)| r.cursor().sort_key() < record.cursor().sort_key())
        {
            self.expire_by(&older.id, expires_at_ms).await?;
        }
        self.forget(project);
        Ok(CreatedSecret {
            id: record.id,
            object: OBJECT,
            secret: secret.as_str().to_owned(),
            created_at: seconds(now_ms),
        })
    }

    /// Give a secret an expiry at `expires_at_ms` unless it stops signing sooner already.
    async fn expire_by(&self, id: &str, expires_at_ms: i64) -> Result<bool, StorageError> {
        self.change(id, None, |stored| {
            if stored.revoked || stored.expires_at_ms.is_some_and(|at| at <= expires_at_ms) {
                return None;
            }
            stored.expires_at_ms = Some(expires_at_ms);
            Some(record_ttl(expires_at_ms))
        })
        .await
    }

    /// Apply `change` to a secret's body until the write wins; `change` answers the record's new
    /// TTL (Unix seconds), or `None` to leave the record as it is. Whether it was changed. With
    /// `revoking` (the project), the write bumps the project's revocation version with it.
    async fn change(
        &self,
        id: &str,
        revoking: Option<&ProjectId>,
        mut change: impl FnMut(&mut StoredSecret) -> Option<i64>,
    ) -> Result<bool, StorageError> {
        let state = self.state.as_ref();
        for _ in 0..20 {
            let Some(record) = state.get(SECRET_KIND, id).await? else {
                return Ok(false);
            };
            let mut stored: StoredSecret = decode(&record)?;
            let Some(ttl) = change(&mut stored) else {
                return Ok(false);
            };
            // A record written before sealing is sealed with this write.
            stored.secret = self.sealed(&record, &stored.secret).await?;
            let updated = Record {
                expires_at: Some(ttl),
                ..crate::records::next_version(&record, &stored)?
            };
            let written = match revoking {
                Some(project) => self.revocations.write_revoking(project, &updated, record.version).await,
                None => state.update(&updated, record.version).await,
            };
            match written {
                Ok(()) => return Ok(true),
                Err(StorageError::Conflict) => continue,
                Err(err) => return Err(err),
            }
        }
        Err(StorageError::Conflict)
    }

    /// `secret` of `record`, sealed if it was stored in plain text.
    async fn sealed(&self, record: &Record, secret: &StoredSigningSecret) -> Result<StoredSigningSecret, StorageError> {
        Ok(secret
            .sealed_for(self.sealer.as_ref(), &context(&record.kind, &record.id))
            .await?)
    }

    /// Seal the secret of a record written before sealing (one conditional write; a record that
    /// changed meanwhile is left to its next write).
    async fn seal_plain(&self, record: &Record, stored: &StoredSecret) -> Result<(), StorageError> {
        let sealed = StoredSecret {
            secret: self.sealed(record, &stored.secret).await?,
            ..stored.clone()
        };
        let updated = crate::records::next_version(record, &sealed)?;
        match self.state.update(&updated, record.version).await {
            Ok(()) | Err(StorageError::Conflict) => Ok(()),
            Err(err) => Err(err),
        }
    }

    /// The project's live secrets, masked, newest first.
    pub async fn list(&self, project: &ProjectId) -> Result<Vec<SecretSummary>, WebhooksError> {
        let now_ms = self.clock.now_unix_ms();
        let mut live = self.live_records(project, now_ms).await?;
        for (record, stored) in live.iter().filter(|(_, stored)| stored.secret.is_plain()) {
            self.seal_plain(record, stored).await?;
        }
        live.reverse();
        live.into_iter()
            .map(|(record, stored)| {
                let masked = stored.secret.masked().ok_or_else(|| corrupt(&record))?;
                Ok(SecretSummary {
                    id: record.id,
                    object: OBJECT,
                    secret: masked,
                    created_at: seconds(stored.created_at_ms),
                    expires_at: stored.expires_at_ms.map(seconds),
                })
            })
            .collect()
    }

    /// Revoke a secret of `project`: it stops signing at once, in every process.
    pub async fn revoke(&self, project: &ProjectId, id: &str) -> Result<RevokedSecret, WebhooksError> {
        let not_found = || WebhooksError::NotFound {
            what: "webhook secret",
            id: id.to_owned(),
        };
        let now_ms = self.clock.now_unix_ms();
        if get_owned(self.state.as_ref(), SECRET_KIND, id, project)
            .await?
            .is_none()
        {
            return Err(not_found());
        }
        // Revoked records are of no use: the store may remove them at once (TTL now).
        let revoked = self
            .change(id, Some(project), |stored| {
                if !stored.live_at(now_ms) {
                    return None;
                }
                stored.revoked = true;
                Some(seconds(now_ms))
            })
            .await?;
        if !revoked {
            return Err(not_found());
        }
        self.forget(project);
        Ok(RevokedSecret {
            id: id.to_owned(),
            object: OBJECT,
            deleted: true,
        })
    }

    /// The secrets signing for `project` at `now_ms`, newest first: one read (the project's
    /// revocation version) when cached; the secrets are read again at most once per
    /// [`CACHE_TTL_MS`] per project that has any, and after any revocation in the project.
    pub async fn signing(&self, project: &ProjectId, now_ms: i64) -> Result<Vec<SigningSecret>, StorageError> {
        let version = self.revocations.version(project).await?;
        if let Some(secrets) = self.cached(project, now_ms, version) {
            return Ok(secrets);
        }
        let mut live = self.live_records(project, now_ms).await?;
        live.reverse();
        let mut secrets = Vec::with_capacity(live.len());
        for (record, stored) in live {
            let secret = stored
                .secret
                .open(self.sealer.as_ref(), &context(&record.kind, &record.id))
                .await?;
            secrets.push(CachedSecret {
                secret,
                expires_at_ms: stored.expires_at_ms,
            });
        }
        let signing = secrets.iter().map(|s| s.secret.clone()).collect();
        // "No secret" is not kept: a secret created in another process is used at once (the
        // deliveries that waited for it are brought forward then).
        if secrets.is_empty() {
            return Ok(signing);
        }
        if let Ok(mut cache) = self.cache.lock() {
            cache.insert(
                project.clone(),
                CacheEntry {
                    read_at_ms: now_ms,
                    version,
                    secrets,
                },
            );
        }
        Ok(signing)
    }

    fn cached(&self, project: &ProjectId, now_ms: i64, version: u64) -> Option<Vec<SigningSecret>> {
        let cache = self.cache.lock().ok()?;
        let entry = cache.get(project)?;
        let fresh = entry.version == version && (entry.read_at_ms..entry.read_at_ms + CACHE_TTL_MS).contains(&now_ms);
        fresh.then(|| {
            entry
                .secrets
                .iter()
                .filter(|s| s.expires_at_ms.is_none_or(|at| at > now_ms))
                .map(|s| s.secret.clone())
                .collect()
        })
    }

    fn forget(&self, project: &ProjectId) {
        if let Ok(mut cache) = self.cache.lock() {
            cache.remove(project);
        }
    }

    /// The project's live secret records, oldest first.
    async fn live_records(
        &self,
        project: &ProjectId,
        now_ms: i64,
    ) -> Result<Vec<(Record, StoredSecret)>, StorageError> {
        let mut live = Vec::new();
        for record in list_all(self.state.as_ref(), SECRET_KIND, project.as_str()).await? {
            let stored: StoredSecret = decode(&record)?;
            if stored.live_at(now_ms) {
                live.push((record, stored));
            }
        }
        Ok(live)
    }
}

fn corrupt(record: &Record) -> StorageError {
    StorageError::Backend(format!(
        "corrupt {} record {}: not a whsec_ secret",
        record.kind, record.id
    ))
}

#[async_trait]
impl SecretSource for WebhookSecrets {
    async fn signing_secrets(&self, project: &ProjectId) -> Result<Vec<SigningSecret>, StorageError> {
        self.signing(project, self.clock.now_unix_ms()).await
    }
}

#[cfg(test)]
#[path = "secrets_tests.rs"]
mod tests;
