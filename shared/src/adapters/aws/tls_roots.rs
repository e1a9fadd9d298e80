//! The roots the AWS SDK's HTTPS client trusts. In Lambda, every endpoint the functions call
//! (DynamoDB, S3, SQS, SSM, KMS, EventBridge, SageMaker, STS) presents a certificate that chains to
//! one of Amazon Trust Services' roots (Amazon Root CA 1–4, and Starfield Services Root G2, which
//! cross-signs them), so there those five, compiled in, are all it trusts and a cold start reads no
//! certificate file: loading the platform's store (one bundle of ~150 certificates, and on some
//! hosts a directory of hundreds of files) was the largest part of the functions' init phase
//! (docs/benchmarks.md). Everywhere else, or where an endpoint may chain to another root (an
//! endpoint override, a partition other than the commercial and GovCloud ones, a private CA named
//! by `SSL_CERT_FILE`/`SSL_CERT_DIR`, a proxy), the platform's roots are trusted as well.

use aws_smithy_http_client::tls::TrustStore;

/// Amazon Trust Services' roots, PEM.
const AMAZON_ROOTS: [&str; 5] = [
    include_str!("amazon_roots/amazon_root_ca_1.pem"),
    include_str!("amazon_roots/amazon_root_ca_2.pem"),
    include_str!("amazon_roots/amazon_root_ca_3.pem"),
    include_str!("amazon_roots/amazon_root_ca_4.pem"),
    include_str!("amazon_roots/starfield_services_root_certificate_authority_g2.pem"),
];

/// The trust store of the SDK's HTTPS client in this process's environment.
pub(crate) fn trust_store() -> TrustStore {
    // Names only, read without decoding values: a variable that is not UTF-8 cannot matter here.
    let names = std::env::vars_os().filter_map(|(name, _)| name.into_string().ok());
    let platform = trusts_platform_roots(|name| std::env::var(name).ok(), names);
    AMAZON_ROOTS
        .iter()
        .fold(TrustStore::empty().with_native_roots(platform), |store, pem| {
            store.with_pem_certificate(pem.as_bytes())
        })
}

/// Region prefixes of the partitions whose endpoints may not be certified by Amazon Trust
/// Services (China, the isolated regions, the European Sovereign Cloud).
const OTHER_PARTITIONS: [&str; 4] = ["cn-", "us-iso", "eu-iso", "eusc-"];

/// Variables that make this process reach endpoints through another chain: a proxy (which may
/// inspect TLS), or a private CA the platform's store is told about.
const OTHER_CHAINS: [&str; 6] = [
    "SSL_CERT_FILE",
    "SSL_CERT_DIR",
    "HTTPS_PROXY",
    "https_proxy",
    "ALL_PROXY",
    "all_proxy",
];

/// Whether the platform's roots are needed beside Amazon's: outside Lambda (a developer's
/// machine: `~/.aws/config` may name any endpoint, a proxy may re-sign), and in Lambda where an
/// endpoint override may point anywhere or the partition is not certified by Amazon Trust
/// Services.
fn trusts_platform_roots(var: impl Fn(&str) -> Option<String>, mut names: impl Iterator<Item = String>) -> bool {
    let set = |name: &str| var(name).is_some_and(|value| !value.trim().is_empty());
    let in_lambda = set("AWS_LAMBDA_FUNCTION_NAME");
    let other_partition = ["AWS_REGION", "AWS_DEFAULT_REGION"]
        .iter()
        .filter_map(|name| var(name))
        .any(|region| OTHER_PARTITIONS.iter().any(|prefix| region.trim().starts_with(prefix)));
    !in_lambda
        || other_partition
        || OTHER_CHAINS.iter().any(|name| set(name))
        || names.any(|name| name.starts_with("AWS_ENDPOINT_URL"))
}

#[cfg(test)]
mod tests {
    use super::*;
    use base64::Engine;

    #[test]
    fn each_root_is_one_pem_certificate() {
        for pem in AMAZON_ROOTS {
            let body: String = pem.lines().filter(|line| !line.starts_with("-----")).collect();
            assert!(pem.starts_with("-----BEGIN CERTIFICATE-----\n"), "{pem}");
            assert!(pem.trim_end().ends_with("-----END CERTIFICATE-----"), "{pem}");
            assert_eq!(pem.matches("BEGIN CERTIFICATE").count(), 1);
            let der = base64::engine::general_purpose::STANDARD.decode(body).unwrap();
            // A DER SEQUENCE whose length is what follows it.
            assert_eq!(der[0], 0x30);
            assert!(der.len() > 300, "{} bytes", der.len());
        }
    }

    /// The SDK's client over these roots builds its TLS connector (which parses every root, and
    /// would panic on a bad one) and reports a refused connection as a dispatch failure.
    #[cfg(feature = "aws")]
    #[tokio::test]
    async fn the_sdk_client_over_these_roots_connects() {
        use aws_sdk_dynamodb::config::{Credentials, Region};
        let config = aws_sdk_dynamodb::Config::builder()
            .behavior_version(aws_config::BehaviorVersion::latest())
            .region(Region::new("us-east-1"))
            .credentials_provider(Credentials::new("AKID", "secret", None, None, "test"))
            .endpoint_url("https://127.0.0.1:1")
            .http_client(super::super::https_client())
            .build();
        let err = aws_sdk_dynamodb::Client::from_conf(config)
            .list_tables()
            .send()
            .await
            .unwrap_err();
        assert!(
            matches!(
                err,
                aws_smithy_runtime_api::client::result::SdkError::DispatchFailure(_)
            ),
            "{err:?}"
        );
    }

    #[test]
    fn platform_roots_only_where_an_endpoint_may_chain_elsewhere() {
        let decide = |pairs: &[(&str, &str)]| {
            let owned: Vec<(String, String)> = pairs.iter().map(|(n, v)| ((*n).to_owned(), (*v).to_owned())).collect();
            let var = |name: &str| owned.iter().find(|(n, _)| n == name).map(|(_, v)| v.clone());
            trusts_platform_roots(var, owned.iter().map(|(n, _)| n.clone()))
        };
        let lambda = ("AWS_LAMBDA_FUNCTION_NAME", "nimbus-inference");
        // In Lambda, in a commercial or GovCloud region: Amazon's roots alone.
        assert!(!decide(&[lambda, ("AWS_REGION", "us-east-1")]));
        assert!(!decide(&[lambda, ("AWS_REGION", "us-gov-west-1")]));
        // Outside Lambda: the platform's too.
        assert!(decide(&[("AWS_REGION", "us-east-1")]));
        assert!(decide(&[
            ("AWS_LAMBDA_FUNCTION_NAME", " "),
            ("AWS_REGION", "us-east-1")
        ]));
        // Other partitions.
        assert!(decide(&[lambda, ("AWS_REGION", "cn-north-1")]));
        assert!(decide(&[lambda, ("AWS_DEFAULT_REGION", "cn-northwest-1")]));
        assert!(decide(&[lambda, ("AWS_REGION", "us-isob-east-1")]));
        assert!(decide(&[lambda, ("AWS_REGION", "eusc-de-east-1")]));
        // Endpoint overrides, private CAs, proxies.
        assert!(decide(&[lambda, ("AWS_ENDPOINT_URL", "https://localhost:4566")]));
        assert!(decide(&[lambda, ("AWS_ENDPOINT_URL_S3", "https://minio.internal")]));
        assert!(decide(&[lambda, ("SSL_CERT_FILE", "/opt/ca.pem")]));
        assert!(decide(&[lambda, ("HTTPS_PROXY", "http://proxy:3128")]));
        assert!(!decide(&[lambda, ("HTTPS_PROXY", "")]));
    }
}
