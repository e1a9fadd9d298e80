//! Wiring for the Lambda functions: AWS adapters, configuration from `NIMBUS_CONFIG_SOURCE`,
//! keys always required.

use super::config_source::ConfigSource;
use super::{app_state, AuthSettings};
use crate::adapters::aws::load_sdk_config;
use crate::auth::AuthMode;
use crate::http::{AppState, HttpSettings};
use axum::Router;
use std::time::Duration;

/// Start a function binary: logging (JSON in Lambda), and a clear exit when run outside Lambda
/// (`lambda_http::run` would panic there).
pub fn prepare_function(binary: &str) {
    crate::telemetry::init(crate::telemetry::LogFormat::from_env());
    if std::env::var_os("AWS_LAMBDA_RUNTIME_API").is_none() {
        eprintln!("{binary} runs inside AWS Lambda (or the runtime interface emulator); for local use run `make run`");
        std::process::exit(2);
    }
}

/// How long a verified (or revoked) key is trusted before DynamoDB is asked again.
pub const LAMBDA_AUTH_CACHE_TTL: Duration = Duration::from_secs(30);

/// File content above this is served by a redirect to a presigned S3 URL: a Lambda response
/// behind API Gateway must stay under 6 MB.
pub const LAMBDA_INLINE_CONTENT_LIMIT: u64 = 4 * 1024 * 1024;

async fn lambda_state() -> Result<AppState, String> {
    let sdk_config = load_sdk_config().await;
    let config = ConfigSource::from_env()?.load(&sdk_config).await?;
    let adapters = super::aws::adapters(&sdk_config).await?;
    app_state(
        &config,
        &adapters,
        AuthSettings {
            mode: AuthMode::Required,
            cache_ttl: LAMBDA_AUTH_CACHE_TTL,
        },
        HttpSettings {
            inline_content_limit: LAMBDA_INLINE_CONTENT_LIMIT,
        },
    )
}

/// The inference function's router.
pub async fn inference_router() -> Result<Router, String> {
    Ok(crate::http::inference_router(lambda_state().await?))
}

/// The files function's router.
pub async fn files_router() -> Result<Router, String> {
    Ok(crate::http::files_router(lambda_state().await?))
}
