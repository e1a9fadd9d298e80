//! The AWS stack from the environment: `NIMBUS_TABLE`, `NIMBUS_BUCKET`, `NIMBUS_JOBS_QUEUE_URL`
//! (set by the SAM template), plus the SDK's own variables (`AWS_REGION`, `AWS_ENDPOINT_URL`…).
//! `NIMBUS_ASYNC_QUEUE_URL_P0`, `_P1` and `_P2` (the priority queues) are set only on the functions
//! that send to them; without one, sending at that priority fails with an error naming it.
//! Sealing at rest: with `NIMBUS_SEALING_KEY_ID` (a KMS key; the template's `Sealing=kms`) values
//! are sealed by KMS; otherwise by the data key in the SSM parameter `NIMBUS_SEALING_KEY_PARAMETER`
//! (the default: no billed key). Without either, sealing and opening fail naming the variable.

use super::Adapters;
use super::InitError;
use crate::adapters::aws::{
    load_sdk_config, DynamoDbStateStore, EmfMetrics, KmsSealer, ParameterKeySealer, S3BlobStore, SqsJobQueue,
    SsmParameters, SEALING_KEY_ENV,
};
use crate::ports::{CredentialSealer, NoJobQueue, Priority};
use std::sync::Arc;

fn optional_env(name: &str) -> Option<String> {
    std::env::var(name).ok().filter(|v| !v.trim().is_empty())
}

fn required_env(name: &'static str) -> Result<String, InitError> {
    optional_env(name).ok_or(InitError::MissingEnv(name))
}

/// The environment variable holding the URL of `priority`'s queue.
pub(crate) fn priority_queue_env(priority: Priority) -> String {
    format!("NIMBUS_ASYNC_QUEUE_URL_P{}", priority.level())
}

/// The jobs queue at `jobs_url` with the priority queues the environment names.
fn job_queue(sdk_config: &aws_config::SdkConfig, jobs_url: String) -> SqsJobQueue {
    Priority::ALL.into_iter().fold(
        SqsJobQueue::new(sdk_config, jobs_url),
        |queue, priority| match optional_env(&priority_queue_env(priority)) {
            Some(url) => queue.with_priority_queue(priority, url),
            None => queue,
        },
    )
}

/// The sealer the environment chooses: KMS when it names a KMS key, else the Parameter Store key.
/// The Parameter Store key is read through `parameters`, the process's one SSM adapter.
pub(crate) fn sealer_of(sdk_config: &aws_config::SdkConfig, parameters: &SsmParameters) -> Arc<dyn CredentialSealer> {
    if optional_env(SEALING_KEY_ENV).is_some() {
        Arc::new(KmsSealer::from_env(sdk_config))
    } else {
        Arc::new(ParameterKeySealer::from_env(parameters.clone()))
    }
}

pub async fn state_store() -> Result<DynamoDbStateStore, InitError> {
    let table = required_env("NIMBUS_TABLE")?;
    Ok(DynamoDbStateStore::new(&load_sdk_config().await, table))
}

/// The sealer the environment chooses, for a command outside Lambda (`nimbus webhook-secrets`):
/// set `NIMBUS_SEALING_KEY_PARAMETER` (the stack's output `SealingKeyParameter`) or, on a stack
/// with `Sealing=kms`, `NIMBUS_SEALING_KEY_ID` (output `SealingKeyId`).
pub async fn sealer() -> Arc<dyn CredentialSealer> {
    let sdk_config = load_sdk_config().await;
    sealer_of(&sdk_config, &SsmParameters::new(&sdk_config))
}

/// The state table (`NIMBUS_TABLE`), the bucket (`NIMBUS_BUCKET`) and EMF metrics: what every
/// function is built on. No job queue, sealer or provider keys: a function adds those its role
/// reaches ([`job_queues`], [`sealer_of`], [`SsmParameters`]); one left out fails naming what is
/// missing, as the role would refuse the call.
pub async fn adapters(sdk_config: &aws_config::SdkConfig) -> Result<Adapters, InitError> {
    let table = required_env("NIMBUS_TABLE")?;
    let bucket = required_env("NIMBUS_BUCKET")?;
    Ok(Adapters::new(
        Arc::new(DynamoDbStateStore::new(sdk_config, table)),
        Arc::new(S3BlobStore::new(sdk_config, bucket)),
        Arc::new(NoJobQueue),
    )
    .with_metrics(EmfMetrics::for_lambda())
    .with_record_retention_days(super::limits::record_retention_days_from_env()?)
    .with_due_index_shards(super::limits::due_index_shards_from_env()?))
}

/// The jobs queue (`NIMBUS_JOBS_QUEUE_URL`) with the priority queues the environment names.
pub(crate) fn job_queues(sdk_config: &aws_config::SdkConfig) -> Result<SqsJobQueue, InitError> {
    Ok(job_queue(sdk_config, required_env("NIMBUS_JOBS_QUEUE_URL")?))
}
