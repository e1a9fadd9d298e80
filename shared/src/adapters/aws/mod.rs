//! AWS adapters: S3 blobs, DynamoDB state, SQS queue, credential sealing (KMS, or a Parameter
//! Store data key), SSM provider keys. Clients come from the environment
//! (`AWS_REGION`, credentials, and `AWS_ENDPOINT_URL` for moto or other endpoints).

#[cfg(feature = "aws")]
mod dynamodb_state;
mod emf_metrics;
#[cfg(feature = "aws")]
mod eventbridge_switch;
#[cfg(feature = "aws")]
mod kms_sealer;
#[cfg(feature = "aws")]
mod parameter_key_sealer;
#[cfg(feature = "aws")]
mod s3_blobs;
#[cfg(feature = "aws")]
mod sqs_queue;
#[cfg(feature = "aws")]
mod ssm_parameters;
mod tls_roots;

#[cfg(feature = "aws")]
pub use dynamodb_state::{DynamoDbStateStore, OWNER_INDEX_ATTRIBUTES};
pub use emf_metrics::EmfMetrics;
#[cfg(feature = "aws")]
pub use eventbridge_switch::EventBridgeSwitch;
#[cfg(feature = "aws")]
pub(crate) use eventbridge_switch::POLLER_RULE_ENV;
#[cfg(feature = "aws")]
pub use kms_sealer::{KmsSealer, SEALING_KEY_ENV};
#[cfg(feature = "aws")]
pub use parameter_key_sealer::{ParameterKeySealer, SEALING_KEY_PARAMETER_ENV};
#[cfg(feature = "aws")]
pub use s3_blobs::S3BlobStore;
#[cfg(feature = "aws")]
pub use sqs_queue::{delivered_receipt, SqsJobQueue};
#[cfg(feature = "aws")]
pub use ssm_parameters::SsmParameters;

/// The SDK's HTTPS client: rustls with ring, the same crypto the provider HTTP client uses, so
/// the binary carries one TLS stack (smaller, faster cold start), trusting Amazon's roots
/// compiled in (`tls_roots.rs`: no certificate file is read at start).
pub fn https_client() -> aws_smithy_runtime_api::client::http::SharedHttpClient {
    use aws_smithy_http_client::tls::{rustls_provider::CryptoMode, Provider, TlsContext};
    let builder = aws_smithy_http_client::Builder::new().tls_provider(Provider::Rustls(CryptoMode::Ring));
    match TlsContext::builder().with_trust_store(tls_roots::trust_store()).build() {
        Ok(context) => builder.tls_context(context).build_https(),
        // Building a context only stores what it is given; should that ever fail, the SDK's own
        // default (the platform's roots) still connects.
        Err(_) => builder.build_https(),
    }
}

/// Shared AWS SDK configuration, loaded once per process. Loading makes no network calls:
/// credentials resolve lazily on the first request.
pub(crate) async fn load_sdk_config() -> aws_config::SdkConfig {
    aws_config::defaults(aws_config::BehaviorVersion::latest())
        .http_client(https_client())
        .load()
        .await
}

/// A readable message from any SDK error, including the service's own error code and message.
pub(crate) fn describe_sdk_error<E, R>(err: &aws_smithy_runtime_api::client::result::SdkError<E, R>) -> String
where
    E: std::error::Error + 'static,
    R: std::fmt::Debug,
{
    crate::user_text::error_chain(err)
}
