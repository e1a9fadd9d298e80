//! API keys: `Authorization: Bearer nmb_<key id>_<secret>.<tag>`. Only a SHA-256 of the secret is
//! stored; the tag lets a forged key be refused without a read. Each key belongs to a project,
//! the tenant every record is scoped to.

mod authenticator;
mod key_tags;
mod keys;
mod revocations;
mod revoked_keys;

pub(crate) use authenticator::Principal;
pub use authenticator::{AuthError, AuthMode, Authenticator};
pub(crate) use key_tags::UntaggedKeysSettingError;
#[cfg(feature = "aws")]
pub(crate) use key_tags::KEY_TAG_SECRET_KIND;
pub use key_tags::{KeyTags, UntaggedKeys};
pub(crate) use keys::valid_project;
pub use keys::ApiKeyService;
pub(crate) use revocations::Revocations;
pub(crate) use revoked_keys::RevokedKeys;
