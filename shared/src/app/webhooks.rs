//! Wiring of the webhook services: secrets, endpoints and batch event deliveries over one set of
//! adapters, and the HTTP transport (built on first use) of a URL policy.

use super::Adapters;
use crate::adapters::webhook_http::HttpWebhookTransport;
use crate::ports::{PostOutcome, WebhookTransport};
use crate::webhooks::{BatchWebhooks, BatchWebhooksDeps, UrlPolicy, WebhookEndpoints, WebhookSecrets, WebhookUrl};
use async_trait::async_trait;
use bytes::Bytes;
use std::sync::{Arc, OnceLock};

/// The project webhook secrets over `adapters` (each instance caches secrets for 30 s).
pub fn webhook_secrets(adapters: &Adapters) -> Arc<WebhookSecrets> {
    Arc::new(WebhookSecrets::new(
        Arc::clone(&adapters.state),
        Arc::clone(&adapters.clock),
        Arc::clone(&adapters.ids),
    ))
}

/// Webhook endpoints, their URLs checked against the adapters' policy.
pub fn webhook_endpoints(adapters: &Adapters) -> Arc<WebhookEndpoints> {
    Arc::new(WebhookEndpoints::new(
        Arc::clone(&adapters.state),
        Arc::clone(&adapters.clock),
        Arc::clone(&adapters.ids),
        adapters.webhook_urls,
    ))
}

/// Batch events to webhook endpoints: the batch engine's event sink, the `webhook_deliver` job
/// runner and the scheduled task of its deliveries.
pub fn batch_webhooks(adapters: &Adapters) -> Arc<BatchWebhooks> {
    Arc::new(BatchWebhooks::new(BatchWebhooksDeps {
        state: Arc::clone(&adapters.state),
        queue: Arc::clone(&adapters.queue),
        clock: Arc::clone(&adapters.clock),
        ids: Arc::clone(&adapters.ids),
        endpoints: webhook_endpoints(adapters),
        transport: Arc::clone(&adapters.webhooks),
    }))
}

/// [`HttpWebhookTransport`] of `policy`, its client built on the first post (a host that sends no
/// webhook never builds it). Should the client fail to build, every post fails saying why: the
/// deliveries record it and are retried.
pub fn webhook_transport(policy: UrlPolicy) -> Arc<dyn WebhookTransport> {
    Arc::new(LazyHttpTransport {
        policy,
        client: OnceLock::new(),
    })
}

struct LazyHttpTransport {
    policy: UrlPolicy,
    client: OnceLock<Result<HttpWebhookTransport, String>>,
}

#[async_trait]
impl WebhookTransport for LazyHttpTransport {
    async fn post(&self, url: &WebhookUrl, headers: &[(String, String)], body: Bytes) -> PostOutcome {
        let client = self
            .client
            .get_or_init(|| HttpWebhookTransport::new(self.policy).map_err(|err| err.to_string()));
        match client {
            Ok(transport) => transport.post(url, headers, body).await,
            Err(reason) => {
                tracing::error!(%reason, "the webhook HTTP client could not be built");
                PostOutcome::Failed {
                    reason: format!("the webhook HTTP client could not be built: {reason}"),
                    timed_out: false,
                }
            }
        }
    }
}
