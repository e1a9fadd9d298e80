//! Why a host could not start. The message names what to fix: the environment variable, the
//! config key, the model.

use crate::auth::UntaggedKeysSettingError;
use crate::config::ConfigError;
use crate::http::public_url::InvalidPublicUrl;
use crate::providers::router::ProviderBuildError;

#[derive(Debug, thiserror::Error)]
pub enum InitError {
    #[error("environment variable {0} is not set")]
    MissingEnv(&'static str),
    #[error("NIMBUS_CONFIG_SOURCE: invalid config source `{0}`: expected s3://bucket/key")]
    ConfigSource(String),
    #[error(transparent)]
    Config(#[from] ConfigError),
    #[error(transparent)]
    Limit(#[from] super::limits::LimitSettingError),
    #[error(transparent)]
    UntaggedKeys(#[from] UntaggedKeysSettingError),
    #[error("NIMBUS_PUBLIC_URL: {0}")]
    PublicUrl(#[from] InvalidPublicUrl),
    #[error(transparent)]
    Providers(#[from] ProviderBuildError),
}
