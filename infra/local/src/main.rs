//! `nimbus`: the local gateway (`nimbus serve`), API key administration (`nimbus keys …`) and the
//! batch client (`nimbus batch …`, for any OpenAI-compatible Batch API).

mod batch;
mod check_config;
mod config_file;
mod dev_webhook_secret;
mod dicl;
mod experiments;
mod keys;
mod serve;
mod webhook_secrets;

use clap::{Parser, Subcommand};
use std::path::PathBuf;
use std::process::ExitCode;

/// jemalloc hands freed memory back to the system within seconds (its background thread purges
/// idle pages), where glibc's malloc kept a burst of large requests' memory for good: see
/// "Memory under hostile load" in docs/benchmarks.md.
#[global_allocator]
static ALLOCATOR: tikv_jemallocator::Jemalloc = tikv_jemallocator::Jemalloc;

#[derive(Parser)]
#[command(
    name = "nimbus",
    version,
    about = "Nimbus LLM inference gateway: local server and admin"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Serve every function's routes on one port with the embedded adapters.
    Serve(serve::ServeArgs),
    /// Create, list and revoke API keys.
    #[command(subcommand)]
    Keys(keys::KeysCommand),
    /// Create, list and revoke a project's webhook signing secrets.
    #[command(subcommand)]
    WebhookSecrets(webhook_secrets::WebhookSecretsCommand),
    /// Run the janitor's due tasks once (what the scheduled poller does): expired files and
    /// uploads, abandoned direct uploads, orphaned bytes.
    Sweep(serve::SweepArgs),
    /// Run one pass of the scheduler (what the poller does): every scheduled task — the files
    /// sweep, batch recovery (finalize what is ready or overdue, run again what is stuck), … —,
    /// its report printed as JSON.
    Poll(serve::PollArgs),
    /// Print the OpenAPI 3.1 document of the HTTP surface (what `GET /openapi.json` serves;
    /// `make openapi` writes it to `docs/openapi.json`).
    Openapi,
    /// Submit, watch, fetch, list and cancel batches on Nimbus or any OpenAI-compatible Batch API
    /// (`--base-url`/`OPENAI_BASE_URL`, `--api-key`/`OPENAI_API_KEY`), with progress bars.
    Batch(batch::BatchArgs),
    /// Where a function's adaptive experiment stands: each variant's share of new episodes, its
    /// counted feedback, and the winner once there is one.
    Experiments(experiments::ExperimentsArgs),
    /// Build DICL variants' examples on a running gateway (`POST /dicl/build`).
    #[command(subcommand)]
    Dicl(dicl::DiclCommand),
    /// Check a configuration file and print its models.
    CheckConfig {
        /// Default: `infra/config/nimbus.toml` under the current directory, else the built-in one.
        #[arg(long, env = "NIMBUS_CONFIG")]
        config: Option<PathBuf>,
    },
}

#[tokio::main]
async fn main() -> anyhow::Result<ExitCode> {
    let cli = Cli::parse();
    if let Command::Batch(args) = cli.command {
        return Ok(batch::run(args).await);
    }
    admin(cli.command).await.map(|()| ExitCode::SUCCESS)
}

async fn admin(command: Command) -> anyhow::Result<()> {
    match command {
        Command::Batch(_) => Ok(()),
        Command::Serve(args) => serve::run(args).await,
        Command::Keys(command) => keys::run(command).await,
        Command::WebhookSecrets(command) => webhook_secrets::run(command).await,
        Command::Sweep(args) => serve::sweep_once(args).await,
        Command::Poll(args) => serve::poll_once(args).await,
        Command::Experiments(args) => experiments::run(args).await,
        Command::Dicl(command) => dicl::run(command).await,
        Command::Openapi => {
            println!("{}", nimbus_shared::http::openapi_document::document_json());
            Ok(())
        }
        Command::CheckConfig { config } => {
            let (loaded, origin) = config_file::load(config.as_deref()).await?;
            eprintln!("{}", origin.describe());
            print!("{}", check_config::summary(&loaded));
            Ok(())
        }
    }
}
