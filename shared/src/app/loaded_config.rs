//! Loading a whole configuration: [`crate::config::read_config`] reads the TOML and every file it
//! references, then the functions layer compiles them (templates, schemas) — all at start-up, so
//! that a bad file stops the process with the key that names it.

use crate::config::{read_bundled_config, read_local_config, Config, ConfigError, ConfigSources};
#[cfg(feature = "aws")]
use crate::config::{read_config, ConfigFiles};
use crate::tensorzero::FunctionSet;
use std::path::Path;
use std::sync::Arc;

/// A validated configuration and its compiled functions.
#[derive(Debug, Clone)]
pub struct LoadedConfig {
    pub config: Config,
    pub functions: Arc<FunctionSet>,
}

impl LoadedConfig {
    /// A configuration that references no files (its functions, if any, use none).
    pub fn without_files(config: Config) -> Result<Self, ConfigError> {
        Self::compile(ConfigSources {
            config,
            files: Default::default(),
        })
    }

    /// Compile the functions of a configuration that was read with its files.
    pub fn compile(sources: ConfigSources) -> Result<Self, ConfigError> {
        let functions = Arc::new(FunctionSet::compile(&sources.config, &sources.files)?);
        Ok(Self {
            config: sources.config,
            functions,
        })
    }
}

/// Read `toml_name` from `files`, then every file it references, and compile the functions.
#[cfg(feature = "aws")]
pub(crate) async fn load_config(files: &dyn ConfigFiles, toml_name: &str) -> Result<LoadedConfig, ConfigError> {
    LoadedConfig::compile(read_config(files, toml_name).await?)
}

/// The configuration compiled into the binaries (`infra/config/`): what the Lambda functions use
/// with `ConfigSource=bundled` and a local command started away from the repository.
pub async fn load_bundled_config() -> Result<LoadedConfig, ConfigError> {
    LoadedConfig::compile(read_bundled_config().await?)
}

/// [`load_config`] for a TOML file on disk; referenced files resolve against its directory.
pub async fn load_local_config(path: &Path) -> Result<LoadedConfig, ConfigError> {
    LoadedConfig::compile(read_local_config(path).await?)
}
