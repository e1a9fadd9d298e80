//! The roots the AWS SDK's HTTPS client trusts. Every public AWS endpoint's certificate chains to
//! one of Amazon Trust Services' roots (Amazon Root CA 1–4, and Starfield Services Root G2, which
//! cross-signs them), so those five are compiled in and a cold start reads no certificate file:
//! loading the platform's store (one bundle of ~150 certificates, and on some hosts a directory of
//! hundreds of files) was the largest part of the functions' init phase (docs/benchmarks.md).
//! Where an endpoint may chain to another root (an `AWS_ENDPOINT_URL…` override, the China
//! partition), the platform's roots are trusted as well.

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
    let platform = trusts_platform_roots(|name| std::env::var(name).ok(), std::env::vars().map(|(name, _)| name));
    AMAZON_ROOTS
        .iter()
        .fold(TrustStore::empty().with_native_roots(platform), |store, pem| {
            store.with_pem_certificate(pem.as_bytes())
        })
}

/// Whether the platform's roots are needed beside Amazon's: an endpoint override may point
/// anywhere, and the China partition's endpoints are not certified by Amazon Trust Services.
fn trusts_platform_roots(var: impl Fn(&str) -> Option<String>, mut names: impl Iterator<Item = String>) -> bool {
    let china = ["AWS_REGION", "AWS_DEFAULT_REGION"]
        .iter()
        .filter_map(|name| var(name))
        .any(|region| region.trim().starts_with("cn-"));
    china || names.any(|name| name.starts_with("AWS_ENDPOINT_URL"))
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
        let env = |pairs: &'static [(&'static str, &'static str)]| {
            (
                move |name: &str| pairs.iter().find(|(n, _)| *n == name).map(|(_, v)| (*v).to_owned()),
                pairs
                    .iter()
                    .map(|(n, _)| (*n).to_owned())
                    .collect::<Vec<_>>()
                    .into_iter(),
            )
        };
        let (var, names) = env(&[("AWS_REGION", "us-east-1")]);
        assert!(!trusts_platform_roots(var, names));
        let (var, names) = env(&[("AWS_REGION", "cn-north-1")]);
        assert!(trusts_platform_roots(var, names));
        let (var, names) = env(&[("AWS_DEFAULT_REGION", "cn-northwest-1")]);
        assert!(trusts_platform_roots(var, names));
        let (var, names) = env(&[
            ("AWS_REGION", "eu-west-1"),
            ("AWS_ENDPOINT_URL", "https://localhost:4566"),
        ]);
        assert!(trusts_platform_roots(var, names));
        let (var, names) = env(&[("AWS_ENDPOINT_URL_S3", "https://minio.internal")]);
        assert!(trusts_platform_roots(var, names));
    }
}
