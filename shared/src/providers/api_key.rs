//! Where a provider's API key comes from, shared by the HTTP providers: none, an environment
//! variable (read once at start-up) or a per-request credential.

use super::{CallContext, ProviderError};
use crate::config::CredentialLocation;

#[derive(Debug, Clone)]
pub(crate) struct ApiKeySource {
    location: CredentialLocation,
    /// Resolved once at start-up for `env::` locations.
    env_key: Option<String>,
}

impl ApiKeySource {
    pub(crate) fn new(location: &CredentialLocation) -> Self {
        let env_key = match location {
            CredentialLocation::Env(var) => std::env::var(var).ok().filter(|v| !v.is_empty()),
            _ => None,
        };
        Self {
            location: location.clone(),
            env_key,
        }
    }

    /// The environment variable this source reads that is not set (the provider cannot be called
    /// until it is); `None` when the key is there or comes from elsewhere.
    pub(crate) fn missing_env_var(&self) -> Option<&str> {
        match (&self.location, &self.env_key) {
            (CredentialLocation::Env(var), None) => Some(var),
            _ => None,
        }
    }

    /// The key for one call of provider `provider`; `None` where none is configured.
    pub(crate) fn key(&self, provider: &str, ctx: CallContext<'_>) -> Result<Option<String>, ProviderError> {
        match &self.location {
            CredentialLocation::None => Ok(None),
            CredentialLocation::Env(var) => match &self.env_key {
                Some(key) => Ok(Some(key.clone())),
                None => Err(ProviderError::Misconfigured(format!(
                    "provider `{provider}` needs the environment variable {var}, which is not set"
                ))),
            },
            CredentialLocation::Dynamic(name) => ctx
                .credentials
                .get(name)
                .cloned()
                .map(Some)
                .ok_or_else(|| ProviderError::MissingCredential(name.clone())),
        }
    }
}
