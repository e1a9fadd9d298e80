//! `nimbus-validate-bench`: stream one JSONL batch input file from disk through the batch engine's
//! input validation (`validate_input`), exactly as the `validate` job reads it (the embedded blob
//! store's `get_stream`), and print one JSON line:
//! `{bytes, lines, chunks, errors, seconds, mb_per_s, rss_before_kb, peak_rss_kb}`.
//!
//! The object is `<store>/objects/<key>` (the layout of `FileBlobStore`). Every `body.model` in
//! `--models` exists; any other model is a `model_not_found` error, as in the gateway.
//!
//!     nimbus-validate-bench --store /tmp/x --key input.jsonl --models dummy

use clap::Parser;
use nimbus_shared::adapters::embedded::FileBlobStore;
use nimbus_shared::batches::input_validation::{validate_input, BatchEndpoint, ChunkLimits};
use nimbus_shared::ports::BlobStore;
use serde_json::json;
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Instant;

#[derive(Parser)]
struct Args {
    /// Root of the blob store; the file is `<store>/objects/<key>`.
    #[arg(long)]
    store: PathBuf,
    /// Key of the input object.
    #[arg(long)]
    key: String,
    /// `/v1/chat/completions` or `/v1/embeddings`.
    #[arg(long, default_value = "/v1/chat/completions")]
    endpoint: String,
    /// Models that exist (comma-separated).
    #[arg(long, default_value = "dummy")]
    models: String,
    /// `[batches] lines_per_chunk`.
    #[arg(long, default_value_t = 1000)]
    lines_per_chunk: u64,
    /// `[batches] max_chunk_bytes`.
    #[arg(long, default_value_t = 8 * 1024 * 1024)]
    max_chunk_bytes: u64,
}

/// A `VmRSS:`/`VmHWM:` line of /proc/self/status, in KiB (0 where there is no /proc).
fn proc_status_kb(field: &str) -> u64 {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|status| {
            status
                .lines()
                .find_map(|line| line.strip_prefix(field))
                .and_then(|rest| rest.split_whitespace().next())
                .and_then(|kb| kb.parse().ok())
        })
        .unwrap_or(0)
}

async fn run(args: Args) -> anyhow::Result<serde_json::Value> {
    let endpoint =
        BatchEndpoint::parse(&args.endpoint).ok_or_else(|| anyhow::anyhow!("unknown endpoint {}", args.endpoint))?;
    let models: Vec<String> = args.models.split(',').map(|m| m.trim().to_owned()).collect();
    let model_exists = |model: &str| models.iter().any(|m| m == model);
    let limits = ChunkLimits {
        lines: args.lines_per_chunk,
        bytes: args.max_chunk_bytes,
    };
    let bytes = std::fs::metadata(args.store.join("objects").join(&args.key))
        .map_err(|e| anyhow::anyhow!("{}: {e}", args.key))?
        .len();
    let store = FileBlobStore::open(&args.store)?;
    let rss_before_kb = proc_status_kb("VmRSS:");

    let start = Instant::now();
    let stream = store.get_stream(&args.key).await?;
    let report = validate_input(stream, endpoint, &model_exists, limits).await?;
    let seconds = start.elapsed().as_secs_f64();

    Ok(json!({
        "bytes": bytes,
        "lines": report.total_requests,
        "chunks": report.chunks.len(),
        "errors": report.errors.len(),
        "first_error": report.errors.first().map(|e| format!("{}: {} (line {:?})", e.code, e.message, e.line)),
        "seconds": seconds,
        "mb_per_s": bytes as f64 / 1e6 / seconds,
        "rss_before_kb": rss_before_kb,
        "peak_rss_kb": proc_status_kb("VmHWM:"),
    }))
}

#[tokio::main]
async fn main() -> ExitCode {
    match run(Args::parse()).await {
        Ok(result) => {
            println!("{result}");
            ExitCode::SUCCESS
        }
        Err(err) => {
            eprintln!("nimbus-validate-bench: {err}");
            ExitCode::FAILURE
        }
    }
}
