//! Where a Lambda function reads its configuration: `NIMBUS_CONFIG_SOURCE` is `bundled` (the
//! default config directory compiled into the binary, i.e. the deployment package), a file path,
//! or `s3://bucket/prefix/nimbus.toml` (read once at init). Templates and schemas the TOML
//! references are read from the same directory (or key prefix).

use crate::adapters::aws::S3BlobStore;
use crate::app::InitError;
use crate::app::{load_bundled_config, load_config, load_local_config, LoadedConfig};
use crate::config::BlobConfigFiles;
use std::sync::Arc;

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ConfigSource {
    Bundled,
    File(String),
    S3 { bucket: String, key: String },
}

impl ConfigSource {
    pub fn parse(text: &str) -> Result<Self, InitError> {
        let text = text.trim();
        if text.is_empty() || text == "bundled" {
            return Ok(Self::Bundled);
        }
        if let Some(rest) = text.strip_prefix("s3://") {
            return match rest.split_once('/') {
                Some((bucket, key)) if !bucket.is_empty() && !key.is_empty() && !key.ends_with('/') => Ok(Self::S3 {
                    bucket: bucket.to_owned(),
                    key: key.to_owned(),
                }),
                _ => Err(InitError::ConfigSource(text.to_owned())),
            };
        }
        Ok(Self::File(text.to_owned()))
    }

    pub fn from_env() -> Result<Self, InitError> {
        Self::parse(&std::env::var("NIMBUS_CONFIG_SOURCE").unwrap_or_default())
    }

    /// Read and validate the configuration and compile its functions.
    pub async fn load(&self, sdk_config: &aws_config::SdkConfig) -> Result<LoadedConfig, InitError> {
        let loaded = match self {
            Self::Bundled => load_bundled_config().await,
            Self::File(path) => load_local_config(std::path::Path::new(path)).await,
            Self::S3 { bucket, key } => {
                let (prefix, name) = match key.rsplit_once('/') {
                    Some((dir, name)) => (format!("{dir}/"), name),
                    None => (String::new(), key.as_str()),
                };
                let store = Arc::new(S3BlobStore::new(sdk_config, bucket.clone()));
                let files = BlobConfigFiles::new(store, prefix, format!("s3://{bucket}/"));
                load_config(&files, name).await
            }
        };
        Ok(loaded?)
    }
}

#[cfg(test)]
mod tests {
    use super::ConfigSource;

    #[test]
    fn parses_every_source() {
        assert_eq!(ConfigSource::parse("bundled").unwrap(), ConfigSource::Bundled);
        assert_eq!(ConfigSource::parse("").unwrap(), ConfigSource::Bundled);
        assert_eq!(
            ConfigSource::parse("s3://b/conf/nimbus.toml").unwrap(),
            ConfigSource::S3 {
                bucket: "b".into(),
                key: "conf/nimbus.toml".into()
            }
        );
        assert!(ConfigSource::parse("s3://bucket-only").is_err());
        assert!(ConfigSource::parse("s3://bucket/prefix/").is_err());
        assert_eq!(
            ConfigSource::parse("/opt/nimbus.toml").unwrap(),
            ConfigSource::File("/opt/nimbus.toml".into())
        );
    }

    #[tokio::test]
    async fn the_bundled_config_loads_with_its_functions() {
        let sdk_config = aws_config::SdkConfig::builder().build();
        let loaded = ConfigSource::Bundled.load(&sdk_config).await.unwrap();
        assert_eq!(loaded.functions.functions().count(), 3);
        assert!(loaded.config.functions.contains_key("draft_email"));
    }
}
