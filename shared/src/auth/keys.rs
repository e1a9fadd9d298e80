//! Creating, verifying, listing and revoking API keys. A key is `nmb_<id>_<secret>.<tag>`: the tag
//! (see [`super::key_tags`]) is checked before the key record is read, so a made-up key costs no
//! read.

use super::key_tags::{KeyTags, UntaggedKeys};
use super::revocations::Revocations;
use crate::ports::{Clock, IdSource, ListOrder, ListQuery, ProjectId, Record, StateStore, StorageError};
use base64::Engine as _;
use rand::RngCore;
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};
use std::sync::Arc;
use subtle::ConstantTimeEq;

const KIND: &str = "api_key";
/// Keys are listed across projects, so they share one owner partition.
const OWNER: &str = "_all";
/// Every key starts with this.
pub(crate) const KEY_PREFIX: &str = "nmb_";

/// What is stored for a key (never the key itself).
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
struct StoredKey {
    key_id: String,
    project: ProjectId,
    name: Option<String>,
    secret_sha256: String,
    created_at: i64,
    revoked_at: Option<i64>,
}

/// A key as listed: no secret.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct ApiKeyInfo {
    pub key_id: String,
    pub project: ProjectId,
    pub name: Option<String>,
    pub created_at: i64,
    pub revoked_at: Option<i64>,
}

/// A freshly created key: the only time the plaintext exists.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct CreatedApiKey {
    #[serde(flatten)]
    pub info: ApiKeyInfo,
    pub api_key: String,
}

#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum KeyError {
    #[error("invalid project `{0}`: use 1 to 64 letters, digits, `-` or `_`")]
    InvalidProject(String),
    #[error("no API key with id `{0}`")]
    NotFound(String),
    #[error(transparent)]
    Storage(#[from] StorageError),
}

impl From<StoredKey> for ApiKeyInfo {
    fn from(key: StoredKey) -> Self {
        Self {
            key_id: key.key_id,
            project: key.project,
            name: key.name,
            created_at: key.created_at,
            revoked_at: key.revoked_at,
        }
    }
}

fn sha256_hex(secret: &str) -> String {
    hex::encode(Sha256::digest(secret.as_bytes()))
}

/// The parts of a presented key.
struct ParsedKey<'a> {
    id: &'a str,
    secret: &'a str,
    /// `None` for a key minted before keys carried a tag.
    tag: Option<&'a str>,
}

/// Split `nmb_<32 hex>_<secret>[.<tag>]` (the secret is URL-safe base64: no `.`).
fn parse_key(key: &str) -> Option<ParsedKey<'_>> {
    let rest = key.strip_prefix(KEY_PREFIX)?;
    let (body, tag) = match rest.split_once('.') {
        Some((body, tag)) => (body, Some(tag)),
        None => (rest, None),
    };
    let (id, secret) = body.split_once('_')?;
    let valid_id = id.len() == 32 && id.bytes().all(|b| b.is_ascii_hexdigit());
    (valid_id && !secret.is_empty()).then_some(ParsedKey { id, secret, tag })
}

pub(crate) fn valid_project(project: &str) -> bool {
    (1..=64).contains(&project.len())
        && project
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
}

#[derive(Clone)]
pub struct ApiKeyService {
    state: Arc<dyn StateStore>,
    clock: Arc<dyn Clock>,
    ids: Arc<dyn IdSource>,
    revocations: Revocations,
    tags: Arc<KeyTags>,
}

impl ApiKeyService {
    pub fn new(state: Arc<dyn StateStore>, clock: Arc<dyn Clock>, ids: Arc<dyn IdSource>) -> Self {
        let revocations = Revocations::new(Arc::clone(&state), Arc::clone(&clock));
        let tags = Arc::new(KeyTags::new(Arc::clone(&state), UntaggedKeys::default()));
        Self {
            state,
            clock,
            ids,
            revocations,
            tags,
        }
    }

    /// Check tags with `tags` (the process's one [`KeyTags`], so its secret is read once).
    pub fn with_tags(mut self, tags: Arc<KeyTags>) -> Self {
        self.tags = tags;
        self
    }

    /// The per-project revocation versions every revocation of a key bumps.
    pub(crate) fn revocations(&self) -> &Revocations {
        &self.revocations
    }

    /// A key by id, revoked or not (no secret check: for work that recorded the key's id).
    pub async fn info(&self, key_id: &str) -> Result<Option<ApiKeyInfo>, StorageError> {
        let Some(record) = self.state.get(KIND, key_id).await? else {
            return Ok(None);
        };
        let stored: StoredKey = serde_json::from_value(record.body)
            .map_err(|e| StorageError::Backend(format!("corrupt API key record: {e}")))?;
        Ok(Some(stored.into()))
    }

    pub async fn create(&self, project: &ProjectId, name: Option<String>) -> Result<CreatedApiKey, KeyError> {
        if !valid_project(project.as_str()) {
            return Err(KeyError::InvalidProject(project.to_string()));
        }
        let key_id = self.ids.new_uuid().simple().to_string();
        let mut secret_bytes = [0u8; 32];
        rand::rng().fill_bytes(&mut secret_bytes);
        let secret = base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(secret_bytes);
        let tag = self.tags.tag_for_new_key(&key_id, &secret, self.clock.as_ref()).await?;
        let now_ms = self.clock.now_unix_ms();
        let stored = StoredKey {
            key_id: key_id.clone(),
            project: project.clone(),
            name,
            secret_sha256: sha256_hex(&secret),
            created_at: now_ms.div_euclid(1000),
            revoked_at: None,
        };
        let record =
            crate::records::new_record(KIND.to_owned(), key_id.clone(), OWNER.to_owned(), now_ms, None, &stored)?;
        self.state.create(&record).await?;
        Ok(CreatedApiKey {
            info: stored.into(),
            api_key: format!("{KEY_PREFIX}{key_id}_{secret}.{tag}"),
        })
    }

    /// The project of a valid, unrevoked key. A key whose tag is wrong or missing (unless
    /// untagged keys are accepted) is refused before its record is read.
    pub async fn verify(&self, key: &str) -> Result<Option<ApiKeyInfo>, StorageError> {
        let Some(ParsedKey { id: key_id, secret, .. }) = parse_key(key) else {
            return Ok(None);
        };
        if !self.may_exist(key).await? {
            return Ok(None);
        }
        let Some(record) = self.state.get(KIND, key_id).await? else {
            return Ok(None);
        };
        let stored: StoredKey = serde_json::from_value(record.body)
            .map_err(|e| StorageError::Backend(format!("corrupt API key record: {e}")))?;
        let matches: bool = sha256_hex(secret)
            .as_bytes()
            .ct_eq(stored.secret_sha256.as_bytes())
            .into();
        Ok((matches && stored.revoked_at.is_none()).then(|| stored.into()))
    }

    /// Whether `key` is well formed and carries its tag (or is untagged while untagged keys are
    /// accepted): what can be known without reading its record. No read once the process knows
    /// the tag secret.
    pub(crate) async fn may_exist(&self, key: &str) -> Result<bool, StorageError> {
        let Some(ParsedKey { id, secret, tag }) = parse_key(key) else {
            return Ok(false);
        };
        match tag {
            Some(tag) => self.tags.check(id, secret, tag).await,
            None => Ok(self.tags.untagged() == UntaggedKeys::Accept),
        }
    }

    /// A new key for the project and name of `key_id`, which is revoked unless `keep_old` (so its
    /// holders can switch first): how a key minted before keys carried a tag is replaced.
    pub async fn reissue(&self, key_id: &str, keep_old: bool) -> Result<CreatedApiKey, KeyError> {
        let old = self
            .info(key_id)
            .await?
            .ok_or_else(|| KeyError::NotFound(key_id.to_owned()))?;
        let created = self.create(&old.project, old.name).await?;
        if !keep_old {
            self.revoke(key_id).await?;
        }
        Ok(created)
    }

    /// Mark a key revoked, bumping its project's revocation version in the same write (so every
    /// process refuses it on its next request). Revoking twice is fine.
    pub async fn revoke(&self, key_id: &str) -> Result<ApiKeyInfo, KeyError> {
        loop {
            let record = self
                .state
                .get(KIND, key_id)
                .await?
                .ok_or_else(|| KeyError::NotFound(key_id.to_owned()))?;
            let mut stored: StoredKey = serde_json::from_value(record.body.clone())
                .map_err(|e| StorageError::Backend(format!("corrupt API key record: {e}")))?;
            if stored.revoked_at.is_some() {
                return Ok(stored.into());
            }
            stored.revoked_at = Some(self.clock.now_unix_s());
            let updated = crate::records::next_version(&record, &stored)?;
            match self
                .revocations
                .write_revoking(&stored.project, &updated, record.version)
                .await
            {
                Ok(()) => return Ok(stored.into()),
                Err(StorageError::Conflict) => continue,
                Err(err) => return Err(err.into()),
            }
        }
    }

    /// Every key, oldest first.
    pub async fn list(&self) -> Result<Vec<ApiKeyInfo>, StorageError> {
        let mut keys = Vec::new();
        let mut after = None;
        loop {
            let page = self
                .state
                .list_by_owner(&ListQuery {
                    kind: KIND.to_owned(),
                    owner: OWNER.to_owned(),
                    after: after.take(),
                    limit: 500,
                    order: ListOrder::Asc,
                })
                .await?;
            after = page.records.last().map(Record::cursor);
            for record in page.records {
                let stored: StoredKey = serde_json::from_value(record.body)
                    .map_err(|e| StorageError::Backend(format!("corrupt API key record: {e}")))?;
                keys.push(stored.into());
            }
            if !page.has_more {
                return Ok(keys);
            }
        }
    }

    #[cfg(test)]
    pub(crate) async fn any_active(&self) -> Result<bool, StorageError> {
        Ok(self.list().await?.iter().any(|k| k.revoked_at.is_none()))
    }

    /// Whether a key was ever created here, revoked or not (revoking keeps the record).
    pub async fn any_created(&self) -> Result<bool, StorageError> {
        let page = self
            .state
            .list_by_owner(&ListQuery {
                kind: KIND.to_owned(),
                owner: OWNER.to_owned(),
                after: None,
                limit: 1,
                order: ListOrder::Asc,
            })
            .await?;
        Ok(!page.records.is_empty())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::adapters::embedded::SqliteStateStore;
    use crate::ports::{SystemClock, UuidV7Ids};

    fn service() -> ApiKeyService {
        ApiKeyService::new(
            Arc::new(SqliteStateStore::in_memory().unwrap()),
            Arc::new(SystemClock),
            Arc::new(UuidV7Ids),
        )
    }

    #[tokio::test]
    async fn created_keys_verify_until_revoked() {
        let keys = service();
        assert!(!keys.any_active().await.unwrap());
        let created = keys.create(&ProjectId::new("team-a"), Some("ci".into())).await.unwrap();
        assert!(created.api_key.starts_with("nmb_"));
        let info = keys.verify(&created.api_key).await.unwrap().unwrap();
        assert_eq!(info.project.as_str(), "team-a");
        assert!(keys.any_active().await.unwrap());

        let tampered = format!("{}x", created.api_key);
        assert!(keys.verify(&tampered).await.unwrap().is_none());
        assert!(keys.verify("sk-not-ours").await.unwrap().is_none());

        keys.revoke(&created.info.key_id).await.unwrap();
        assert!(keys.verify(&created.api_key).await.unwrap().is_none());
        assert!(!keys.any_active().await.unwrap());
        assert_eq!(keys.list().await.unwrap().len(), 1);
    }

    #[tokio::test]
    async fn the_secret_is_not_stored() {
        let state = Arc::new(SqliteStateStore::in_memory().unwrap());
        let keys = ApiKeyService::new(state.clone(), Arc::new(SystemClock), Arc::new(UuidV7Ids));
        let created = keys.create(&ProjectId::new("p"), None).await.unwrap();
        let record = state.get(KIND, &created.info.key_id).await.unwrap().unwrap();
        let secret = parse_key(&created.api_key).unwrap().secret;
        assert!(!record.body.to_string().contains(secret));
    }

    /// A key as minted before keys carried a tag: same record, no `.tag`.
    fn untagged(key: &str) -> String {
        key.split_once('.').unwrap().0.to_owned()
    }

    #[tokio::test]
    async fn a_key_verifies_only_with_its_own_tag() {
        let keys = service();
        let created = keys.create(&ProjectId::new("p"), None).await.unwrap();
        let (body, tag) = created.api_key.split_once('.').unwrap();
        assert_eq!(tag.len(), 32);
        assert!(keys.verify(&created.api_key).await.unwrap().is_some());
        let other_tag = if tag.starts_with('0') { "1" } else { "0" };
        let forged = format!("{body}.{other_tag}{}", &tag[1..]);
        assert!(!keys.may_exist(&forged).await.unwrap());
        assert!(keys.verify(&forged).await.unwrap().is_none());
        // Another key's tag does not fit this key.
        let other = keys.create(&ProjectId::new("p"), None).await.unwrap();
        let swapped = format!("{body}.{}", other.api_key.split_once('.').unwrap().1);
        assert!(keys.verify(&swapped).await.unwrap().is_none());
    }

    #[tokio::test]
    async fn untagged_keys_are_refused_unless_accepted_for_a_migration() {
        let state: Arc<dyn StateStore> = Arc::new(SqliteStateStore::in_memory().unwrap());
        let service = |untagged| {
            ApiKeyService::new(Arc::clone(&state), Arc::new(SystemClock), Arc::new(UuidV7Ids))
                .with_tags(Arc::new(KeyTags::new(Arc::clone(&state), untagged)))
        };
        let created = service(UntaggedKeys::Refuse)
            .create(&ProjectId::new("p"), None)
            .await
            .unwrap();
        let legacy = untagged(&created.api_key);
        assert!(service(UntaggedKeys::Refuse).verify(&legacy).await.unwrap().is_none());
        let accepting = service(UntaggedKeys::Accept);
        assert_eq!(accepting.verify(&legacy).await.unwrap().unwrap().project.as_str(), "p");
        // Accepting untagged keys never lets a wrong tag through.
        assert!(accepting
            .verify(&format!("{legacy}.{}", "0".repeat(32)))
            .await
            .unwrap()
            .is_none());
    }

    #[tokio::test]
    async fn reissue_mints_a_tagged_key_for_the_same_project_and_revokes_the_old_one() {
        let keys = service();
        let old = keys.create(&ProjectId::new("p"), Some("ci".into())).await.unwrap();
        let kept = keys.reissue(&old.info.key_id, true).await.unwrap();
        assert!(keys.verify(&old.api_key).await.unwrap().is_some());
        let new = keys.reissue(&old.info.key_id, false).await.unwrap();
        assert_eq!((new.info.project.as_str(), new.info.name.as_deref()), ("p", Some("ci")));
        assert!(keys.verify(&new.api_key).await.unwrap().is_some());
        assert!(keys.verify(&kept.api_key).await.unwrap().is_some());
        assert!(keys.verify(&old.api_key).await.unwrap().is_none());
        assert!(matches!(keys.reissue("nope", false).await, Err(KeyError::NotFound(_))));
    }

    #[tokio::test]
    async fn rejects_bad_projects_and_unknown_ids() {
        let keys = service();
        assert!(matches!(
            keys.create(&ProjectId::new("bad project"), None).await,
            Err(KeyError::InvalidProject(_))
        ));
        assert!(matches!(keys.revoke("nope").await, Err(KeyError::NotFound(_))));
    }
}
