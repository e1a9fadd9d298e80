//! Sealing secrets kept at rest: a caller's dynamic credentials (API keys given per request) stay
//! stored for as long as a provider-native batch polls, so they are encrypted with a key the
//! store never holds (a local key file in the embedded stack, a KMS key on AWS).
//!
//! A sealed value is bound to a *context* (e.g. the batch id): copied into another record, it does
//! not open there.

use super::StorageError;
use async_trait::async_trait;
use base64::engine::general_purpose::STANDARD as BASE64;
use base64::Engine as _;
use std::collections::HashMap;

/// The most bytes one seal takes (KMS's limit, kept by every adapter alike).
pub const MAX_SEALED_PLAINTEXT: usize = 4096;

/// Encrypts and decrypts small secrets bound to a context.
#[async_trait]
pub trait CredentialSealer: Send + Sync {
    /// Encrypt `plaintext` bound to `context` (e.g. a batch id: a sealed value copied to another
    /// record does not open there). Returns printable text (base64 with a version prefix).
    /// `plaintext` holds 1 to [`MAX_SEALED_PLAINTEXT`] bytes (else [`SealError::Unavailable`]).
    async fn seal(&self, context: &str, plaintext: &[u8]) -> Result<String, SealError>;

    /// Decrypt a value [`seal`](CredentialSealer::seal) returned for the same `context`.
    async fn open(&self, context: &str, sealed: &str) -> Result<Vec<u8>, SealError>;
}

/// Why sealing or opening failed.
#[derive(thiserror::Error, Debug, Clone, PartialEq)]
pub enum SealError {
    /// The value is malformed, was tampered with, belongs to another context or another key.
    #[error("the sealed value cannot be opened: {0}")]
    Corrupt(String),
    /// The key or the service holding it could not be used (missing configuration, I/O, network).
    #[error("the sealing service failed: {0}")]
    Unavailable(String),
}

impl From<SealError> for StorageError {
    /// A value that cannot be opened is invalid stored data (retrying does not help); an
    /// unavailable sealing service is a backend failure.
    fn from(err: SealError) -> Self {
        match err {
            SealError::Corrupt(_) => StorageError::Invalid(err.to_string()),
            SealError::Unavailable(_) => StorageError::Backend(err.to_string()),
        }
    }
}

/// Refuse a plaintext no adapter can seal: empty or longer than [`MAX_SEALED_PLAINTEXT`].
pub(crate) fn check_sealable(plaintext: &[u8]) -> Result<(), SealError> {
    if plaintext.is_empty() || plaintext.len() > MAX_SEALED_PLAINTEXT {
        return Err(SealError::Unavailable(format!(
            "cannot seal {} bytes: a sealed value holds 1 to {MAX_SEALED_PLAINTEXT} bytes",
            plaintext.len()
        )));
    }
    Ok(())
}

/// A sealed value as printable text: `prefix` (an adapter's format version, e.g. `v1.`) then
/// base64 of `bytes`.
pub(crate) fn encode_sealed(prefix: &str, bytes: &[u8]) -> String {
    format!("{prefix}{}", BASE64.encode(bytes))
}

/// The bytes of a value [`encode_sealed`] made with `prefix`; [`SealError::Corrupt`] for any other.
pub(crate) fn decode_sealed(prefix: &str, sealed: &str) -> Result<Vec<u8>, SealError> {
    let encoded = sealed
        .strip_prefix(prefix)
        .ok_or_else(|| SealError::Corrupt(format!("not a {prefix} sealed value")))?;
    BASE64
        .decode(encoded)
        .map_err(|e| SealError::Corrupt(format!("not base64: {e}")))
}

/// Seal a map of credentials (e.g. `{"openai_api_key": "sk-…"}`) as one value bound to `context`.
pub async fn seal_json(
    sealer: &dyn CredentialSealer,
    context: &str,
    credentials: &HashMap<String, String>,
) -> Result<String, SealError> {
    let plaintext = serde_json::to_vec(credentials)
        .map_err(|e| SealError::Unavailable(format!("credentials cannot be serialized: {e}")))?;
    sealer.seal(context, &plaintext).await
}

/// Open a value [`seal_json`] returned for the same `context`.
pub async fn open_json(
    sealer: &dyn CredentialSealer,
    context: &str,
    sealed: &str,
) -> Result<HashMap<String, String>, SealError> {
    let plaintext = sealer.open(context, sealed).await?;
    serde_json::from_slice(&plaintext)
        .map_err(|e| SealError::Corrupt(format!("the opened value is not a credentials map: {e}")))
}

/// A sealer for adapter sets that keep no credentials: every call fails with
/// [`SealError::Unavailable`] saying so. Hosts that run provider-native batches set a real one.
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct NoCredentialSealer;

#[async_trait]
impl CredentialSealer for NoCredentialSealer {
    async fn seal(&self, _context: &str, _plaintext: &[u8]) -> Result<String, SealError> {
        Err(no_sealer())
    }

    async fn open(&self, _context: &str, _sealed: &str) -> Result<Vec<u8>, SealError> {
        Err(no_sealer())
    }
}

fn no_sealer() -> SealError {
    SealError::Unavailable("no credential sealer is configured for this host".into())
}
