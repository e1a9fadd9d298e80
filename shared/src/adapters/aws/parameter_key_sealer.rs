//! Credentials sealed with a data key kept in SSM Parameter Store: a SecureString parameter
//! (standard tier: no monthly fee, encrypted by the account's AWS-managed `aws/ssm` key) holding a
//! random 32-byte key, base64. The key is read once per process, on first use; the first process
//! that finds no parameter makes one (`PutParameter` without overwrite: when two race, both use
//! the one that won). Sealing itself is local: no AWS call per seal or open.
//!
//! A sealed value is `ssm1.` + the cipher's layout (`adapters::sealing_cipher`).

use super::describe_sdk_error;
use crate::adapters::sealing_cipher::{SealingCipher, KEY_LEN};
use crate::ports::{CredentialSealer, SealError};
use async_trait::async_trait;
use aws_sdk_ssm::types::{ParameterTier, ParameterType};
use base64::engine::general_purpose::STANDARD as BASE64;
use base64::Engine as _;
use tokio::sync::OnceCell;

/// The environment variable naming the parameter (set by the SAM template).
pub const SEALING_KEY_PARAMETER_ENV: &str = "NIMBUS_SEALING_KEY_PARAMETER";
/// The prefix of values this sealer makes.
const VERSION_PREFIX: &str = "ssm1.";

/// [`CredentialSealer`] over a data key in Parameter Store.
pub struct ParameterKeySealer {
    client: aws_sdk_ssm::Client,
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
    /// A sealer whose key is the parameter `name`. Nothing is called until the first seal or open.
    pub fn new(sdk_config: &aws_config::SdkConfig, name: impl Into<String>) -> Self {
        Self::with_parameter(sdk_config, Some(name.into()))
    }

    /// A sealer using the parameter named by [`SEALING_KEY_PARAMETER_ENV`]. Without it the sealer
    /// is still made (functions that never seal start as usual) and every call fails naming the
    /// variable.
    pub fn from_env(sdk_config: &aws_config::SdkConfig) -> Self {
        let name = std::env::var(SEALING_KEY_PARAMETER_ENV)
            .ok()
            .filter(|v| !v.trim().is_empty());
        Self::with_parameter(sdk_config, name)
    }

    fn with_parameter(sdk_config: &aws_config::SdkConfig, parameter: Option<String>) -> Self {
        Self {
            client: aws_sdk_ssm::Client::new(sdk_config),
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
        let output = match self
            .client
            .get_parameter()
            .name(name)
            .with_decryption(true)
            .send()
            .await
        {
            Ok(output) => output,
            Err(err) if err.as_service_error().is_some_and(|e| e.is_parameter_not_found()) => return Ok(None),
            Err(err) => {
                return Err(SealError::Unavailable(format!(
                    "SSM GetParameter {name}: {}",
                    describe_sdk_error(&err)
                )))
            }
        };
        let value = output
            .parameter()
            .and_then(|p| p.value())
            .ok_or_else(|| SealError::Unavailable(format!("SSM GetParameter {name} returned no value")))?;
        key_from_text(name, value).map(Some)
    }

    /// A new random key stored in the parameter, or the one another process stored first.
    async fn create_key(&self, name: &str) -> Result<[u8; KEY_LEN], SealError> {
        let key = SealingCipher::random_key()?;
        let put = self
            .client
            .put_parameter()
            .name(name)
            .description("Nimbus: the data key sealing credentials and webhook secrets at rest (do not change)")
            .value(BASE64.encode(key))
            .r#type(ParameterType::SecureString)
            .tier(ParameterTier::Standard)
            .overwrite(false)
            .send()
            .await;
        match put {
            Ok(_) => Ok(key),
            Err(err) if err.as_service_error().is_some_and(|e| e.is_parameter_already_exists()) => self
                .read_key(name)
                .await?
                .ok_or_else(|| SealError::Unavailable(format!("SSM parameter {name} exists but could not be read"))),
            Err(err) => Err(SealError::Unavailable(format!(
                "SSM PutParameter {name}: {}",
                describe_sdk_error(&err)
            ))),
        }
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
