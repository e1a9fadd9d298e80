//! Credentials sealed with a KMS key: `Encrypt`/`Decrypt` under the key named by
//! `NIMBUS_SEALING_KEY_ID` (set by the SAM template), the context passed as the encryption context
//! `{"nimbus": context}`, so a value copied to another context does not open (and CloudTrail shows
//! which record each decryption was for).
//!
//! A sealed value is `kms1.` + base64(ciphertext blob).

use super::describe_sdk_error;
use crate::ports::{check_sealable, decode_sealed, encode_sealed, CredentialSealer, SealError};
use async_trait::async_trait;
use aws_sdk_kms::primitives::Blob;

/// The environment variable naming the KMS key (id, ARN or alias).
pub const SEALING_KEY_ENV: &str = "NIMBUS_SEALING_KEY_ID";
/// The prefix of values this sealer makes.
const VERSION_PREFIX: &str = "kms1.";
/// The encryption context's one key; its value is the caller's context.
const CONTEXT_KEY: &str = "nimbus";

/// [`CredentialSealer`] over a KMS key.
#[derive(Debug, Clone)]
pub struct KmsSealer {
    client: aws_sdk_kms::Client,
    /// `None` when the environment names no key: every call then fails saying so.
    key_id: Option<String>,
}

impl KmsSealer {
    /// A sealer using the KMS key `key_id` (id, ARN or alias).
    pub fn new(sdk_config: &aws_config::SdkConfig, key_id: impl Into<String>) -> Self {
        Self::with_key(sdk_config, Some(key_id.into()))
    }

    /// A sealer using the key named by [`SEALING_KEY_ENV`]. Without it the sealer is still made
    /// (functions that never seal start as usual) and every call fails naming the variable.
    pub fn from_env(sdk_config: &aws_config::SdkConfig) -> Self {
        let key_id = std::env::var(SEALING_KEY_ENV).ok().filter(|v| !v.trim().is_empty());
        Self::with_key(sdk_config, key_id)
    }

    fn with_key(sdk_config: &aws_config::SdkConfig, key_id: Option<String>) -> Self {
        Self {
            client: aws_sdk_kms::Client::new(sdk_config),
            key_id,
        }
    }

    fn key_id(&self) -> Result<&str, SealError> {
        self.key_id.as_deref().ok_or_else(|| {
            SealError::Unavailable(format!(
                "environment variable {SEALING_KEY_ENV} is not set: no KMS key to seal credentials with"
            ))
        })
    }
}

#[async_trait]
impl CredentialSealer for KmsSealer {
    async fn seal(&self, context: &str, plaintext: &[u8]) -> Result<String, SealError> {
        check_sealable(plaintext)?;
        let output = self
            .client
            .encrypt()
            .key_id(self.key_id()?)
            .plaintext(Blob::new(plaintext))
            .encryption_context(CONTEXT_KEY, context)
            .send()
            .await
            .map_err(|e| SealError::Unavailable(format!("KMS Encrypt: {}", describe_sdk_error(&e))))?;
        let blob = output
            .ciphertext_blob()
            .ok_or_else(|| SealError::Unavailable("KMS Encrypt returned no ciphertext".into()))?;
        Ok(encode_sealed(VERSION_PREFIX, blob.as_ref()))
    }

    async fn open(&self, context: &str, sealed: &str) -> Result<Vec<u8>, SealError> {
        let blob = decode_sealed(VERSION_PREFIX, sealed)?;
        let output = self
            .client
            .decrypt()
            .key_id(self.key_id()?)
            .ciphertext_blob(Blob::new(blob))
            .encryption_context(CONTEXT_KEY, context)
            .send()
            .await
            .map_err(|e| {
                let message = format!("KMS Decrypt: {}", describe_sdk_error(&e));
                match e.as_service_error() {
                    Some(service)
                        if service.is_invalid_ciphertext_exception() || service.is_incorrect_key_exception() =>
                    {
                        SealError::Corrupt(message)
                    }
                    _ => SealError::Unavailable(message),
                }
            })?;
        let plaintext = output
            .plaintext()
            .ok_or_else(|| SealError::Unavailable("KMS Decrypt returned no plaintext".into()))?;
        Ok(plaintext.as_ref().to_vec())
    }
}
