//! Logging: JSON lines in Lambda (CloudWatch), compact text locally. `RUST_LOG` filters Nimbus's
//! own crates; other crates log at most at `info` (see [`scoped_filter`]).

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

/// The target prefix of Nimbus's own crates (`nimbus_shared`, `nimbus_worker`, the `nimbus` binary…):
/// a directive's target matches every target it begins.
const OWN_TARGETS: &str = "nimbus";
/// The most any other crate (hyper, reqwest, the AWS SDK, the Lambda runtime) may log: their debug
/// and trace events carry request and response internals (headers, signed URLs, payloads).
const OTHER_CRATES_MAX: LevelFilter = LevelFilter::INFO;

/// `RUST_LOG` as `level` or `target=level,…` (e.g. `info,nimbus_shared=debug`); `info` when unset
/// or unreadable. Scoped by [`scoped_filter`].
pub(crate) fn filter_from_env() -> Targets {
    scoped_filter(std::env::var("RUST_LOG").ok().as_deref())
}

/// The filter a `RUST_LOG` text asks for, scoped to Nimbus's own crates: a bare level (the
/// template's `LogLevel`) applies to them, and any level asked of another crate is capped at
/// [`OTHER_CRATES_MAX`], so `debug` or `trace` cannot dump HTTP or SDK internals into the logs.
pub(crate) fn scoped_filter(text: Option<&str>) -> Targets {
    let asked = text
        .and_then(|text| text.parse::<Targets>().ok())
        .unwrap_or_else(|| Targets::new().with_default(LevelFilter::INFO));
    let default = asked.default_level().unwrap_or(LevelFilter::OFF);
    let mut scoped = Targets::new()
        .with_default(default.min(OTHER_CRATES_MAX))
        .with_target(OWN_TARGETS, default);
    for (target, level) in asked.iter() {
        let level = if target.starts_with(OWN_TARGETS) {
            level
        } else {
            level.min(OTHER_CRATES_MAX)
        };
        scoped = scoped.with_target(target, level);
    }
    scoped
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

#[cfg(test)]
mod tests {
    use super::*;
    use tracing::Level;

    const OTHERS: [&str; 5] = [
        "hyper::proto::h1::io",
        "reqwest::connect",
        "aws_smithy_runtime::client::orchestrator",
        "aws_sigv4::http_request::sign",
        "lambda_runtime",
    ];
    const OWN: [&str; 4] = [
        "nimbus_shared::webhooks",
        "nimbus_worker",
        "nimbus",
        "nimbus_local::serve",
    ];

    #[test]
    fn a_bare_level_applies_to_nimbus_and_caps_the_other_crates_at_info() {
        for text in ["debug", "trace"] {
            let filter = scoped_filter(Some(text));
            for target in OWN {
                assert!(filter.would_enable(target, &Level::DEBUG), "{text}: {target}");
            }
            for target in OTHERS {
                assert!(!filter.would_enable(target, &Level::DEBUG), "{text}: {target}");
                assert!(filter.would_enable(target, &Level::INFO), "{text}: {target}");
            }
        }
        assert!(scoped_filter(Some("trace")).would_enable("nimbus_shared::x", &Level::TRACE));
    }

    #[test]
    fn a_level_asked_of_another_crate_is_capped_too() {
        let filter = scoped_filter(Some(
            "info,hyper=trace,aws_smithy_runtime=debug,nimbus_shared::files=trace",
        ));
        assert!(!filter.would_enable("hyper::proto", &Level::DEBUG));
        assert!(!filter.would_enable("aws_smithy_runtime::client", &Level::DEBUG));
        assert!(filter.would_enable("hyper::proto", &Level::INFO));
        assert!(filter.would_enable("nimbus_shared::files::direct", &Level::TRACE));
        assert!(!filter.would_enable("nimbus_shared::batches", &Level::DEBUG));
    }

    #[test]
    fn quieter_levels_stay_quiet_and_the_default_is_info() {
        let filter = scoped_filter(Some("warn"));
        assert!(!filter.would_enable("nimbus_shared::x", &Level::INFO));
        assert!(!filter.would_enable("hyper", &Level::INFO));
        assert!(filter.would_enable("hyper", &Level::WARN));
        for text in [None, Some("not a filter ==")] {
            let filter = scoped_filter(text);
            assert!(filter.would_enable("nimbus_shared::x", &Level::INFO));
            assert!(!filter.would_enable("nimbus_shared::x", &Level::DEBUG));
            assert!(!filter.would_enable("hyper", &Level::DEBUG));
        }
    }
}
