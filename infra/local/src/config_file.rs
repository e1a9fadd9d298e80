//! Which configuration a local command reads: `--config FILE` (`NIMBUS_CONFIG`) when given; else
//! `infra/config/nimbus.toml` under the current directory (the repository root, where `make run`
//! starts), so edits there apply; else the same default configuration compiled into the binary
//! (what the Lambda functions read with `ConfigSource=bundled`), which a server started anywhere
//! else (an installed `nimbus`) says it uses.

use anyhow::Context;
use nimbus_shared::app::{load_bundled_config, load_local_config, LoadedConfig};
use std::path::{Path, PathBuf};

/// The default config file, relative to the repository root.
pub(crate) const DEFAULT_CONFIG_PATH: &str = "infra/config/nimbus.toml";

/// Where a configuration was read from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum ConfigOrigin {
    File(PathBuf),
    Bundled,
}

impl ConfigOrigin {
    /// `explicit` when given, else the default path when it exists under `cwd`, else bundled.
    pub(crate) fn choose(explicit: Option<&Path>, cwd: &Path) -> Self {
        match explicit {
            Some(path) => Self::File(path.to_owned()),
            None if cwd.join(DEFAULT_CONFIG_PATH).is_file() => Self::File(PathBuf::from(DEFAULT_CONFIG_PATH)),
            None => Self::Bundled,
        }
    }

    /// The line a server prints about where its configuration came from.
    pub(crate) fn describe(&self) -> String {
        match self {
            Self::File(path) => format!("config: {}", path.display()),
            Self::Bundled => format!(
                "config: the default configuration built into this binary ({DEFAULT_CONFIG_PATH} is not under \
                 the current directory); pass --config FILE or set NIMBUS_CONFIG=FILE to use another"
            ),
        }
    }
}

/// The configuration `explicit` (or the default) names, read and validated, and where it came from.
pub(crate) async fn load(explicit: Option<&Path>) -> anyhow::Result<(LoadedConfig, ConfigOrigin)> {
    let cwd = std::env::current_dir().unwrap_or_default();
    let origin = ConfigOrigin::choose(explicit, &cwd);
    let loaded = match &origin {
        ConfigOrigin::File(path) => load_local_config(path)
            .await
            .with_context(|| format!("loading {} (--config / NIMBUS_CONFIG)", path.display()))?,
        ConfigOrigin::Bundled => load_bundled_config()
            .await
            .context("loading the built-in default configuration")?,
    };
    Ok((loaded, origin))
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn an_explicit_file_wins_then_the_repository_default_then_the_built_in_one() {
        let repo = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
        let elsewhere = tempfile::tempdir().unwrap();
        assert_eq!(
            ConfigOrigin::choose(Some(Path::new("my.toml")), elsewhere.path()),
            ConfigOrigin::File("my.toml".into())
        );
        assert_eq!(
            ConfigOrigin::choose(None, &repo),
            ConfigOrigin::File(DEFAULT_CONFIG_PATH.into())
        );
        assert_eq!(ConfigOrigin::choose(None, elsewhere.path()), ConfigOrigin::Bundled);
        assert!(ConfigOrigin::Bundled.describe().contains("--config FILE"));
    }

    #[tokio::test]
    async fn the_built_in_default_loads() {
        // `cargo test` runs in infra/local, which holds no infra/config: the bundled branch.
        let (loaded, origin) = load(None).await.unwrap();
        assert_eq!(origin, ConfigOrigin::Bundled);
        assert!(loaded.config.models.contains_key("dummy"));
    }
}
