//! Sealing secrets kept at rest (the dynamic credentials of provider-native batches, kept for as
//! long as their provider batches poll): encrypted, and bound to a context (the batch id).
use async_trait::async_trait;
use std::collections::HashMap;

#[derive(thiserror::Error, Debug, Clone, PartialEq)]
pub enum SealError {
    #[error("the sealed value cannot be opened: {0}")]
    Corrupt(String),
    #[error("the sealing service failed: {0}")]
    Unavailable(String),
}

impl From<SealError> for super::StorageError {
    fn from(err: SealError) -> Self {
        super::StorageError::Backend(err.to_string())
    }
}

#[async_trait]
pub trait CredentialSealer: Send + Sync {
    async fn seal(&self, context: &str, plaintext: &[u8]) -> Result<String, SealError>;
    async fn open(&self, context: &str, sealed: &str) -> Result<Vec<u8>, SealError>;
}

pub async fn seal_json(
    sealer: &dyn CredentialSealer,
    context: &str,
    values: &HashMap<String, String>,
) -> Result<String, SealError> {
    let text = serde_json::to_vec(values).map_err(|e| SealError::Corrupt(e.to_string()))?;
    sealer.seal(context, &text).await
}

pub async fn open_json(
    sealer: &dyn CredentialSealer,
    context: &str,
    sealed: &str,
) -> Result<HashMap<String, String>, SealError> {
    let text = sealer.open(context, sealed).await?;
    serde_json::from_slice(&text).map_err(|e| SealError::Corrupt(e.to_string()))
}
