//! Wiring for the Lambda functions: AWS adapters, configuration from `NIMBUS_CONFIG_SOURCE`,
//! keys always required.

use super::config_source::ConfigSource;
use super::{app_state, batch_service, inference_service, Adapters, AuthSettings};
use crate::adapters::aws::load_sdk_config;
use crate::auth::AuthMode;
use crate::batches::{BatchService, BatchSettings, BatchWorker, Poller};
use crate::config::Config;
use crate::http::{AppState, HttpSettings};
use axum::Router;
use std::sync::Arc;
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

/// A chunk or validation not picked up this long after it was enqueued is enqueued again: longer
/// than the queue's visibility timeout (6 × the worker's 300 s), so SQS redelivery comes first.
pub const LAMBDA_REQUEUE_AFTER: Duration = Duration::from_secs(35 * 60);

fn lambda_batch_settings(config: &Config) -> BatchSettings {
    BatchSettings {
        requeue_after: LAMBDA_REQUEUE_AFTER,
        ..BatchSettings::from_config(config)
    }
}

async fn lambda_stack() -> Result<(Config, Adapters), String> {
    let sdk_config = load_sdk_config().await;
    let config = ConfigSource::from_env()?.load(&sdk_config).await?;
    let adapters = super::aws::adapters(&sdk_config).await?;
    Ok((config, adapters))
}

async fn lambda_state() -> Result<AppState, String> {
    let (config, adapters) = lambda_stack().await?;
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
        lambda_batch_settings(&config),
    )
}

async fn lambda_batch_service() -> Result<Arc<BatchService>, String> {
    let (config, adapters) = lambda_stack().await?;
    let inference = inference_service(&config, &adapters)?;
    Ok(batch_service(&adapters, inference, lambda_batch_settings(&config)))
}

/// The inference function's router.
pub async fn inference_router() -> Result<Router, String> {
    Ok(crate::http::inference_router(lambda_state().await?))
}

/// The files function's router.
pub async fn files_router() -> Result<Router, String> {
    Ok(crate::http::files_router(lambda_state().await?))
}

/// The batches function's router.
pub async fn batches_router() -> Result<Router, String> {
    Ok(crate::http::batches_router(lambda_state().await?))
}

/// The SQS-triggered worker.
pub async fn batch_worker() -> Result<BatchWorker, String> {
    Ok(BatchWorker::new(lambda_batch_service().await?))
}

/// The scheduled poller.
pub async fn poller() -> Result<Poller, String> {
    Ok(Poller::new(lambda_batch_service().await?))
}
