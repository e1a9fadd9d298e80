//! The AWS stack from the environment: `NIMBUS_TABLE`, `NIMBUS_BUCKET`, `NIMBUS_JOBS_QUEUE_URL`
//! (set by the SAM template), plus the SDK's own variables (`AWS_REGION`, `AWS_ENDPOINT_URL`…).

use super::Adapters;
use crate::adapters::aws::{load_sdk_config, DynamoDbStateStore, S3BlobStore, SqsJobQueue};
use std::sync::Arc;

fn required_env(name: &str) -> Result<String, String> {
    std::env::var(name)
        .ok()
        .filter(|v| !v.trim().is_empty())
        .ok_or_else(|| format!("environment variable {name} is not set"))
}

pub async fn state_store() -> Result<DynamoDbStateStore, String> {
    let table = required_env("NIMBUS_TABLE")?;
    Ok(DynamoDbStateStore::new(&load_sdk_config().await, table))
}

pub async fn adapters(sdk_config: &aws_config::SdkConfig) -> Result<Adapters, String> {
    let table = required_env("NIMBUS_TABLE")?;
    let bucket = required_env("NIMBUS_BUCKET")?;
    let queue_url = required_env("NIMBUS_JOBS_QUEUE_URL")?;
    Ok(Adapters::new(
        Arc::new(DynamoDbStateStore::new(sdk_config, table)),
        Arc::new(S3BlobStore::new(sdk_config, bucket)),
        Arc::new(SqsJobQueue::new(sdk_config, queue_url)),
    ))
}
