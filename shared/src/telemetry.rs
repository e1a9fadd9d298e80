//! Logging: JSON lines in Lambda (CloudWatch), compact text locally. `RUST_LOG` filters.

use tracing_subscriber::filter::{LevelFilter, Targets};
use tracing_subscriber::layer::SubscriberExt;
use tracing_subscriber::util::SubscriberInitExt;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LogFormat {
    Json,
    Text,
}

impl LogFormat {
    /// `NIMBUS_LOG_FORMAT=json|text`; JSON by default inside Lambda.
    pub fn from_env() -> Self {
        match std::env::var("NIMBUS_LOG_FORMAT").ok().as_deref() {
            Some("json") => Self::Json,
            Some("text") => Self::Text,
            _ if std::env::var_os("AWS_LAMBDA_FUNCTION_NAME").is_some() => Self::Json,
            _ => Self::Text,
        }
    }
}

/// `RUST_LOG` as `level` or `target=level,…` (e.g. `info,nimbus_shared=debug`); `info` when unset
/// or unreadable.
pub fn filter_from_env() -> Targets {
    std::env::var("RUST_LOG")
        .ok()
        .and_then(|text| text.parse::<Targets>().ok())
        .unwrap_or_else(|| Targets::new().with_default(LevelFilter::INFO))
}

/// Install the global subscriber (once; later calls are ignored).
pub fn init(format: LogFormat) {
    let registry = tracing_subscriber::registry().with(filter_from_env());
    let _ = match format {
        LogFormat::Json => registry
            .with(
                tracing_subscriber::fmt::layer()
                    .json()
                    .with_current_span(true)
                    .with_span_list(false)
                    .with_writer(std::io::stderr),
            )
            .try_init(),
        LogFormat::Text => registry
            .with(tracing_subscriber::fmt::layer().compact().with_writer(std::io::stderr))
            .try_init(),
    };
}
