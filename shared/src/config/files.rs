//! Where the files of a configuration come from: the TOML and the templates and schemas it
//! references, all relative to the TOML's directory. Local directories and the bundled copy are
//! here, and [`BlobConfigFiles`] reads a prefix of any [`BlobStore`] (S3 in Lambda).

use super::ConfigError;
#[cfg(feature = "aws")]
use crate::ports::BlobStore;
use async_trait::async_trait;
use std::path::PathBuf;
#[cfg(feature = "aws")]
use std::sync::Arc;

/// The default configuration directory (`infra/config/`), compiled into the binary so that its
/// templates and schemas ship with every Lambda function.
pub(crate) static BUNDLED_CONFIG_DIR: include_dir::Dir<'static> =
    include_dir::include_dir!("$CARGO_MANIFEST_DIR/../infra/config");

/// Reads files of one configuration directory.
#[async_trait]
pub(crate) trait ConfigFiles: Send + Sync {
    /// The file at `path`, a [`normalise_config_path`] result.
    async fn read(&self, path: &str) -> Result<Vec<u8>, ConfigError>;
}

/// `path` as written in the config, made relative to the config directory (`/`-separated, no
/// `.` or `..`). Absolute paths and paths leaving the directory are refused, so that the same
/// directory works locally, bundled and from S3.
pub(crate) fn normalise_config_path(key: &str, path: &str) -> Result<String, ConfigError> {
    if path.starts_with('/') || path.contains('\\') || path.contains(':') {
        return Err(ConfigError::invalid(
            key,
            "must be a path relative to the config file's directory, with `/` separators",
        ));
    }
    let mut parts: Vec<&str> = Vec::new();
    for part in path.split('/') {
        match part {
            "" | "." => {}
            ".." => {
                if parts.pop().is_none() {
                    return Err(ConfigError::invalid(
                        key,
                        "must stay inside the config file's directory",
                    ));
                }
            }
            other => parts.push(other),
        }
    }
    if parts.is_empty() {
        return Err(ConfigError::invalid(key, "must name a file"));
    }
    Ok(parts.join("/"))
}

/// Files of a directory on disk.
#[derive(Debug, Clone)]
pub(crate) struct LocalConfigFiles {
    dir: PathBuf,
}

impl LocalConfigFiles {
    pub fn new(dir: impl Into<PathBuf>) -> Self {
        Self { dir: dir.into() }
    }
}

#[async_trait]
impl ConfigFiles for LocalConfigFiles {
    async fn read(&self, path: &str) -> Result<Vec<u8>, ConfigError> {
        let full = self.dir.join(path);
        tokio::fs::read(&full).await.map_err(|e| ConfigError::Read {
            path: full.display().to_string(),
            message: e.to_string(),
        })
    }
}

/// Files of a directory compiled into the binary ([`BUNDLED_CONFIG_DIR`] by default).
#[derive(Debug, Clone, Copy)]
pub(crate) struct BundledConfigFiles {
    dir: &'static include_dir::Dir<'static>,
}

impl BundledConfigFiles {
    pub fn new(dir: &'static include_dir::Dir<'static>) -> Self {
        Self { dir }
    }
}

impl Default for BundledConfigFiles {
    fn default() -> Self {
        Self::new(&BUNDLED_CONFIG_DIR)
    }
}

#[async_trait]
impl ConfigFiles for BundledConfigFiles {
    async fn read(&self, path: &str) -> Result<Vec<u8>, ConfigError> {
        self.dir
            .get_file(path)
            .map(|file| file.contents().to_vec())
            .ok_or_else(|| ConfigError::Read {
                path: format!("bundled:{path}"),
                message: "no such file in the bundled config directory".to_owned(),
            })
    }
}

/// Files under a key prefix of a blob store (e.g. `conf/` of an S3 bucket).
#[derive(Clone)]
#[cfg(feature = "aws")]
pub(crate) struct BlobConfigFiles {
    store: Arc<dyn BlobStore>,
    prefix: String,
    /// How locations are named in messages, e.g. `s3://bucket/`.
    display_root: String,
}

#[cfg(feature = "aws")]
impl BlobConfigFiles {
    /// `prefix` is empty or ends with `/`.
    #[cfg(feature = "aws")]
    pub fn new(store: Arc<dyn BlobStore>, prefix: impl Into<String>, display_root: impl Into<String>) -> Self {
        Self {
            store,
            prefix: prefix.into(),
            display_root: display_root.into(),
        }
    }
}

#[async_trait]
#[cfg(feature = "aws")]
impl ConfigFiles for BlobConfigFiles {
    async fn read(&self, path: &str) -> Result<Vec<u8>, ConfigError> {
        let key = format!("{}{path}", self.prefix);
        self.store
            .get(&key)
            .await
            .map(|bytes| bytes.to_vec())
            .map_err(|e| ConfigError::Read {
                path: format!("{}{key}", self.display_root),
                message: e.to_string(),
            })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn paths_are_normalised_inside_the_directory() {
        assert_eq!(normalise_config_path("k", "a/./b/../c.json").unwrap(), "a/c.json");
        assert_eq!(normalise_config_path("k", "./x.minijinja").unwrap(), "x.minijinja");
        for bad in ["/etc/passwd", "../x", "a/../../x", "", ".", "c:\\x", "a\\b"] {
            let err = normalise_config_path("functions.f.system_schema", bad).unwrap_err();
            assert!(err.to_string().contains("`functions.f.system_schema`"), "{bad}: {err}");
        }
    }

    #[tokio::test]
    async fn bundled_files_hold_the_default_config_and_its_files() {
        let files = BundledConfigFiles::default();
        let toml = files.read("nimbus.toml").await.unwrap();
        assert!(String::from_utf8(toml).unwrap().contains("[models."));
        assert!(files.read("no/such/file").await.is_err());
    }
}
