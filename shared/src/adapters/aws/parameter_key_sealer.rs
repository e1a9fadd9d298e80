//! Credentials sealed with a data key kept in SSM Parameter Store: a SecureString parameter
//! (standard tier: no monthly fee, encrypted by the account's AWS-managed `aws/ssm` key) holding a
//! random 32-byte key, base64. The key is read once per process, on first use; the first process
//! that finds no parameter makes one (`PutParameter` without overwrite: when two race, both use
//! the one that won). Sealing itself is local: no AWS call per seal or open.
//!
//! A sealed value is `ssm1.` + the cipher's layout (`adapters::sealing_cipher`).

use super::SsmParameters;
use crate::adapters::sealing_cipher::{SealingCipher, KEY_LEN};
use crate::ports::{CredentialSealer, ProviderSecrets, SealError, SecretError};
use async_trait::async_trait;
use base64::engine::general_purpose::STANDARD as BASE64;
use base64::Engine as _;
use tokio::sync::OnceCell;

/// The environment variable naming the parameter (set by the SAM template).
pub const SEALING_KEY_PARAMETER_ENV: &str = "NIMBUS_SEALING_KEY_PARAMETER";
/// The prefix of values this sealer makes.
const VERSION_PREFIX: &str = "ssm1.";

/// [`CredentialSealer`] over a data key in Parameter Store.
pub struct ParameterKeySealer {
    parameters: SsmParameters,
    /// `None` when the environment names no parameter: every call then fails saying so.
    parameter: Option<String>,
    cipher: OnceCell<SealingCipher>,
}

impl std::fmt::Debug for ParameterKeySealer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ParameterKeySealer")
            .field("parameter", &self.parameter)
            .finish_non_exhaustive()
    }
}

impl ParameterKeySealer {
    /// A sealer whose key is the parameter `name`, read and made through `parameters` (the
    /// process's one SSM adapter). Nothing is called until the first seal or open.
    pub fn new(parameters: SsmParameters, name: impl Into<String>) -> Self {
        Self::with_parameter(parameters, Some(name.into()))
    }

    /// A sealer using the parameter named by [`SEALING_KEY_PARAMETER_ENV`]. Without it the sealer
    /// is still made (functions that never seal start as usual) and every call fails naming the
    /// variable.
    pub fn from_env(parameters: SsmParameters) -> Self {
        let name = std::env::var(SEALING_KEY_PARAMETER_ENV)
            .ok()
            .filter(|v| !v.trim().is_empty());
        Self::with_parameter(parameters, name)
    }

    fn with_parameter(parameters: SsmParameters, parameter: Option<String>) -> Self {
        Self {
            parameters,
            parameter,
            cipher: OnceCell::new(),
        }
    }

    async fn cipher(&self) -> Result<&SealingCipher, SealError> {
        self.cipher
            .get_or_try_init(|| async {
                let name = self.parameter.as_deref().ok_or_else(|| {
                    SealError::Unavailable(format!(
                        "environment variable {SEALING_KEY_PARAMETER_ENV} is not set: no parameter holds the sealing key"
                    ))
                })?;
                let key = match self.read_key(name).await? {
                    Some(key) => key,
                    None => self.create_key(name).await?,
                };
                Ok(SealingCipher::new(&key))
            })
            .await
    }

    /// The key in the parameter, or `None` when there is no parameter yet.
    async fn read_key(&self, name: &str) -> Result<Option<[u8; KEY_LEN]>, SealError> {
        match self.parameters.parameter(name).await {
            Ok(value) => key_from_text(name, value.expose()).map(Some),
            Err(SecretError::NotFound { .. }) => Ok(None),
            Err(err) => Err(SealError::Unavailable(err.to_string())),
        }
    }

    /// A new random key stored in the parameter, or the one another process stored first.
    async fn create_key(&self, name: &str) -> Result<[u8; KEY_LEN], SealError> {
        let key = SealingCipher::random_key()?;
        let description = "Nimbus: the data key sealing credentials and webhook secrets at rest (do not change)";
        let created = self
            .parameters
            .create_secure(name, description, &BASE64.encode(key))
            .await
            .map_err(|e| SealError::Unavailable(e.to_string()))?;
        if created {
            return Ok(key);
        }
        self.read_key(name)
            .await?
            .ok_or_else(|| SealError::Unavailable(format!("SSM parameter {name} exists but could not be read")))
    }
}

fn key_from_text(name: &str, text: &str) -> Result<[u8; KEY_LEN], SealError> {
    BASE64
        .decode(text.trim())
        .ok()
        .and_then(|bytes| <[u8; KEY_LEN]>::try_from(bytes).ok())
        .ok_or_else(|| {
            SealError::Unavailable(format!(
                "SSM parameter {name} does not hold a {KEY_LEN}-byte base64 key: it is not a key Nimbus made \
                 (restore the original; with a new key, values sealed before cannot be opened)"
            ))
        })
}

#[async_trait]
impl CredentialSealer for ParameterKeySealer {
    async fn seal(&self, context: &str, plaintext: &[u8]) -> Result<String, SealError> {
        self.cipher().await?.seal(VERSION_PREFIX, context, plaintext)
    }

    async fn open(&self, context: &str, sealed: &str) -> Result<Vec<u8>, SealError> {
        self.cipher().await?.open(VERSION_PREFIX, context, sealed)
    }
}
