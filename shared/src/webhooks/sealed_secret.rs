//! A signing secret at rest (a project's `webhook_secret` record, an endpoint's secrets): sealed
//! with the host's [`CredentialSealer`] (KMS on AWS, the local key file in the embedded stack),
//! bound to its record, with its mask beside it for listings, so reading a record shows neither
//! the secret nor what signs with it. Only the signers open it.
//!
//! Records written before sealing hold the `whsec_` string in plain text (`secret`): they are
//! still read and used, and sealed the next time their record is written.

use super::signing::SigningSecret;
use crate::ports::{CredentialSealer, SealError};
use serde::{Deserialize, Serialize};

/// The sealing context of a secret kept in the record `kind`/`id`: a sealed value copied into
/// another record does not open there.
pub(crate) fn context(kind: &str, id: &str) -> String {
    format!("{kind}/{id}")
}

/// A `whsec_` secret as stored (flattened into its record's body).
#[derive(Clone, Serialize, Deserialize, PartialEq, utoipa::ToSchema)]
pub(crate) struct StoredSigningSecret {
    /// The sealed `whsec_` string ([`CredentialSealer::seal`] under [`context`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    sealed: Option<String>,
    /// What listings show ([`SigningSecret::masked`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    masked: Option<String>,
    /// A record written before sealing: the secret itself.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    secret: Option<String>,
}

impl std::fmt::Debug for StoredSigningSecret {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("StoredSigningSecret")
            .field("sealed", &self.sealed.is_some())
            .field("masked", &self.masked())
            .finish()
    }
}

impl StoredSigningSecret {
    /// `secret` sealed for the record `context` names.
    pub(crate) async fn seal(
        sealer: &dyn CredentialSealer,
        context: &str,
        secret: &SigningSecret,
    ) -> Result<Self, SealError> {
        Ok(Self {
            sealed: Some(sealer.seal(context, secret.as_str().as_bytes()).await?),
            masked: Some(secret.masked()),
            secret: None,
        })
    }

    /// The secret, opened (or read, from a record written before sealing). A value that does not
    /// open, or is not a `whsec_` secret, is [`SealError::Corrupt`].
    pub(crate) async fn open(&self, sealer: &dyn CredentialSealer, context: &str) -> Result<SigningSecret, SealError> {
        let text = match (&self.sealed, &self.secret) {
            (Some(sealed), _) => String::from_utf8(sealer.open(context, sealed).await?)
                .map_err(|_| SealError::Corrupt("the opened secret is not text".into()))?,
            (None, Some(plain)) => plain.clone(),
            (None, None) => return Err(SealError::Corrupt("no secret stored".into())),
        };
        SigningSecret::parse(&text).map_err(|_| SealError::Corrupt("the stored secret is not a whsec_ secret".into()))
    }

    /// The form listings show (`whsec_ab…`).
    pub(crate) fn masked(&self) -> Option<String> {
        match (&self.masked, &self.secret) {
            (Some(masked), _) => Some(masked.clone()),
            (None, Some(plain)) => SigningSecret::parse(plain).ok().map(|s| s.masked()),
            (None, None) => None,
        }
    }

    /// Whether this is a record written before sealing (its secret in plain text).
    pub(crate) fn is_plain(&self) -> bool {
        self.sealed.is_none() && self.secret.is_some()
    }

    /// A plain-text secret sealed for `context` (unchanged when sealed already).
    pub(crate) async fn sealed_for(&self, sealer: &dyn CredentialSealer, context: &str) -> Result<Self, SealError> {
        if !self.is_plain() {
            return Ok(self.clone());
        }
        Self::seal(sealer, context, &self.open(sealer, context).await?).await
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use crate::adapters::embedded::LocalSealer;

    #[tokio::test]
    async fn a_sealed_secret_opens_only_in_its_record_and_hides_the_secret() {
        let dir = tempfile::tempdir().unwrap();
        let sealer = LocalSealer::in_data_dir(dir.path());
        let secret = SigningSecret::generate();
        let stored = StoredSigningSecret::seal(&sealer, "webhook_secret/wsec_1", &secret)
            .await
            .unwrap();
        let json = serde_json::to_string(&stored).unwrap();
        assert!(!json.contains(&secret.as_str()["whsec_".len()..]), "{json}");
        assert_eq!(stored.masked().unwrap(), secret.masked());
        let opened = stored.open(&sealer, "webhook_secret/wsec_1").await.unwrap();
        assert_eq!(opened.as_str(), secret.as_str());
        let err = stored.open(&sealer, "webhook_secret/wsec_2").await.unwrap_err();
        assert!(matches!(err, SealError::Corrupt(_)), "{err:?}");
        assert!(!format!("{stored:?}").contains(&secret.as_str()["whsec_".len()..]));
    }

    #[tokio::test]
    async fn a_plain_secret_of_an_older_record_is_read_and_sealed_on_request() {
        let dir = tempfile::tempdir().unwrap();
        let sealer = LocalSealer::in_data_dir(dir.path());
        let secret = SigningSecret::generate();
        let old: StoredSigningSecret = serde_json::from_value(serde_json::json!({"secret": secret.as_str()})).unwrap();
        assert!(old.is_plain());
        assert_eq!(old.masked().unwrap(), secret.masked());
        assert_eq!(old.open(&sealer, "c").await.unwrap().as_str(), secret.as_str());
        let sealed = old.sealed_for(&sealer, "c").await.unwrap();
        assert!(!sealed.is_plain());
        assert!(!serde_json::to_string(&sealed).unwrap().contains(secret.as_str()));
        assert_eq!(sealed.open(&sealer, "c").await.unwrap().as_str(), secret.as_str());
    }
}
