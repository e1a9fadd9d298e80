//! Provider keys of the embedded stack: the parameter `/nimbus/openai-api-key` is the file
//! `<data dir>/parameters/nimbus/openai-api-key` (its content, surrounding whitespace trimmed), so
//! a config naming `ssm::` keys for a deployment runs locally too. `env::` keys need none of this.

use crate::ports::{check_parameter_name, ProviderSecrets, SecretError, SecretValue};
use async_trait::async_trait;
use std::path::{Path, PathBuf};

/// The folder of the data directory holding the parameters.
pub(crate) const PARAMETERS_DIR: &str = "parameters";

/// [`ProviderSecrets`] over files under a data directory.
#[derive(Debug, Clone)]
pub(crate) struct LocalParameters {
    root: PathBuf,
}

impl LocalParameters {
    /// Parameters under `data_dir`/[`PARAMETERS_DIR`]; nothing is read until asked.
    pub fn in_data_dir(data_dir: &Path) -> Self {
        Self {
            root: data_dir.join(PARAMETERS_DIR),
        }
    }

    /// The file of parameter `name`: each `/`-separated segment a path component. Only a name
    /// [`check_parameter_name`] takes (never `.`, `..` or empty segments), so the lookup stays
    /// inside the folder.
    fn path_of(&self, name: &str) -> Option<PathBuf> {
        check_parameter_name(name).ok()?;
        Some(name.split('/').skip(1).fold(self.root.clone(), |path, s| path.join(s)))
    }
}

#[async_trait]
impl ProviderSecrets for LocalParameters {
    async fn parameter(&self, name: &str) -> Result<SecretValue, SecretError> {
        let Some(path) = self.path_of(name) else {
            return Err(SecretError::NotFound {
                name: name.to_owned(),
                hint: " (not a parameter name: `/` then letters, digits and `_.-` segments)".to_owned(),
            });
        };
        let not_found = || SecretError::NotFound {
            name: name.to_owned(),
            hint: format!(": write the key to {}", path.display()),
        };
        match tokio::fs::read_to_string(&path).await {
            Ok(text) if !text.trim().is_empty() => Ok(SecretValue::new(text.trim())),
            Ok(_) => Err(not_found()),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Err(not_found()),
            Err(e) if e.kind() == std::io::ErrorKind::PermissionDenied => Err(SecretError::Denied {
                name: name.to_owned(),
                reason: format!("{}: {e}", path.display()),
            }),
            Err(e) => Err(SecretError::Unavailable {
                name: name.to_owned(),
                reason: format!("{}: {e}", path.display()),
            }),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_parameter_is_a_file_under_the_data_directory() {
        let dir = tempfile::tempdir().unwrap();
        let store = LocalParameters::in_data_dir(dir.path());
        let file = dir.path().join("parameters/nimbus/openai-api-key");
        std::fs::create_dir_all(file.parent().unwrap()).unwrap();
        std::fs::write(&file, "sk-local\n").unwrap();
        let value = store.parameter("/nimbus/openai-api-key").await.unwrap();
        assert_eq!(value.expose(), "sk-local");
    }

    #[tokio::test]
    async fn a_missing_parameter_names_the_file_to_write() {
        let dir = tempfile::tempdir().unwrap();
        let store = LocalParameters::in_data_dir(dir.path());
        let err = store.parameter("/nimbus/absent").await.unwrap_err();
        let SecretError::NotFound { name, hint } = &err else {
            panic!("{err:?}")
        };
        assert_eq!(name, "/nimbus/absent");
        assert!(hint.contains("parameters/nimbus/absent"), "{err}");
    }

    #[tokio::test]
    async fn names_cannot_leave_the_parameters_folder() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("secret"), "outside").unwrap();
        let store = LocalParameters::in_data_dir(dir.path());
        for name in ["/../secret", "/nimbus/../../secret", "relative", "/a//b", "/a/./b"] {
            let err = store.parameter(name).await.unwrap_err();
            assert!(matches!(err, SecretError::NotFound { .. }), "{name}: {err:?}");
        }
    }
}
