//! API keys: `Authorization: Bearer nmb_<key id>_<secret>.<tag>`. Only a SHA-256 of the secret is
//! stored; the tag lets a forged key be refused without a read. Each key belongs to a project,
//! the tenant every record is scoped to.

mod authenticator;
mod key_tags;
mod keys;
mod revocations;
mod revoked_keys;

pub use authenticator::{AuthError, AuthMode, Authenticator, Principal};
pub use key_tags::{KeyTags, UntaggedKeys, UntaggedKeysSettingError, KEY_TAG_SECRET_KIND};
pub use keys::{valid_project, ApiKeyInfo, ApiKeyService, CreatedApiKey, KeyError};
pub use revocations::{Revocations, REVOCATION_KIND};
pub use revoked_keys::RevokedKeys;
