//! Where a provider's API key comes from, shared by the HTTP providers: none, an environment
//! variable (read once at start-up), a parameter of the parameter store (read on first use,
//! through the [`ProviderSecrets`] port, kept per process) or a per-request credential.

use super::{CallContext, ProviderError};
use crate::config::CredentialLocation;
use crate::ports::{ProviderSecrets, SecretError};
use std::sync::Arc;

#[derive(Debug, Clone)]
pub(crate) struct ApiKeySource {
    location: CredentialLocation,
    /// Resolved once at start-up for `env::` locations.
    env_key: Option<String>,
    /// Reads `ssm::` locations (kept per process by the stack's [`crate::ports::CachedProviderSecrets`]).
    secrets: Arc<dyn ProviderSecrets>,
}

impl ApiKeySource {
    pub(crate) fn new(location: &CredentialLocation, secrets: Arc<dyn ProviderSecrets>) -> Self {
        let env_key = match location {
            CredentialLocation::Env(var) => std::env::var(var).ok().filter(|v| !v.is_empty()),
            _ => None,
        };
        Self {
            location: location.clone(),
            env_key,
            secrets,
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
    pub(crate) async fn key(&self, provider: &str, ctx: CallContext<'_>) -> Result<Option<String>, ProviderError> {
        match &self.location {
            CredentialLocation::None => Ok(None),
            CredentialLocation::Env(var) => match &self.env_key {
                Some(key) => Ok(Some(key.clone())),
                None => Err(ProviderError::Misconfigured(format!(
                    "provider `{provider}` needs the environment variable {var}, which is not set"
                ))),
            },
            CredentialLocation::Ssm(name) => match self.secrets.parameter(name).await {
                Ok(value) => Ok(Some(value.expose().to_owned())),
                Err(error) => Err(key_error(provider, &error)),
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

/// A parameter that could not be read, as the provider's error. The whole cause is logged; the
/// error (which reaches the client) names the parameter and the kind of failure only, not the
/// store's own message (which names the account and the role).
fn key_error(provider: &str, error: &SecretError) -> ProviderError {
    tracing::warn!(provider, %error, "the provider's key could not be read from the parameter store");
    match error {
        SecretError::NotFound { name, .. } => ProviderError::Misconfigured(format!(
            "the key of provider `{provider}` is the parameter `{name}`, which does not exist"
        )),
        SecretError::Denied { name, .. } => ProviderError::Misconfigured(format!(
            "the key of provider `{provider}` is the parameter `{name}`, which this function may not read"
        )),
        SecretError::Unavailable { name, .. } => ProviderError::KeyUnavailable(format!(
            "the key of provider `{provider}` (parameter `{name}`) could not be read just now"
        )),
    }
}
