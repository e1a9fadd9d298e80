//! Logging: JSON lines in Lambda (CloudWatch), compact text locally. `RUST_LOG` filters.

use tracing_subscriber::EnvFilter;

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

/// Install the global subscriber (once; later calls are ignored).
pub fn init(format: LogFormat) {
    let filter = EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new("info"));
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr);
    let _ = match format {
        LogFormat::Json => builder.json().with_current_span(true).with_span_list(false).try_init(),
        LogFormat::Text => builder.compact().try_init(),
    };
}
