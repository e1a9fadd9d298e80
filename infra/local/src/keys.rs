//! `nimbus keys create|list|revoke|reissue` against the embedded state (default) or DynamoDB.

use anyhow::Context;
use clap::{Subcommand, ValueEnum};
use nimbus_shared::app::embedded;
use nimbus_shared::auth::ApiKeyService;
use nimbus_shared::ports::{CredentialSealer, ProjectId, StateStore, SystemClock, UuidV7Ids};
use std::path::PathBuf;
use std::sync::Arc;

#[derive(Clone, Copy, ValueEnum)]
pub enum Backend {
    /// The local server's SQLite file under the data directory.
    Embedded,
    /// The DynamoDB table named by NIMBUS_TABLE (AWS credentials and region from the environment).
    Aws,
}

#[derive(clap::Args)]
pub struct StoreArgs {
    #[arg(long, env = "NIMBUS_BACKEND", value_enum, default_value = "embedded")]
    backend: Backend,
    #[arg(long, env = "NIMBUS_DATA_DIR", default_value = ".data")]
    data_dir: PathBuf,
}

#[derive(Subcommand)]
pub enum KeysCommand {
    /// Create a key for a project and print it once, as JSON.
    Create {
        #[arg(long)]
        project: String,
        #[arg(long)]
        name: Option<String>,
        #[command(flatten)]
        store: StoreArgs,
    },
    /// List keys (no secrets), one JSON object per line.
    List {
        #[command(flatten)]
        store: StoreArgs,
    },
    /// Revoke a key by id; requests with it fail from then on.
    Revoke {
        key_id: String,
        #[command(flatten)]
        store: StoreArgs,
    },
    /// Mint a new key for the project and name of key `key_id` and print it once, as JSON; the
    /// old key is revoked unless --keep-old. Replaces keys minted before keys carried a tag.
    Reissue {
        key_id: String,
        /// Leave the old key unrevoked (revoke it once its holders switched).
        #[arg(long)]
        keep_old: bool,
        #[command(flatten)]
        store: StoreArgs,
    },
}

/// The state store `store` names (also used by `nimbus webhook-secrets`).
pub async fn state_store(store: &StoreArgs) -> anyhow::Result<Arc<dyn StateStore>> {
    Ok(match store.backend {
        Backend::Embedded => Arc::new(
            embedded::state_store(&store.data_dir).with_context(|| format!("opening {}", store.data_dir.display()))?,
        ),
        Backend::Aws => aws_backend::state_store().await?,
    })
}

/// The sealer of secrets kept in the store `store` names (used by `nimbus webhook-secrets`): the
/// data directory's key file, or on AWS the stack's (`NIMBUS_SEALING_KEY_PARAMETER`, or
/// `NIMBUS_SEALING_KEY_ID` with `Sealing=kms`).
pub async fn sealer(store: &StoreArgs) -> anyhow::Result<Arc<dyn CredentialSealer>> {
    Ok(match store.backend {
        Backend::Embedded => Arc::new(embedded::sealer(&store.data_dir)),
        Backend::Aws => aws_backend::sealer().await?,
    })
}

/// The deployed stack's store and sealer, in a binary built with the `aws` feature.
#[cfg(feature = "aws")]
mod aws_backend {
    use nimbus_shared::app::aws;
    use nimbus_shared::ports::{CredentialSealer, StateStore};
    use std::sync::Arc;

    pub async fn state_store() -> anyhow::Result<Arc<dyn StateStore>> {
        Ok(Arc::new(aws::state_store().await.map_err(anyhow::Error::msg)?))
    }

    pub async fn sealer() -> anyhow::Result<Arc<dyn CredentialSealer>> {
        Ok(aws::sealer().await)
    }
}

/// Without the `aws` feature (`make run`'s build, `--no-default-features`) `--backend aws` says
/// how to get it.
#[cfg(not(feature = "aws"))]
mod aws_backend {
    use nimbus_shared::ports::{CredentialSealer, StateStore};
    use std::sync::Arc;

    const NOT_BUILT: &str = "this nimbus was built without AWS support (`make run` leaves it out): \
        `make install` (or `cargo build -p nimbus-local`) builds one with --backend aws";

    pub async fn state_store() -> anyhow::Result<Arc<dyn StateStore>> {
        anyhow::bail!(NOT_BUILT)
    }

    pub async fn sealer() -> anyhow::Result<Arc<dyn CredentialSealer>> {
        anyhow::bail!(NOT_BUILT)
    }
}

async fn service(store: &StoreArgs) -> anyhow::Result<ApiKeyService> {
    Ok(ApiKeyService::new(
        state_store(store).await?,
        Arc::new(SystemClock),
        Arc::new(UuidV7Ids),
    ))
}

pub async fn run(command: KeysCommand) -> anyhow::Result<()> {
    match command {
        KeysCommand::Create { project, name, store } => {
            let created = service(&store).await?.create(&ProjectId::new(project), name).await?;
            println!("{}", serde_json_line(&created)?);
        }
        KeysCommand::List { store } => {
            for key in service(&store).await?.list().await? {
                println!("{}", serde_json_line(&key)?);
            }
        }
        KeysCommand::Revoke { key_id, store } => {
            let revoked = service(&store).await?.revoke(&key_id).await?;
            println!("{}", serde_json_line(&revoked)?);
        }
        KeysCommand::Reissue {
            key_id,
            keep_old,
            store,
        } => {
            let created = service(&store).await?.reissue(&key_id, keep_old).await?;
            println!("{}", serde_json_line(&created)?);
        }
    }
    Ok(())
}

fn serde_json_line<T: serde::Serialize>(value: &T) -> anyhow::Result<String> {
    Ok(serde_json::to_string(value)?)
}
