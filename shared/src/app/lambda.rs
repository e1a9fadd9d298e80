//! Wiring for the Lambda functions: AWS adapters, configuration from `NIMBUS_CONFIG_SOURCE`,
//! keys always required.

use super::config_source::ConfigSource;
use super::{app_state, AuthSettings};
use crate::adapters::aws::load_sdk_config;
use crate::auth::AuthMode;
use axum::Router;
use std::time::Duration;

/// How long a verified (or revoked) key is trusted before DynamoDB is asked again.
pub const LAMBDA_AUTH_CACHE_TTL: Duration = Duration::from_secs(30);

/// The inference function's router.
pub async fn inference_router() -> Result<Router, String> {
    let sdk_config = load_sdk_config().await;
    let config = ConfigSource::from_env()?.load(&sdk_config).await?;
    let adapters = super::aws::adapters(&sdk_config).await?;
    let state = app_state(
        &config,
        &adapters,
        AuthSettings {
            mode: AuthMode::Required,
            cache_ttl: LAMBDA_AUTH_CACHE_TTL,
        },
    )?;
    Ok(crate::http::inference_router(state))
}
