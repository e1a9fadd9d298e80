//! `nimbus dicl build`: build a DICL variant's examples through a running gateway's
//! `POST /dicl/build` (the server holds the records, the embedding model's keys and the blob
//! store; the local server's data directory is locked while it runs).

use anyhow::{bail, Context};
use clap::{Args, Subcommand, ValueEnum};
use serde_json::{json, Value};
use std::time::Duration;

/// Embedding many inferences takes a while: one call's answer is waited for this long.
const BUILD_TIMEOUT: Duration = Duration::from_secs(900);

#[derive(Subcommand)]
pub enum DiclCommand {
    /// Embed the function's stored inferences (their output, or the latest demonstration on
    /// each) and make them the variant's examples; prints the server's report as JSON.
    Build(BuildArgs),
}

#[derive(Clone, Copy, ValueEnum)]
enum OutputSource {
    /// Each inference's own output.
    Inference,
    /// The latest demonstration given on each inference (`POST /feedback`); others are skipped.
    Demonstration,
}

#[derive(Args)]
pub struct BuildArgs {
    /// The function whose inferences become examples.
    #[arg(long)]
    function: String,
    /// Its variant of type `experimental_dynamic_in_context_learning`.
    #[arg(long)]
    variant: String,
    #[arg(long, value_enum, default_value = "inference")]
    output_source: OutputSource,
    /// Keep at most this many examples (the oldest inferences first).
    #[arg(long)]
    max_examples: Option<u64>,
    /// Add to the examples built before instead of refusing to replace them.
    #[arg(long, conflicts_with = "replace")]
    append: bool,
    /// Replace the examples built before.
    #[arg(long)]
    replace: bool,
    /// The gateway's base URL (its TensorZero routes sit at the root).
    #[arg(long, env = "NIMBUS_URL", default_value = "http://127.0.0.1:3000")]
    base_url: String,
    /// A Nimbus API key, sent as `Authorization: Bearer …` (none for an open local gateway).
    #[arg(long, env = "NIMBUS_API_KEY", hide_env_values = true)]
    api_key: Option<String>,
}

pub async fn run(command: DiclCommand) -> anyhow::Result<()> {
    match command {
        DiclCommand::Build(args) => build(args).await,
    }
}

async fn build(args: BuildArgs) -> anyhow::Result<()> {
    let mut url = url::Url::parse(&args.base_url).with_context(|| format!("invalid --base-url {}", args.base_url))?;
    if let Ok(mut path) = url.path_segments_mut() {
        path.pop_if_empty().extend(["dicl", "build"]);
    }
    let mut body = json!({
        "function_name": args.function,
        "variant_name": args.variant,
        "output_source": match args.output_source {
            OutputSource::Inference => "inference",
            OutputSource::Demonstration => "demonstration",
        },
        "append": args.append,
        "replace": args.replace,
    });
    if let Some(max) = args.max_examples {
        body["max_examples"] = json!(max);
    }
    let http = reqwest::Client::builder()
        .connect_timeout(Duration::from_secs(10))
        .timeout(BUILD_TIMEOUT)
        .build()?;
    let mut request = http.post(url.clone()).json(&body);
    if let Some(key) = args.api_key.filter(|key| !key.is_empty()) {
        request = request.bearer_auth(key);
    }
    let response = request.send().await.with_context(|| format!("could not reach {url}"))?;
    let status = response.status();
    let answer: Value = response
        .json()
        .await
        .with_context(|| format!("unexpected answer from {url} (HTTP {status})"))?;
    if !status.is_success() {
        let message = answer["error"]
            .as_str()
            .map_or_else(|| answer.to_string(), str::to_owned);
        bail!("{message} (HTTP {})", status.as_u16());
    }
    println!("{}", serde_json::to_string_pretty(&answer)?);
    Ok(())
}
