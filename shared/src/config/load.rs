//! Reading a whole configuration: the TOML, then every file it references — at start-up, so that a
//! bad file stops the process with the key that names it. The functions layer compiles what was
//! read (`app::load_config` does both).

use super::files::{normalise_config_path, ConfigFiles, LocalConfigFiles};
use super::{Config, ConfigError};
use std::collections::BTreeMap;
use std::path::Path;

/// A validated configuration and the text of every file it references, by normalised path.
#[derive(Debug, Clone)]
pub struct ConfigSources {
    pub config: Config,
    pub files: BTreeMap<String, String>,
}

/// The TOML file's name in the bundled config directory (`infra/config/`).
pub(crate) const BUNDLED_CONFIG_FILE: &str = "nimbus.toml";

/// Read `toml_name` from `files`, then every file it references (relative to the same directory).
pub(crate) async fn read_config(files: &dyn ConfigFiles, toml_name: &str) -> Result<ConfigSources, ConfigError> {
    let text = read_text(files, toml_name).await?;
    let config = Config::from_toml(&text)?;
    // Each file once, under the first key that names it; read concurrently (from S3, each read is
    // a round trip in the Lambda's init).
    let mut wanted = BTreeMap::new();
    for (key, path) in config.referenced_files() {
        let path = normalise_config_path(&key, &path)?;
        wanted.entry(path).or_insert(key);
    }
    let reads = wanted.into_iter().map(|(path, key)| async move {
        let text = read_text(files, &path)
            .await
            .map_err(|e| ConfigError::invalid(&key, e.to_string()))?;
        Ok::<_, ConfigError>((path, text))
    });
    let files = futures::future::try_join_all(reads).await?.into_iter().collect();
    Ok(ConfigSources { config, files })
}

/// [`read_config`] of the configuration compiled into the binaries (`infra/config/`).
pub(crate) async fn read_bundled_config() -> Result<ConfigSources, ConfigError> {
    read_config(&super::files::BundledConfigFiles::default(), BUNDLED_CONFIG_FILE).await
}

/// [`read_config`] for a TOML file on disk; referenced files resolve against its directory.
pub(crate) async fn read_local_config(path: &Path) -> Result<ConfigSources, ConfigError> {
    let dir = path.parent().map(Path::to_path_buf).unwrap_or_default();
    let name = path
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    read_config(&LocalConfigFiles::new(dir), &name).await
}

async fn read_text(files: &dyn ConfigFiles, path: &str) -> Result<String, ConfigError> {
    let bytes = files.read(path).await?;
    String::from_utf8(bytes).map_err(|_| ConfigError::Read {
        path: path.to_owned(),
        message: "not UTF-8".to_owned(),
    })
}

impl Config {
    /// Every file the config references: `(key path, path as written)`.
    pub(crate) fn referenced_files(&self) -> Vec<(String, String)> {
        let mut files = Vec::new();
        for (name, tool) in &self.tools {
            files.push((format!("tools.{name}.parameters"), tool.parameters.clone()));
        }
        for (name, function) in &self.functions {
            let key = format!("functions.{name}");
            for (_, suffix, path) in function.schema_paths() {
                files.push((format!("{key}.{suffix}"), path.to_owned()));
            }
            if let Some(path) = &function.output_schema {
                files.push((format!("{key}.output_schema"), path.clone()));
            }
            for (variant_name, variant) in &function.variants {
                for (suffix, path) in variant.file_paths() {
                    files.push((format!("{key}.variants.{variant_name}.{suffix}"), path.to_owned()));
                }
            }
        }
        files
    }
}
