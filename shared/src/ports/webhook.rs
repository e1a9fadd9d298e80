//! Sending one webhook request. The adapter guards against server-side request forgery: it refuses
//! to connect when the host resolves to an address its [`UrlPolicy`](crate::ports::webhook_url::UrlPolicy)
//! forbids.

use crate::ports::webhook_url::WebhookUrl;
use async_trait::async_trait;
use bytes::Bytes;
use std::time::Duration;

/// What became of one POST.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PostOutcome {
    /// The receiver answered (any status). `retry_after` is its `Retry-After`, when readable.
    Response { status: u16, retry_after: Option<Duration> },
    /// The URL or an address it resolves to is forbidden: nothing was connected to.
    Refused { reason: String },
    /// Resolving, connecting, sending or reading failed, or the time ran out.
    Failed { reason: String, timed_out: bool },
}

/// Posts a webhook body with the given headers, exactly the bytes given.
#[async_trait]
pub trait WebhookTransport: Send + Sync {
    async fn post(&self, url: &WebhookUrl, headers: &[(String, String)], body: Bytes) -> PostOutcome;
}
