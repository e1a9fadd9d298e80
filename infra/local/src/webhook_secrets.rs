//! `nimbus webhook-secrets create|list|revoke --project P` (and `dev`: the local development secret) against the embedded state (default)
//! or DynamoDB, like `nimbus keys`.

use crate::keys::{sealer, state_store, StoreArgs};
use clap::Subcommand;
use nimbus_shared::ports::{ProjectId, SystemClock, UuidV7Ids};
use nimbus_shared::webhooks::WebhookSecrets;
use std::sync::Arc;

#[derive(Subcommand)]
pub enum WebhookSecretsCommand {
    /// Create a secret for a project and print it once, as JSON. Older secrets keep signing for
    /// 24 hours (rotation).
    Create {
        #[arg(long)]
        project: String,
        #[command(flatten)]
        store: StoreArgs,
    },
    /// List a project's live secrets (masked, with their expiry), one JSON object per line.
    List {
        #[arg(long)]
        project: String,
        #[command(flatten)]
        store: StoreArgs,
    },
    /// Print the local server's development secret of project `default` (made by `nimbus serve`
    /// on its first start when that project has no secret).
    Dev {
        #[arg(long, env = "NIMBUS_DATA_DIR", default_value = ".data")]
        data_dir: std::path::PathBuf,
    },
    /// Revoke a secret by id: it stops signing (within 30 seconds in a running server).
    Revoke {
        id: String,
        #[arg(long)]
        project: String,
        #[command(flatten)]
        store: StoreArgs,
    },
}

async fn service(store: &StoreArgs) -> anyhow::Result<WebhookSecrets> {
    Ok(WebhookSecrets::new(
        state_store(store).await?,
        Arc::new(SystemClock),
        Arc::new(UuidV7Ids),
        sealer(store).await?,
    ))
}

pub async fn run(command: WebhookSecretsCommand) -> anyhow::Result<()> {
    match command {
        WebhookSecretsCommand::Create { project, store } => {
            let created = service(&store).await?.create(&ProjectId::new(project)).await?;
            println!("{}", serde_json::to_string(&created)?);
        }
        WebhookSecretsCommand::List { project, store } => {
            for secret in service(&store).await?.list(&ProjectId::new(project)).await? {
                println!("{}", serde_json::to_string(&secret)?);
            }
        }
        WebhookSecretsCommand::Dev { data_dir } => match crate::dev_webhook_secret::read(&data_dir)? {
            Some(secret) => println!("{secret}"),
            None => anyhow::bail!(
                "no development webhook secret in {}: `nimbus serve` makes one on its first start",
                data_dir.display()
            ),
        },
        WebhookSecretsCommand::Revoke { id, project, store } => {
            let revoked = service(&store).await?.revoke(&ProjectId::new(project), &id).await?;
            println!("{}", serde_json::to_string(&revoked)?);
        }
    }
    Ok(())
}
