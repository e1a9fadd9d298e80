//! `nimbus serve`: the whole gateway in one process on the embedded adapters.

use anyhow::Context;
use nimbus_shared::app::{app_state, embedded, AuthSettings};
use nimbus_shared::auth::AuthMode;
use nimbus_shared::config::Config;
use nimbus_shared::http::HttpSettings;
use nimbus_shared::telemetry::{init, LogFormat};
use std::net::{IpAddr, SocketAddr};
use std::path::PathBuf;
use std::time::Duration;

#[derive(clap::Args)]
pub struct ServeArgs {
    #[arg(long, env = "PORT", default_value_t = 3000)]
    port: u16,
    /// Address to bind. The server runs without keys only on loopback.
    #[arg(long, env = "NIMBUS_BIND", default_value = "127.0.0.1")]
    bind: IpAddr,
    #[arg(long, env = "NIMBUS_CONFIG", default_value = "infra/config/nimbus.toml")]
    config: PathBuf,
    /// Where state (SQLite) and blobs live; survives restarts.
    #[arg(long, env = "NIMBUS_DATA_DIR", default_value = ".data")]
    data_dir: PathBuf,
    /// Seconds between runs of the scheduled sweep (the poller's schedule in AWS).
    #[arg(long, env = "NIMBUS_SCHEDULE_INTERVAL_SECS", default_value_t = 60)]
    schedule_interval_secs: u64,
}

#[derive(clap::Args)]
pub struct SweepArgs {
    #[arg(long, env = "NIMBUS_DATA_DIR", default_value = ".data")]
    data_dir: PathBuf,
    /// Run as if the time were this Unix timestamp (seconds), e.g. to expire things early.
    #[arg(long)]
    as_of: Option<i64>,
}

/// `nimbus sweep`: one run of the janitor against the embedded state, printed as JSON.
pub async fn sweep_once(args: SweepArgs) -> anyhow::Result<()> {
    let mut adapters =
        embedded::adapters(&args.data_dir).with_context(|| format!("opening {}", args.data_dir.display()))?;
    if let Some(as_of) = args.as_of {
        let system = nimbus_shared::ports::SystemClock;
        let offset_ms = as_of * 1000 - nimbus_shared::ports::Clock::now_unix_ms(&system);
        adapters.clock = std::sync::Arc::new(nimbus_shared::ports::OffsetClock {
            inner: system,
            offset_ms,
        });
    }
    let report = adapters.files().sweep(usize::MAX).await?;
    println!(
        "{{\"tasks_run\": {}, \"tasks_failed\": {}}}",
        report.tasks_run, report.tasks_failed
    );
    Ok(())
}

/// A key created or revoked while the server runs takes effect within this long.
const LOCAL_AUTH_CACHE_TTL: Duration = Duration::from_secs(1);

pub async fn run(args: ServeArgs) -> anyhow::Result<()> {
    init(LogFormat::from_env());
    let config = Config::from_path(&args.config).with_context(|| format!("loading {}", args.config.display()))?;
    let adapters =
        embedded::adapters(&args.data_dir).with_context(|| format!("opening {}", args.data_dir.display()))?;
    let mode = if args.bind.is_loopback() {
        AuthMode::OpenWhenNoKeys
    } else {
        AuthMode::Required
    };
    let state = app_state(
        &config,
        &adapters,
        AuthSettings {
            mode,
            cache_ttl: LOCAL_AUTH_CACHE_TTL,
        },
        HttpSettings {
            inline_content_limit: u64::MAX,
        },
    )
    .map_err(anyhow::Error::msg)?;
    let keys_exist = adapters.api_keys().any_active().await?;
    let sweeper = tokio::spawn(run_schedule(
        adapters.clone(),
        Duration::from_secs(args.schedule_interval_secs.max(1)),
    ));
    let router = nimbus_shared::http::local_router(state);

    let address = SocketAddr::new(args.bind, args.port);
    let listener = tokio::net::TcpListener::bind(address)
        .await
        .with_context(|| format!("binding {address}"))?;
    let address = listener.local_addr()?;
    let auth_note = match (mode, keys_exist) {
        (AuthMode::OpenWhenNoKeys, false) => {
            "auth: OPEN (bound to loopback and no API keys exist; `nimbus keys create --project NAME` turns auth on)"
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
    eprintln!("{auth_note}");
    let listener = axum::serve::ListenerExt::tap_io(listener, |tcp| {
        if let Err(err) = tcp.set_nodelay(true) {
            tracing::warn!(error = %err, "could not set TCP_NODELAY");
        }
    });
    axum::serve(listener, router)
        .with_graceful_shutdown(shutdown_signal())
        .await
        .context("serving")?;
    sweeper.abort();
    Ok(())
}

/// The timer standing in for the scheduled poller: runs the janitor's due tasks (expired files
/// and uploads, abandoned direct uploads, orphaned bytes).
async fn run_schedule(adapters: nimbus_shared::app::Adapters, every: Duration) {
    let files = adapters.files();
    let mut ticker = tokio::time::interval(every);
    loop {
        ticker.tick().await;
        match files.sweep(10_000).await {
            Ok(report) if report.tasks_run + report.tasks_failed > 0 => {
                tracing::info!(run = report.tasks_run, failed = report.tasks_failed, "scheduled sweep")
            }
            Ok(_) => {}
            Err(err) => tracing::warn!(error = %err, "scheduled sweep failed"),
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
