//! API keys: `Authorization: Bearer nmb_<key id>_<secret>`. Only a SHA-256 of the secret is
//! stored; each key belongs to a project, the tenant every record is scoped to.

mod authenticator;
mod keys;
mod revocations;
mod revoked_keys;

pub use authenticator::{AuthError, AuthMode, Authenticator, Principal};
pub use keys::{valid_project, ApiKeyInfo, ApiKeyService, CreatedApiKey, KeyError};
pub use revocations::{Revocations, REVOCATION_KIND};
pub use revoked_keys::RevokedKeys;
