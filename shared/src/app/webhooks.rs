//! Wiring of the webhook services: secrets, endpoints and batch event deliveries over one set of
//! adapters, and the HTTP transport (built on first use) of a URL policy.

use super::Adapters;
use crate::adapters::webhook_http::{HttpWebhookTransport, WebhookClientError};
use crate::ports::metrics::status_class;
use crate::ports::{MetricsSink, PostOutcome, WebhookTransport};
use crate::webhooks::{BatchWebhooks, BatchWebhooksDeps, UrlPolicy, WebhookEndpoints, WebhookSecrets, WebhookUrl};
use async_trait::async_trait;
use bytes::Bytes;
use std::sync::{Arc, OnceLock};

/// The project webhook secrets over `adapters` (each instance caches secrets for 30 s, and only
/// until a revocation in the project).
pub fn webhook_secrets(adapters: &Adapters) -> Arc<WebhookSecrets> {
    Arc::new(WebhookSecrets::new(
        Arc::clone(&adapters.state),
        Arc::clone(&adapters.clock),
        Arc::clone(&adapters.ids),
        Arc::clone(&adapters.sealer),
    ))
}

/// Webhook endpoints, their URLs checked against the adapters' policy.
pub(crate) fn webhook_endpoints(adapters: &Adapters) -> Arc<WebhookEndpoints> {
    Arc::new(WebhookEndpoints::new(
        Arc::clone(&adapters.state),
        Arc::clone(&adapters.clock),
        Arc::clone(&adapters.ids),
        adapters.webhook_urls,
        Arc::clone(&adapters.sealer),
    ))
}

/// Batch events to webhook endpoints: the batch engine's event sink, the `webhook_deliver` job
/// runner and the scheduled task of its deliveries.
pub fn batch_webhooks(adapters: &Adapters) -> Arc<BatchWebhooks> {
    Arc::new(
        BatchWebhooks::new(BatchWebhooksDeps {
            state: Arc::clone(&adapters.state),
            queue: Arc::clone(&adapters.queue),
            clock: Arc::clone(&adapters.clock),
            ids: Arc::clone(&adapters.ids),
            endpoints: webhook_endpoints(adapters),
            transport: Arc::clone(&adapters.webhooks),
        })
        .with_due_index_shards(adapters.due_index_shards),
    )
}

/// [`HttpWebhookTransport`] of `policy`, its client built on the first post (a host that sends no
/// webhook never builds it). Should the client fail to build, every post fails saying why: the
/// deliveries record it and are retried.
pub(crate) fn webhook_transport(policy: UrlPolicy) -> Arc<dyn WebhookTransport> {
    Arc::new(LazyHttpTransport {
        policy,
        client: OnceLock::new(),
    })
}

struct LazyHttpTransport {
    policy: UrlPolicy,
    client: OnceLock<Result<HttpWebhookTransport, WebhookClientError>>,
}

#[async_trait]
impl WebhookTransport for LazyHttpTransport {
    async fn post(&self, url: &WebhookUrl, headers: &[(String, String)], body: Bytes) -> PostOutcome {
        let client = self.client.get_or_init(|| HttpWebhookTransport::new(self.policy));
        match client {
            Ok(transport) => transport.post(url, headers, body).await,
            Err(reason) => {
                tracing::error!(%reason, "the webhook HTTP client could not be built");
                PostOutcome::Failed {
                    reason: reason.to_string(),
                    timed_out: false,
                }
            }
        }
    }
}

/// `inner` with every post measured: `webhook_deliveries` by outcome (the receiver's status
/// class, `refused`, `failed` or `timed_out`) and `webhook_delivery_duration`.
pub(crate) fn metered_transport(
    inner: Arc<dyn WebhookTransport>,
    metrics: Arc<dyn MetricsSink>,
) -> Arc<dyn WebhookTransport> {
    Arc::new(MeteredTransport { inner, metrics })
}

struct MeteredTransport {
    inner: Arc<dyn WebhookTransport>,
    metrics: Arc<dyn MetricsSink>,
}

#[async_trait]
impl WebhookTransport for MeteredTransport {
    async fn post(&self, url: &WebhookUrl, headers: &[(String, String)], body: Bytes) -> PostOutcome {
        let started = std::time::Instant::now();
        let outcome = self.inner.post(url, headers, body).await;
        let label = match &outcome {
            PostOutcome::Response { status, .. } => status_class(*status),
            PostOutcome::Refused { .. } => "refused",
            PostOutcome::Failed { timed_out: true, .. } => "timed_out",
            PostOutcome::Failed { .. } => "failed",
        };
        self.metrics.record_timed(
            "webhook_deliveries",
            "webhook_delivery_duration",
            started,
            &[("outcome", label)],
        );
        outcome
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use crate::adapters::embedded::PrometheusMetrics;
    use std::sync::Mutex;
    use std::time::Duration;

    /// Answers the scripted outcomes in order.
    struct Scripted(Mutex<Vec<PostOutcome>>);

    #[async_trait]
    impl WebhookTransport for Scripted {
        async fn post(&self, _url: &WebhookUrl, _headers: &[(String, String)], _body: Bytes) -> PostOutcome {
            self.0.lock().unwrap().remove(0)
        }
    }

    #[tokio::test]
    async fn every_post_is_counted_by_its_outcome() {
        let metrics = Arc::new(PrometheusMetrics::new());
        let script = vec![
            PostOutcome::Response {
                status: 204,
                retry_after: None,
            },
            PostOutcome::Response {
                status: 503,
                retry_after: Some(Duration::from_secs(1)),
            },
            PostOutcome::Refused {
                reason: "private address".into(),
            },
            PostOutcome::Failed {
                reason: "timed out".into(),
                timed_out: true,
            },
        ];
        let transport = metered_transport(
            Arc::new(Scripted(Mutex::new(script))),
            Arc::clone(&metrics) as Arc<dyn MetricsSink>,
        );
        let url = WebhookUrl::parse("https://hooks.example.com/in", &UrlPolicy::default()).unwrap();
        for _ in 0..4 {
            transport.post(&url, &[], Bytes::from_static(b"{}")).await;
        }
        let text = metrics.prometheus_text().unwrap();
        for outcome in ["2xx", "5xx", "refused", "timed_out"] {
            let line = format!("nimbus_webhook_deliveries_total{{outcome=\"{outcome}\"}} 1\n");
            assert!(text.contains(&line), "{line} missing:\n{text}");
        }
        assert!(!text.contains("hooks.example.com"), "{text}");
    }
}
