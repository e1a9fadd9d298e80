//! The tag every API key carries: an HMAC of the key's id and secret under a per-deployment tag
//! secret, so a made-up key is refused before any storage read. The tag secret is one record in
//! the state store (`key_tag_secret`), created by the first key minted (a conditional create, so
//! concurrent minters agree) and read once per process, then kept in memory.
//!
//! The tag secret is a filter, not a credential: knowing it lets one make keys that pass the tag
//! check, never keys that verify (the key record's secret hash still has to match). It only keeps
//! floods of forged keys from costing a read each.

use crate::mac::hmac_sha256;
use crate::ports::{Clock, Record, StateStore, StorageError};
use base64::Engine as _;
use rand::RngCore;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use subtle::ConstantTimeEq;

/// Kind of the deployment's tag secret record (id [`TAG_SECRET_ID`]).
pub(crate) const KEY_TAG_SECRET_KIND: &str = "key_tag_secret";
const TAG_SECRET_ID: &str = "current";
const OWNER: &str = "_deployment";
/// Bytes of the HMAC kept in a key (hex-encoded: 32 characters).
const TAG_BYTES: usize = 16;
/// While no tag secret exists (no key minted yet), how long a process waits before reading again
/// for a tagged key: a flood of made-up tagged keys costs at most one read per this per process.
const ABSENT_RECHECK: Duration = Duration::from_secs(5);

/// What to do with a key minted before keys carried a tag (`nmb_<id>_<secret>`, no tag).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum UntaggedKeys {
    /// Refuse them without a read (the default): re-issue them with `nimbus keys reissue`.
    #[default]
    Refuse,
    /// Verify them against their record as before (one read each): a migration window only.
    Accept,
}

impl UntaggedKeys {
    /// `NIMBUS_ACCEPT_UNTAGGED_KEYS`: `true`/`1` accepts them; unset, empty, `false`/`0` refuses.
    pub fn from_env() -> Result<Self, UntaggedKeysSettingError> {
        match std::env::var("NIMBUS_ACCEPT_UNTAGGED_KEYS").as_deref().map(str::trim) {
            Err(_) | Ok("" | "false" | "0") => Ok(Self::Refuse),
            Ok("true" | "1") => Ok(Self::Accept),
            Ok(other) => Err(UntaggedKeysSettingError(other.to_owned())),
        }
    }
}

/// `NIMBUS_ACCEPT_UNTAGGED_KEYS` holds something other than true or false.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("NIMBUS_ACCEPT_UNTAGGED_KEYS: expected true or false, got `{0}`")]
pub struct UntaggedKeysSettingError(String);

#[derive(Default)]
enum Cached {
    #[default]
    Unknown,
    Absent {
        at: Instant,
    },
    Known(Arc<Vec<u8>>),
}

/// The deployment's tag secret, loaded once per process, and the untagged-key policy.
pub struct KeyTags {
    state: Arc<dyn StateStore>,
    untagged: UntaggedKeys,
    cached: Mutex<Cached>,
}

impl KeyTags {
    pub fn new(state: Arc<dyn StateStore>, untagged: UntaggedKeys) -> Self {
        Self {
            state,
            untagged,
            cached: Mutex::new(Cached::Unknown),
        }
    }

    pub fn untagged(&self) -> UntaggedKeys {
        self.untagged
    }

    /// Whether `tag` is the tag of the key `key_id`/`secret`. No read once the process knows the
    /// tag secret (or, none existing, for [`ABSENT_RECHECK`] after it last looked).
    pub async fn check(&self, key_id: &str, secret: &str, tag: &str) -> Result<bool, StorageError> {
        let Some(tag_secret) = self.known_secret().await? else {
            return Ok(false);
        };
        Ok(tag_of(&tag_secret, key_id, secret)
            .as_bytes()
            .ct_eq(tag.as_bytes())
            .into())
    }

    /// The tag of a key being minted, creating the tag secret if this is the first key.
    pub(crate) async fn tag_for_new_key(
        &self,
        key_id: &str,
        secret: &str,
        clock: &dyn Clock,
    ) -> Result<String, StorageError> {
        let tag_secret = match self.read_secret().await? {
            Some(tag_secret) => tag_secret,
            None => self.create_secret(clock).await?,
        };
        Ok(tag_of(&tag_secret, key_id, secret))
    }

    async fn known_secret(&self) -> Result<Option<Arc<Vec<u8>>>, StorageError> {
        match &*self.lock() {
            Cached::Known(tag_secret) => return Ok(Some(Arc::clone(tag_secret))),
            Cached::Absent { at } if at.elapsed() < ABSENT_RECHECK => return Ok(None),
            _ => {}
        }
        self.read_secret().await
    }

    /// Read the tag secret and remember what was found.
    async fn read_secret(&self) -> Result<Option<Arc<Vec<u8>>>, StorageError> {
        if let Cached::Known(tag_secret) = &*self.lock() {
            return Ok(Some(Arc::clone(tag_secret)));
        }
        let found = match self.state.get(KEY_TAG_SECRET_KIND, TAG_SECRET_ID).await? {
            Some(record) => Some(Arc::new(secret_of(&record)?)),
            None => None,
        };
        *self.lock() = match &found {
            Some(tag_secret) => Cached::Known(Arc::clone(tag_secret)),
            None => Cached::Absent { at: Instant::now() },
        };
        Ok(found)
    }

    /// Create the tag secret (the first key minted); a concurrent creator's secret wins.
    async fn create_secret(&self, clock: &dyn Clock) -> Result<Arc<Vec<u8>>, StorageError> {
        let mut bytes = [0u8; 32];
        rand::rng().fill_bytes(&mut bytes);
        let record = crate::records::new_record(
            KEY_TAG_SECRET_KIND,
            TAG_SECRET_ID,
            OWNER,
            clock.now_unix_ms(),
            None,
            &serde_json::json!({
                "secret": base64::engine::general_purpose::STANDARD.encode(bytes),
            }),
        )?;
        match self.state.create(&record).await {
            Ok(()) => {
                let tag_secret = Arc::new(bytes.to_vec());
                *self.lock() = Cached::Known(Arc::clone(&tag_secret));
                Ok(tag_secret)
            }
            Err(StorageError::Conflict) => self
                .read_secret()
                .await?
                .ok_or_else(|| StorageError::Backend("the key tag secret vanished after a conflict".into())),
            Err(err) => Err(err),
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Cached> {
        self.cached.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
    }
}

fn secret_of(record: &Record) -> Result<Vec<u8>, StorageError> {
    record
        .body
        .get("secret")
        .and_then(serde_json::Value::as_str)
        .and_then(|text| base64::engine::general_purpose::STANDARD.decode(text).ok())
        .filter(|bytes| !bytes.is_empty())
        .ok_or_else(|| StorageError::Backend("corrupt key tag secret record".into()))
}

/// Hex of the first [`TAG_BYTES`] of HMAC-SHA256(tag secret, id "_" secret).
fn tag_of(tag_secret: &[u8], key_id: &str, secret: &str) -> String {
    let mac = hmac_sha256(
        tag_secret,
        &[b"nimbus-api-key-tag-v1:", key_id.as_bytes(), b"_", secret.as_bytes()],
    );
    mac.get(..TAG_BYTES).map(hex::encode).unwrap_or_default()
}
