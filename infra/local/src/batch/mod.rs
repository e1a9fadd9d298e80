//! `nimbus batch`: submit, watch, fetch, list and cancel batches on Nimbus or any
//! OpenAI-compatible Batch API.
//!
//! Standard output carries only the answer (a batch id, or with `--json` one JSON document);
//! messages and progress go to standard error. Exit codes: see [`console::Exit`].

mod api_client;
mod commands;
mod console;
mod interrupt;
mod preflight;
mod results;
mod transfer;
mod watch;

use clap::{Args, Subcommand};
use console::{CliError, Console, Exit};
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

#[derive(Args)]
pub struct BatchArgs {
    /// The API's base URL, with its version path.
    #[arg(
        long,
        env = "OPENAI_BASE_URL",
        default_value = "http://127.0.0.1:3000/v1",
        global = true
    )]
    base_url: String,
    /// The API key, sent as `Authorization: Bearer …` (none for an open local gateway).
    #[arg(long, env = "OPENAI_API_KEY", hide_env_values = true, global = true)]
    api_key: Option<String>,
    /// Print the answer as one JSON document on stdout (the batch object, or the list).
    #[arg(long, global = true)]
    json: bool,
    #[command(subcommand)]
    command: BatchCommand,
}

#[derive(Subcommand)]
enum BatchCommand {
    /// Check a JSONL input file as the server would, upload it, create the batch and print its
    /// id. Nothing is uploaded when the file fails the checks.
    Submit(SubmitArgs),
    /// Follow a batch until it ends (exit code by its final status). Ctrl-C stops watching and
    /// leaves the batch running.
    Watch {
        id: String,
        #[command(flatten)]
        poll: PollArgs,
    },
    /// Download a batch's results (and errors), optionally in the input file's order.
    Results(ResultsArgs),
    /// List batches, newest first.
    List {
        /// Batches per page (1 to 100).
        #[arg(long, default_value_t = 20, value_parser = clap::value_parser!(u32).range(1..=100))]
        limit: u32,
        /// Start after this batch id.
        #[arg(long)]
        after: Option<String>,
        /// Every page, not only the first.
        #[arg(long)]
        all: bool,
    },
    /// Cancel a batch: requests not yet run are not run; finished results are kept.
    Cancel { id: String },
}

#[derive(Args)]
struct SubmitArgs {
    /// The input file: one request per line (`custom_id`, `method`, `url`, `body`).
    file: PathBuf,
    /// The endpoint every line targets.
    #[arg(long, default_value = "/v1/chat/completions")]
    endpoint: String,
    /// The completion window: `24h` (up to `168h` on Nimbus).
    #[arg(long, default_value = "24h")]
    window: String,
    /// Metadata pairs (at most 16), repeatable.
    #[arg(long = "metadata", value_name = "KEY=VALUE")]
    metadata: Vec<String>,
    /// Makes the submission safe to repeat: the same key returns the batch the first one created
    /// (one is made up for each run otherwise, so its own retries never create twice).
    #[arg(long)]
    idempotency_key: Option<String>,
    /// Files larger than this go up in parts through the Uploads API. Accepts `KiB`/`MiB`.
    #[arg(long, default_value = "4MiB", value_parser = parse_part_size)]
    part_size: u64,
    /// Watch the batch after creating it (exit code by its final status).
    #[arg(long)]
    watch: bool,
    #[command(flatten)]
    poll: PollArgs,
}

#[derive(Args)]
struct PollArgs {
    /// Seconds between polls.
    #[arg(long, default_value = "2", value_parser = parse_interval)]
    interval: Duration,
}

#[derive(Args)]
struct ResultsArgs {
    id: String,
    /// Where the output file (successful requests) goes.
    #[arg(short, long)]
    output: PathBuf,
    /// Where the error file (failed requests) goes.
    #[arg(long)]
    errors: Option<PathBuf>,
    /// Write results in the order of this input file's lines (matched on `custom_id`).
    #[arg(long, value_name = "INPUT.jsonl")]
    in_input_order: Option<PathBuf>,
}

/// The smallest part worth a request, and the Uploads API's largest.
const MIN_PART_BYTES: u64 = 64 * 1024;

/// A command-line value `nimbus batch` cannot use; clap prints it beside the flag.
#[derive(Debug, PartialEq, Eq, thiserror::Error)]
enum ArgError {
    #[error("unknown unit '{0}': use bytes, KiB or MiB")]
    Unit(String),
    #[error("'{0}' is not a size")]
    Size(String),
    #[error("a part is 64KiB to {0}MiB")]
    PartSize(u64),
    #[error("'{0}' is not a number of seconds from 0.05 to 3600")]
    Interval(String),
}

fn parse_part_size(text: &str) -> Result<u64, ArgError> {
    let text = text.trim();
    let (digits, unit) = match text.find(|c: char| !c.is_ascii_digit()) {
        Some(at) => text.split_at(at),
        None => (text, ""),
    };
    let scale = match unit.trim().to_ascii_lowercase().as_str() {
        "" | "b" => 1,
        "k" | "kib" => 1024,
        "m" | "mib" => 1024 * 1024,
        other => return Err(ArgError::Unit(other.to_owned())),
    };
    let bytes = digits
        .parse::<u64>()
        .ok()
        .and_then(|n| n.checked_mul(scale))
        .ok_or_else(|| ArgError::Size(text.to_owned()))?;
    let max = nimbus_shared::files::MAX_PART_BYTES;
    if (MIN_PART_BYTES..=max).contains(&bytes) {
        Ok(bytes)
    } else {
        Err(ArgError::PartSize(max / 1024 / 1024))
    }
}

fn parse_interval(text: &str) -> Result<Duration, ArgError> {
    text.parse::<f64>()
        .ok()
        .filter(|seconds| (0.05..=3600.0).contains(seconds))
        .map(Duration::from_secs_f64)
        .ok_or_else(|| ArgError::Interval(text.to_owned()))
}

pub async fn run(args: BatchArgs) -> ExitCode {
    let console = Console::new(args.json);
    let interrupt = interrupt::Interrupt::listen();
    let outcome = match api_client::BatchApi::new(&args.base_url, args.api_key) {
        Err(err) => Err(CliError::from(err)),
        Ok(api) => {
            let context = commands::Context {
                api: &api,
                console: &console,
                interrupt: &interrupt,
            };
            match args.command {
                BatchCommand::Submit(submit) => commands::submit(&context, submit).await,
                BatchCommand::Watch { id, poll } => commands::watch(&context, &id, poll.interval).await,
                BatchCommand::Results(results) => commands::results(&context, results).await,
                BatchCommand::List { limit, after, all } => commands::list(&context, limit, after, all).await,
                BatchCommand::Cancel { id } => commands::cancel(&context, &id).await,
            }
        }
    };
    match outcome {
        Ok(exit) => exit.into(),
        Err(CliError::Interrupted) => {
            console.say("interrupted");
            Exit::Interrupted.into()
        }
        Err(err) => {
            console.failure(&err);
            Exit::Failed.into()
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn part_sizes_take_binary_units_within_the_uploads_api_limits() {
        assert_eq!(parse_part_size("4MiB"), Ok(4 * 1024 * 1024));
        assert_eq!(parse_part_size("512KiB"), Ok(512 * 1024));
        assert_eq!(parse_part_size("65536"), Ok(65_536));
        assert_eq!(parse_part_size("64m"), Ok(64 * 1024 * 1024));
        for bad in ["65MiB", "1KiB", "4GB", "x", "", "-4MiB"] {
            assert!(parse_part_size(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn intervals_are_seconds() {
        assert_eq!(parse_interval("0.5"), Ok(Duration::from_millis(500)));
        assert!(parse_interval("0").is_err());
        assert!(parse_interval("soon").is_err());
    }
}
