//! `nimbus serve`: the whole gateway in one process on the embedded adapters.

use crate::{config_file, dev_webhook_secret};
use anyhow::Context;
use nimbus_shared::adapters::embedded::{spawn_queue_workers, DataDirLock, FileBlobStore};
use nimbus_shared::adapters::DeferredTasks;
use nimbus_shared::app::{
    app_state, async_requests, batch_engine, embedded, inference_service, job_dispatcher, scheduler, Adapters,
    AuthSettings, ModelLayers, WorkerParts,
};
use nimbus_shared::auth::{AuthMode, UntaggedKeys};
use nimbus_shared::batches::BatchSettings;
use nimbus_shared::config::Config;
use nimbus_shared::http::body_deadline::{BodyTimeouts, DEFAULT_IDLE_TIMEOUT, DEFAULT_TOTAL_TIMEOUT};
use nimbus_shared::http::{HttpSettings, PublicBaseUrl};
use nimbus_shared::ports::{Clock, OffsetClock, SystemClock};
use nimbus_shared::scheduler::Scheduler;
use nimbus_shared::telemetry::{init, LogFormat};
use nimbus_shared::webhooks::UrlPolicy;
use std::net::{IpAddr, SocketAddr};
use std::path::Path;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

#[derive(clap::Args)]
pub struct ServeArgs {
    #[arg(long, env = "PORT", default_value_t = 3000)]
    port: u16,
    /// Address to bind. The server runs without keys only on loopback.
    #[arg(long, env = "NIMBUS_BIND", default_value = "127.0.0.1")]
    bind: IpAddr,
    /// `open`: no key needed (requests act as project `default`) until the first API key is ever
    /// created in the data directory, then keys are required for good (revoking them never
    /// reopens); loopback only. `required`: a key on every request. Default: `open` on loopback
    /// (what `make run` starts), `required` elsewhere.
    #[arg(long, env = "NIMBUS_AUTH", value_enum)]
    auth: Option<AuthChoice>,
    /// The configuration file. Default: `infra/config/nimbus.toml` under the current directory
    /// (the repository root), else the same default configuration built into this binary.
    #[arg(long, env = "NIMBUS_CONFIG")]
    config: Option<PathBuf>,
    /// Where state (SQLite) and blobs live; survives restarts.
    #[arg(long, env = "NIMBUS_DATA_DIR", default_value = ".data")]
    data_dir: PathBuf,
    /// Seconds between passes of the scheduler (the poller's schedule in AWS): files sweep, batch
    /// recovery, and every other scheduled task.
    #[arg(long, env = "NIMBUS_SCHEDULE_INTERVAL_SECS", default_value_t = 60)]
    schedule_interval_secs: u64,
    /// The URL clients reach this server at, for absolute URLs in responses (a direct upload's
    /// `upload_url`); default `http://<bound address>`.
    #[arg(long, env = "NIMBUS_PUBLIC_URL")]
    public_url: Option<String>,
    /// In-process queue workers (the SQS-triggered worker Lambdas in AWS).
    #[arg(long, env = "NIMBUS_BATCH_WORKERS", default_value_t = 4)]
    batch_workers: usize,
    /// Accept batch completion windows in seconds (e.g. "5s"), for trying out expiry.
    #[arg(
        long,
        env = "NIMBUS_ALLOW_SHORT_COMPLETION_WINDOWS",
        default_value_t = false,
        value_parser = clap::builder::BoolishValueParser::new()
    )]
    allow_short_completion_windows: bool,
    /// Where measurements go: kept for `GET /metrics` (`prometheus`), written as CloudWatch EMF
    /// lines on stdout as a Lambda function writes them (`emf`), or dropped (`off`).
    #[arg(long, env = "NIMBUS_METRICS", value_enum, default_value_t = MetricsSinkChoice::Prometheus)]
    metrics: MetricsSinkChoice,
    /// Seconds without a byte of a request body being read before the request answers 408.
    #[arg(long, env = "NIMBUS_BODY_IDLE_TIMEOUT_SECS", default_value_t = DEFAULT_IDLE_TIMEOUT.as_secs())]
    body_idle_timeout_secs: u64,
    /// Seconds a request body may take in all before the request answers 408.
    #[arg(long, env = "NIMBUS_BODY_TIMEOUT_SECS", default_value_t = DEFAULT_TOTAL_TIMEOUT.as_secs())]
    body_timeout_secs: u64,
    #[command(flatten)]
    webhooks: WebhookArgs,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
enum AuthChoice {
    Open,
    Required,
}

/// The authentication mode `choice` and the bound address give, or why they cannot go together.
fn auth_mode(choice: Option<AuthChoice>, bind: IpAddr) -> anyhow::Result<AuthMode> {
    match (choice, bind.is_loopback()) {
        (Some(AuthChoice::Open), false) => {
            anyhow::bail!("--auth open is only for a server bound to loopback (--bind {bind} is not)")
        }
        (Some(AuthChoice::Open), true) | (None, true) => Ok(AuthMode::OpenWhenNoKeys),
        (Some(AuthChoice::Required), _) | (None, false) => Ok(AuthMode::Required),
    }
}

#[derive(Debug, Clone, Copy, clap::ValueEnum)]
enum MetricsSinkChoice {
    Prometheus,
    Emf,
    Off,
}

impl MetricsSinkChoice {
    fn sink(self) -> Arc<dyn nimbus_shared::ports::MetricsSink> {
        match self {
            Self::Prometheus => Arc::new(nimbus_shared::adapters::embedded::PrometheusMetrics::new()),
            Self::Emf => Arc::new(nimbus_shared::adapters::aws::EmfMetrics::for_function("local")),
            Self::Off => Arc::new(nimbus_shared::ports::NoMetrics),
        }
    }
}

/// Where the local server's webhooks may go.
#[derive(clap::Args)]
struct WebhookArgs {
    /// Accept plain-http webhook URLs to localhost/127.0.0.1 (development receivers). Never in Lambda.
    #[arg(
        long,
        env = "NIMBUS_WEBHOOKS_ALLOW_LOOPBACK",
        default_value_t = true,
        value_parser = clap::builder::BoolishValueParser::new()
    )]
    webhooks_allow_loopback: bool,
}

impl WebhookArgs {
    fn url_policy(&self) -> UrlPolicy {
        UrlPolicy {
            allow_loopback_http: self.webhooks_allow_loopback,
        }
    }
}

#[derive(clap::Args)]
pub struct PollArgs {
    /// The configuration file. Default: `infra/config/nimbus.toml` under the current directory
    /// (the repository root), else the same default configuration built into this binary.
    #[arg(long, env = "NIMBUS_CONFIG")]
    config: Option<PathBuf>,
    #[arg(long, env = "NIMBUS_DATA_DIR", default_value = ".data")]
    data_dir: PathBuf,
    /// Run as if the time were this Unix timestamp (seconds).
    #[arg(long)]
    as_of: Option<i64>,
    #[command(flatten)]
    webhooks: WebhookArgs,
}

#[derive(clap::Args)]
pub struct SweepArgs {
    #[arg(long, env = "NIMBUS_DATA_DIR", default_value = ".data")]
    data_dir: PathBuf,
    /// Run as if the time were this Unix timestamp (seconds), e.g. to expire things early.
    #[arg(long)]
    as_of: Option<i64>,
}

/// The embedded stack under `data_dir`, its clock moved to `as_of` when given.
fn embedded_adapters(data_dir: &Path, as_of: Option<i64>) -> anyhow::Result<Adapters> {
    let mut adapters = embedded::adapters(data_dir).with_context(|| format!("opening {}", data_dir.display()))?;
    if let Some(as_of) = as_of {
        let system = SystemClock;
        adapters.clock = Arc::new(OffsetClock {
            inner: system,
            offset_ms: as_of * 1000 - system.now_unix_ms(),
        });
    }
    Ok(adapters)
}

/// `nimbus sweep`: one run of the janitor against the embedded state, printed as JSON.
pub async fn sweep_once(args: SweepArgs) -> anyhow::Result<()> {
    let adapters = embedded_adapters(&args.data_dir, args.as_of)?;
    let report = adapters.files().sweep(usize::MAX).await?;
    println!(
        "{{\"tasks_run\": {}, \"tasks_failed\": {}}}",
        report.tasks_run, report.tasks_failed
    );
    Ok(())
}

/// `nimbus poll`: one pass of the scheduler (files sweep, batch recovery, …), its report printed
/// as JSON (exit status 1 when a task failed). Jobs it enqueues go to the running server's queue
/// only when run inside it; here they are run at once.
pub async fn poll_once(args: PollArgs) -> anyhow::Result<()> {
    let (loaded, _) = config_file::load(args.config.as_deref()).await?;
    let config = &loaded.config;
    let adapters = embedded_adapters(&args.data_dir, args.as_of)?.with_webhook_urls(args.webhooks.url_policy());
    let settings = local_batch_settings(config, false);
    let inference = inference_service(config, &adapters).map_err(anyhow::Error::msg)?;
    let parts = WorkerParts::new(&loaded, &adapters, inference, settings);
    let report = scheduler(&parts).run_once().await;
    // This process has its own in-memory queue: drain what the pass enqueued before exiting.
    let worker = job_dispatcher(&parts);
    while let Some(message) = adapters
        .queue
        .receive(1, Duration::ZERO, Duration::from_secs(300))
        .await?
        .pop()
    {
        worker
            .handle_until(&message.body, tokio::time::Instant::now() + LOCAL_MAX_RUN)
            .await;
        adapters.queue.delete(&message.receipt).await?;
    }
    println!("{}", serde_json::to_string(&report)?);
    if report.errors > 0 {
        anyhow::bail!("{} scheduled task(s) failed (see `tasks` above)", report.errors);
    }
    Ok(())
}

/// The longest one in-process worker runs one message.
const LOCAL_MAX_RUN: Duration = Duration::from_secs(120);

fn local_batch_settings(config: &Config, allow_short_windows: bool) -> BatchSettings {
    BatchSettings {
        max_run: LOCAL_MAX_RUN,
        requeue_after: Duration::from_secs(60),
        status_poll_interval: Duration::from_millis(500),
        live_progress_always: true,
        allow_short_windows,
        ..BatchSettings::from_config(config)
    }
}

/// How long a stopping server waits for work deferred past responses (storing records).
const DEFERRED_WORK_GRACE: Duration = Duration::from_secs(10);

/// A key created while the server runs is required within this long (a revocation: at once).
const LOCAL_AUTH_CACHE_TTL: Duration = Duration::from_secs(1);

/// Temporary files of blob writes older than this are removed by the schedule (a write in flight
/// is far younger).
const STALE_TEMP_FILE_AGE: Duration = Duration::from_secs(3600);

pub async fn run(args: ServeArgs) -> anyhow::Result<()> {
    init(LogFormat::from_env());
    let mode = auth_mode(args.auth, args.bind)?;
    // Purge freed pages on a timer too, not only when the allocator is next called.
    if let Err(err) = tikv_jemalloc_ctl::background_thread::write(true) {
        tracing::warn!(error = %err, "could not start the allocator's background thread");
    }
    let (loaded, config_origin) = config_file::load(args.config.as_deref()).await?;
    let config = &loaded.config;
    // Held until the process ends: no other server (no other worker) uses this directory.
    let lock = DataDirLock::acquire(&args.data_dir)?;
    let mut adapters = embedded::adapters(&args.data_dir)
        .with_context(|| format!("opening {}", args.data_dir.display()))?
        .with_webhook_urls(args.webhooks.url_policy())
        .with_metrics(args.metrics.sink())
        .with_untagged_keys(UntaggedKeys::from_env()?);
    // Work handlers defer past the response; waited for (bounded) when the server stops.
    let deferred = Arc::new(DeferredTasks::new());
    adapters.after_response = Arc::clone(&deferred) as _;
    let blobs = embedded::blob_store(&args.data_dir)?;
    // No writer of a previous process can be alive: its temporary files all go.
    let removed = blobs.remove_temp_files(Duration::ZERO).await?;
    if removed > 0 {
        tracing::info!(removed, "removed temporary files of interrupted blob writes");
    }
    let address = SocketAddr::new(args.bind, args.port);
    let listener = tokio::net::TcpListener::bind(address)
        .await
        .with_context(|| format!("binding {address}"))?;
    let address = listener.local_addr()?;
    let public_url = match args.public_url.as_deref().map(str::trim).filter(|url| !url.is_empty()) {
        Some(url) => PublicBaseUrl::parse(url).context("NIMBUS_PUBLIC_URL")?,
        None => PublicBaseUrl::for_listener(address),
    };
    let batch_settings = local_batch_settings(config, args.allow_short_completion_windows);
    let state = app_state(
        &loaded,
        &adapters,
        AuthSettings {
            mode,
            cache_ttl: LOCAL_AUTH_CACHE_TTL,
        },
        HttpSettings {
            inline_content_limit: u64::MAX,
            public_url: Some(public_url),
        },
        batch_settings.clone(),
    )
    .map_err(anyhow::Error::msg)?;
    let keys_created = adapters.api_keys().any_created().await?;
    // Async webhooks of the open project are signed out of the box.
    let webhook_note = if mode == AuthMode::OpenWhenNoKeys {
        dev_webhook_secret::ensure(&state.batches.webhook_secrets, &args.data_dir).await?
    } else {
        String::new()
    };
    // The workers' roles over the same layers and storage as the API's.
    let layers = ModelLayers {
        inference: Arc::clone(&state.inference.inference),
        functions: Arc::clone(&state.inference.functions),
        records: Arc::clone(&state.inference.records),
    };
    let parts = WorkerParts {
        adapters: adapters.clone(),
        batches: batch_engine(&adapters, &layers, batch_settings),
        layers,
        async_requests: async_requests(&loaded, &adapters),
        max_run: LOCAL_MAX_RUN,
    };
    // Before any worker starts: what a previous process left leased or queued resumes at once.
    let takeover = parts.batches.recovery().take_over(&lock).await?;
    if takeover.batches > 0 {
        tracing::info!(?takeover, "took over unfinished batches");
    }
    let requeued = parts.async_requests.take_over(&lock).await?;
    if requeued > 0 {
        tracing::info!(requeued, "queued unfinished async requests (and their webhooks) again");
    }
    let deliveries = state.batches.batch_webhooks.take_over(&lock).await?;
    if deliveries > 0 {
        tracing::info!(deliveries, "queued pending batch event webhooks again");
    }
    let workers = spawn_queue_workers(
        Arc::clone(&adapters.queue),
        Arc::new(job_dispatcher(&parts)),
        args.batch_workers,
        LOCAL_MAX_RUN + Duration::from_secs(60),
    );
    let schedule = tokio::spawn(run_schedule(
        scheduler(&parts),
        blobs,
        Duration::from_secs(args.schedule_interval_secs.max(1)),
    ));
    let body_timeouts = BodyTimeouts {
        idle: Duration::from_secs(args.body_idle_timeout_secs.max(1)),
        total: Duration::from_secs(args.body_timeout_secs.max(1)),
    };
    let router = nimbus_shared::http::local_router_with(state, body_timeouts);
    let auth_note = match (mode, keys_created) {
        (AuthMode::OpenWhenNoKeys, false) => {
            "auth: OPEN — no API key was ever created here: requests need no key and act as project `default`.\n\
             auth: the first `nimbus keys create --project NAME` requires keys for good (revoking keys never \
             reopens); `nimbus keys create --project default` keeps access to what was made while open. \
             `--auth required` starts closed."
        }
        (_, true) => "auth: API key required (Authorization: Bearer <key>)",
        (AuthMode::Required, false) => {
            "auth: API key required, but no keys exist yet: create one with `nimbus keys create --project NAME`"
        }
    };
    eprintln!(
        "Nimbus listening on http://{address}/v1 ({} models; data in {})",
        config.models.len(),
        args.data_dir.display()
    );
    eprintln!("{}", config_origin.describe());
    eprintln!("{auth_note}");
    if mode == AuthMode::OpenWhenNoKeys {
        eprintln!("{webhook_note}");
    }
    let listener = axum::serve::ListenerExt::tap_io(listener, |tcp| {
        if let Err(err) = tcp.set_nodelay(true) {
            tracing::warn!(error = %err, "could not set TCP_NODELAY");
        }
    });
    axum::serve(listener, router)
        .with_graceful_shutdown(shutdown_signal())
        .await
        .context("serving")?;
    let unfinished = deferred.settle_within(DEFERRED_WORK_GRACE).await;
    if unfinished > 0 {
        tracing::warn!(unfinished, "stopping with deferred work still running");
    }
    schedule.abort();
    for worker in workers {
        worker.abort();
    }
    drop(lock);
    Ok(())
}

/// The timer standing in for the scheduled poller: a scheduler pass (the janitor's due tasks —
/// expired files and uploads, abandoned direct uploads, orphaned bytes —, batch recovery and
/// finalization, …), then stale temporary files of blob writes. The first pass runs at once.
async fn run_schedule(scheduler: Scheduler, blobs: FileBlobStore, every: Duration) {
    let mut ticker = tokio::time::interval(every);
    loop {
        ticker.tick().await;
        let report = scheduler.run_once().await;
        if report.errors > 0 {
            tracing::warn!(?report, "scheduled pass had failing tasks");
        } else {
            tracing::debug!(?report, "scheduled pass");
        }
        if let Err(err) = blobs.remove_temp_files(STALE_TEMP_FILE_AGE).await {
            tracing::warn!(error = %err, "could not remove stale temporary files");
        }
    }
}

async fn shutdown_signal() {
    let ctrl_c = async {
        let _ = tokio::signal::ctrl_c().await;
    };
    #[cfg(unix)]
    let terminate = async {
        match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(mut signal) => {
                signal.recv().await;
            }
            Err(_) => std::future::pending::<()>().await,
        }
    };
    #[cfg(not(unix))]
    let terminate = std::future::pending::<()>();
    tokio::select! {
        _ = ctrl_c => {},
        _ = terminate => {},
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::Ipv4Addr;

    #[test]
    fn open_mode_is_loopback_only_and_the_loopback_default() {
        let loopback = IpAddr::V4(Ipv4Addr::LOCALHOST);
        let any = IpAddr::V4(Ipv4Addr::UNSPECIFIED);
        assert_eq!(auth_mode(None, loopback).ok(), Some(AuthMode::OpenWhenNoKeys));
        assert_eq!(
            auth_mode(Some(AuthChoice::Open), loopback).ok(),
            Some(AuthMode::OpenWhenNoKeys)
        );
        assert_eq!(
            auth_mode(Some(AuthChoice::Required), loopback).ok(),
            Some(AuthMode::Required)
        );
        assert_eq!(auth_mode(None, any).ok(), Some(AuthMode::Required));
        assert!(auth_mode(Some(AuthChoice::Open), any).is_err());
    }
}
