//! Where a Lambda function reads its configuration: `NIMBUS_CONFIG_SOURCE` is `bundled` (the
//! default config compiled into the binary, i.e. the deployment package), a file path, or
//! `s3://bucket/key` (read once at init).

use crate::config::Config;

/// The default configuration, as shipped in `infra/config/nimbus.toml`.
pub const BUNDLED_CONFIG: &str = include_str!("../../../infra/config/nimbus.toml");

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ConfigSource {
    Bundled,
    File(String),
    S3 { bucket: String, key: String },
}

impl ConfigSource {
    pub fn parse(text: &str) -> Result<Self, String> {
        let text = text.trim();
        if text.is_empty() || text == "bundled" {
            return Ok(Self::Bundled);
        }
        if let Some(rest) = text.strip_prefix("s3://") {
            return match rest.split_once('/') {
                Some((bucket, key)) if !bucket.is_empty() && !key.is_empty() => Ok(Self::S3 {
                    bucket: bucket.to_owned(),
                    key: key.to_owned(),
                }),
                _ => Err(format!("invalid config source `{text}`: expected s3://bucket/key")),
            };
        }
        Ok(Self::File(text.to_owned()))
    }

    pub fn from_env() -> Result<Self, String> {
        Self::parse(&std::env::var("NIMBUS_CONFIG_SOURCE").unwrap_or_default())
    }

    /// Read and validate the configuration.
    pub async fn load(&self, sdk_config: &aws_config::SdkConfig) -> Result<Config, String> {
        match self {
            Self::Bundled => Config::from_toml(BUNDLED_CONFIG).map_err(|e| e.to_string()),
            Self::File(path) => Config::from_path(std::path::Path::new(path)).map_err(|e| e.to_string()),
            Self::S3 { bucket, key } => {
                let client = aws_sdk_s3::Client::new(sdk_config);
                let object = client.get_object().bucket(bucket).key(key).send().await.map_err(|e| {
                    format!(
                        "cannot read config s3://{bucket}/{key}: {}",
                        crate::adapters::aws::describe_sdk_error(&e)
                    )
                })?;
                let bytes = object
                    .body
                    .collect()
                    .await
                    .map_err(|e| format!("cannot read config s3://{bucket}/{key}: {e}"))?
                    .into_bytes();
                let text = String::from_utf8(bytes.to_vec())
                    .map_err(|_| format!("config s3://{bucket}/{key} is not UTF-8"))?;
                Config::from_toml(&text).map_err(|e| e.to_string())
            }
        }
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
        assert_eq!(
            ConfigSource::parse("/opt/nimbus.toml").unwrap(),
            ConfigSource::File("/opt/nimbus.toml".into())
        );
    }
}
