//! The local server's development webhook secret: on `make run` async webhooks are signed out of
//! the box. At start-up, when the open project (`default`) has no live secret, one is created,
//! kept in `<data dir>/webhook-dev-secret` (mode 0600) and printed; later starts print it again.
//! `nimbus webhook-secrets dev` shows it.

use anyhow::Context;
use nimbus_shared::ports::ProjectId;
use nimbus_shared::webhooks::WebhookSecrets;
use std::path::{Path, PathBuf};

/// The project of the open (keyless, loopback) server (`auth::authenticator::OPEN_PROJECT`).
const OPEN_PROJECT: &str = "default";

/// The file the development secret is kept in.
pub fn secret_file(data_dir: &Path) -> PathBuf {
    data_dir.join("webhook-dev-secret")
}

/// The development secret of `data_dir`, if one was made.
pub fn read(data_dir: &Path) -> anyhow::Result<Option<String>> {
    match std::fs::read_to_string(secret_file(data_dir)) {
        Ok(text) => Ok(Some(text.trim().to_owned())),
        Err(err) if err.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Err(err) => Err(err).with_context(|| format!("reading {}", secret_file(data_dir).display())),
    }
}

/// The line `nimbus serve` prints about the open project's webhook signing: the development
/// secret (created now if the project has no live secret and none was made before), or where the
/// project's own secrets come from.
pub async fn ensure(secrets: &WebhookSecrets, data_dir: &Path) -> anyhow::Result<String> {
    let project = ProjectId::new(OPEN_PROJECT);
    let kept = read(data_dir)?;
    let live = secrets.list(&project).await?;
    if let Some(secret) = kept.filter(|_| !live.is_empty()) {
        return Ok(format!(
            "webhooks: project `{OPEN_PROJECT}` signs with {secret} (development secret; `nimbus webhook-secrets dev` shows it)"
        ));
    }
    if !live.is_empty() {
        return Ok(format!(
            "webhooks: project `{OPEN_PROJECT}` signs with its {} secret(s) (`nimbus webhook-secrets list --project {OPEN_PROJECT}`)",
            live.len()
        ));
    }
    let created = secrets.create(&project).await?;
    write_private(&secret_file(data_dir), &created.secret)?;
    Ok(format!(
        "webhooks: project `{OPEN_PROJECT}` signs with {} (development secret, created now; `nimbus webhook-secrets dev` shows it)",
        created.secret
    ))
}

fn write_private(path: &Path, secret: &str) -> anyhow::Result<()> {
    use std::io::Write;
    let mut options = std::fs::OpenOptions::new();
    options.write(true).create(true).truncate(true);
    #[cfg(unix)]
    std::os::unix::fs::OpenOptionsExt::mode(&mut options, 0o600);
    let mut file = options
        .open(path)
        .with_context(|| format!("writing {}", path.display()))?;
    file.write_all(format!("{secret}\n").as_bytes())
        .with_context(|| format!("writing {}", path.display()))?;
    Ok(())
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use nimbus_shared::adapters::embedded::{LocalSealer, SqliteStateStore};
    use nimbus_shared::ports::{SystemClock, UuidV7Ids};
    use std::sync::Arc;

    fn secrets(dir: &Path) -> WebhookSecrets {
        WebhookSecrets::new(
            Arc::new(SqliteStateStore::in_memory().unwrap()),
            Arc::new(SystemClock),
            Arc::new(UuidV7Ids),
            Arc::new(LocalSealer::in_data_dir(dir)),
        )
    }

    #[tokio::test]
    async fn the_open_project_gets_one_development_secret_kept_across_starts() {
        let dir = tempfile::tempdir().unwrap();
        let secrets = secrets(dir.path());
        let first = ensure(&secrets, dir.path()).await.unwrap();
        let kept = read(dir.path()).unwrap().unwrap();
        assert!(kept.starts_with("whsec_") && first.contains(&kept), "{first}");
        let live = secrets
            .signing(&ProjectId::new(OPEN_PROJECT), i64::MAX / 4)
            .await
            .unwrap();
        assert_eq!(live.len(), 1, "the project signs with it");
        let again = ensure(&secrets, dir.path()).await.unwrap();
        assert!(again.contains(&kept), "{again}");
        assert_eq!(
            secrets.list(&ProjectId::new(OPEN_PROJECT)).await.unwrap().len(),
            1,
            "made once"
        );
    }

    #[tokio::test]
    async fn a_project_with_its_own_secret_gets_none() {
        let dir = tempfile::tempdir().unwrap();
        let secrets = secrets(dir.path());
        secrets.create(&ProjectId::new(OPEN_PROJECT)).await.unwrap();
        let line = ensure(&secrets, dir.path()).await.unwrap();
        assert!(line.contains("its 1 secret"), "{line}");
        assert!(read(dir.path()).unwrap().is_none());
    }
}
