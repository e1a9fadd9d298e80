//! SSM Parameter Store, the process's one client of it: provider keys (`GetParameter` with
//! decryption) and the sealing data key (`ParameterKeySealer`: read, or made once). Provider keys: (a SecureString under the
//! AWS-managed `aws/ssm` key needs no KMS permission of the caller; a customer key needs
//! `kms:Decrypt` on it). The function's role may read the parameters under the stack's prefix only.

use super::describe_sdk_error;
use crate::ports::{ProviderSecrets, SecretError, SecretValue};
use async_trait::async_trait;
use aws_sdk_ssm::error::ProvideErrorMetadata;
use aws_sdk_ssm::types::{ParameterTier, ParameterType};

/// [`ProviderSecrets`] over SSM Parameter Store.
#[derive(Debug, Clone)]
pub struct SsmParameters {
    client: aws_sdk_ssm::Client,
}

impl SsmParameters {
    /// Makes no call: the first [`ProviderSecrets::parameter`] does.
    pub fn new(sdk_config: &aws_config::SdkConfig) -> Self {
        Self {
            client: aws_sdk_ssm::Client::new(sdk_config),
        }
    }

    /// Store `value` as a new standard-tier SecureString `name`, never overwriting: `Ok(false)` when
    /// the parameter already exists (another process made it first).
    pub(crate) async fn create_secure(&self, name: &str, description: &str, value: &str) -> Result<bool, SecretError> {
        let put = self
            .client
            .put_parameter()
            .name(name)
            .description(description)
            .value(value)
            .r#type(ParameterType::SecureString)
            .tier(ParameterTier::Standard)
            .overwrite(false)
            .send()
            .await;
        match put {
            Ok(_) => Ok(true),
            Err(err) if err.as_service_error().is_some_and(|e| e.is_parameter_already_exists()) => Ok(false),
            Err(err) => Err(SecretError::Unavailable {
                name: name.to_owned(),
                reason: describe_sdk_error(&err),
            }),
        }
    }
}

#[async_trait]
impl ProviderSecrets for SsmParameters {
    async fn parameter(&self, name: &str) -> Result<SecretValue, SecretError> {
        let output = self
            .client
            .get_parameter()
            .name(name)
            .with_decryption(true)
            .send()
            .await
            .map_err(|e| {
                let reason = describe_sdk_error(&e);
                let name = name.to_owned();
                match e.as_service_error() {
                    Some(service) if service.is_parameter_not_found() || service.is_parameter_version_not_found() => {
                        SecretError::NotFound {
                            name,
                            hint: " in SSM Parameter Store (put it with `aws ssm put-parameter --type SecureString`)"
                                .to_owned(),
                        }
                    }
                    Some(service) if service.is_invalid_key_id() || service.code() == Some("AccessDeniedException") => {
                        SecretError::Denied { name, reason }
                    }
                    _ => SecretError::Unavailable { name, reason },
                }
            })?;
        output
            .parameter()
            .and_then(|p| p.value())
            .filter(|v| !v.trim().is_empty())
            .map(|v| SecretValue::new(v.trim()))
            .ok_or_else(|| SecretError::NotFound {
                name: name.to_owned(),
                hint: " (SSM answered it with an empty value)".to_owned(),
            })
    }
}
