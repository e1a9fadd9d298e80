//! `nimbus experiments FUNCTION`: where a function's adaptive experiment stands in the local data
//! (what `GET /experiments/{function}` answers), as lines or as JSON.

use crate::config_file;
use anyhow::Context;
use nimbus_shared::app::embedded;
use nimbus_shared::tensorzero::experiments::{Decision, ExperimentReport};
use std::fmt::Write;
use std::path::PathBuf;

#[derive(clap::Args)]
pub struct ExperimentsArgs {
    /// A function with `type = "adaptive"` experimentation.
    function: String,
    /// The configuration file. Default: `infra/config/nimbus.toml` under the current directory,
    /// else the built-in one.
    #[arg(long, env = "NIMBUS_CONFIG")]
    config: Option<PathBuf>,
    #[arg(long, env = "NIMBUS_DATA_DIR", default_value = ".data")]
    data_dir: PathBuf,
    /// Print the report as JSON.
    #[arg(long)]
    json: bool,
}

pub async fn run(args: ExperimentsArgs) -> anyhow::Result<()> {
    let (loaded, _) = config_file::load(args.config.as_deref()).await?;
    let function = loaded
        .functions
        .function(&args.function)
        .map_err(|e| anyhow::anyhow!("{e}"))?;
    let adapters =
        embedded::adapters(&args.data_dir).with_context(|| format!("opening {}", args.data_dir.display()))?;
    let report = nimbus_shared::app::experiments(&loaded, &adapters)
        .report(function)
        .await?
        .ok_or_else(|| anyhow::anyhow!("function `{}` has no adaptive experiment", args.function))?;
    if args.json {
        println!("{}", serde_json::to_string_pretty(&report)?);
    } else {
        print!("{}", describe(&report));
    }
    Ok(())
}

/// The report as lines: the phase, then one line per variant.
pub fn describe(report: &ExperimentReport) -> String {
    let mut out = String::new();
    let phase = match (&report.decision, &report.winner) {
        (_, Some(winner)) => format!("stopped: winner {winner}"),
        (Decision::Nursery { .. }, None) => "nursery (round-robin until every candidate has its samples)".to_owned(),
        _ => "running (sampling by the optimal allocation)".to_owned(),
    };
    let _ = writeln!(
        out,
        "experiment {} (adaptive, metric {}): {phase}",
        report.function_name, report.metric
    );
    for name in report.candidate_variants.iter().chain(&report.fallback_variants) {
        let share = report.probabilities.get(name).copied().unwrap_or(0.0) * 100.0;
        let role = if report.fallback_variants.contains(name) {
            " (fallback)"
        } else {
            ""
        };
        let stats = match report.variants.iter().find(|s| &s.variant == name) {
            Some(s) => format!(", {} values, mean {:.3}, variance {:.3}", s.count, s.mean, s.variance),
            None => String::new(),
        };
        let _ = writeln!(out, "  variant {name}{role}: {share:.1}% of new episodes{stats}");
    }
    let computed = match &report.computed_at {
        Some(at) => format!("computed at {at}"),
        None => "not computed yet".to_owned(),
    };
    let _ = writeln!(out, "  {computed}, every {} s", report.update_period_s);
    out
}
