//! [`WebhookTransport`] over reqwest, guarded against server-side request forgery.
//!
//! Before each POST the URL is checked again under the [`UrlPolicy`]. Host names go through a
//! resolver that looks up every address and fails the connection when ANY of them is forbidden,
//! so the connection can only go to an address that was checked (the Host header and TLS server
//! name stay the URL's host). No redirects are followed, no proxy is used, every request has a
//! deadline, and at most [`MAX_RESPONSE_BYTES`] of a response body are read.

use crate::ports::webhook_url::{UrlPolicy, WebhookUrl};
use crate::ports::{PostOutcome, WebhookTransport};
use crate::user_text::excerpt;
use async_trait::async_trait;
use bytes::Bytes;
use reqwest::dns::{Addrs, Name, Resolve, Resolving};
use reqwest::header::{HeaderMap, HeaderName, HeaderValue, RETRY_AFTER};
use std::error::Error as StdError;
use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;
use std::time::{Duration, SystemTime};

/// How long one webhook request may take, connection and response included.
pub(crate) const DEFAULT_TIMEOUT: Duration = Duration::from_secs(10);
/// The most bytes of a receiver's response body read (the rest is dropped with the connection).
pub(crate) const MAX_RESPONSE_BYTES: usize = 64 * 1024;
/// The one reason a tenant is told for a request that got no response, whatever went wrong (no
/// address, refused, reset, TLS, time out): telling them apart would let a tenant map which hosts
/// and ports exist. The cause goes to the operator's log.
pub(crate) const UNREACHABLE: &str = "the destination could not be reached or did not answer in time";
/// The reason a tenant is told when the host resolves to an address webhooks may not reach (the
/// address itself is not told).
pub(crate) const FORBIDDEN_DESTINATION: &str = "the webhook host resolves to a private, reserved or internal address";

/// The HTTP client could not be built (TLS backend initialisation).
#[derive(Debug, thiserror::Error)]
#[error("cannot build the webhook HTTP client: {0}")]
pub(crate) struct WebhookClientError(#[from] reqwest::Error);

/// Sends webhooks with reqwest; see the module documentation for the guards.
#[derive(Debug, Clone)]
pub(crate) struct HttpWebhookTransport {
    policy: UrlPolicy,
    client: reqwest::Client,
}

impl HttpWebhookTransport {
    /// A transport with the [`DEFAULT_TIMEOUT`].
    pub fn new(policy: UrlPolicy) -> Result<Self, WebhookClientError> {
        Self::with_timeout(policy, DEFAULT_TIMEOUT)
    }

    /// A transport whose requests give up after `timeout`.
    pub(crate) fn with_timeout(policy: UrlPolicy, timeout: Duration) -> Result<Self, WebhookClientError> {
        Self::build(policy, policy, timeout)
    }

    /// `url_policy` checks the URL, `resolver_policy` the addresses its host resolves to (the same
    /// policy outside tests, which split them to reach the resolver with a loopback name).
    fn build(url_policy: UrlPolicy, resolver_policy: UrlPolicy, timeout: Duration) -> Result<Self, WebhookClientError> {
        let client = reqwest::Client::builder()
            .dns_resolver(Arc::new(CheckingResolver {
                policy: resolver_policy,
            }))
            .redirect(reqwest::redirect::Policy::none())
            .no_proxy()
            .timeout(timeout)
            .tcp_nodelay(true)
            .pool_idle_timeout(Duration::from_secs(30))
            .build()?;
        Ok(Self {
            policy: url_policy,
            client,
        })
    }
}

#[async_trait]
impl WebhookTransport for HttpWebhookTransport {
    async fn post(&self, url: &WebhookUrl, headers: &[(String, String)], body: Bytes) -> PostOutcome {
        if let Err(refusal) = url.check(&self.policy) {
            return PostOutcome::Refused {
                reason: refusal.to_string(),
            };
        }
        let headers = match header_map(headers) {
            Ok(headers) => headers,
            Err(bad) => {
                return PostOutcome::Failed {
                    reason: bad.to_string(),
                    timed_out: false,
                }
            }
        };
        let sent = self
            .client
            .post(url.url().clone())
            .headers(headers)
            .body(body)
            .send()
            .await;
        let mut response = match sent {
            Ok(response) => response,
            Err(error) => return failure_outcome(&error),
        };
        let status = response.status().as_u16();
        let retry_after = retry_after(response.headers(), SystemTime::now());
        // Read (and drop) a bounded part of the body so a small response can free the connection.
        let mut read = 0usize;
        while read < MAX_RESPONSE_BYTES {
            match response.chunk().await {
                Ok(Some(chunk)) => read += chunk.len(),
                Ok(None) | Err(_) => break,
            }
        }
        PostOutcome::Response { status, retry_after }
    }
}

/// A header a delivery cannot send.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
enum BadHeader {
    #[error("'{0}' is not a valid header name")]
    Name(String),
    #[error("the value of header '{0}' is not valid")]
    Value(String),
}

fn header_map(headers: &[(String, String)]) -> Result<HeaderMap, BadHeader> {
    let mut map = HeaderMap::with_capacity(headers.len());
    for (name, value) in headers {
        let header_name =
            HeaderName::from_bytes(name.as_bytes()).map_err(|_| BadHeader::Name(excerpt(name).into_owned()))?;
        let header_value = HeaderValue::from_str(value).map_err(|_| BadHeader::Value(excerpt(name).into_owned()))?;
        map.append(header_name, header_value);
    }
    Ok(map)
}

/// The outcome of a request that got no response: refused by the resolver, timed out or failed.
/// The tenant's reason is [`FORBIDDEN_DESTINATION`] or [`UNREACHABLE`]; the root cause is logged
/// (never the URL: its query may hold a token).
fn failure_outcome(error: &reqwest::Error) -> PostOutcome {
    let mut root: &(dyn StdError + 'static) = error;
    while let Some(source) = root.source() {
        if let Some(refused) = source.downcast_ref::<ForbiddenResolution>() {
            tracing::warn!(cause = %refused, "a webhook host resolved to a forbidden address");
            return PostOutcome::Refused {
                reason: FORBIDDEN_DESTINATION.to_owned(),
            };
        }
        root = source;
    }
    let timed_out = error.is_timeout();
    let stage = if timed_out {
        "timed out"
    } else if error.is_connect() {
        "could not connect"
    } else {
        "failed"
    };
    tracing::info!(stage, cause = %root, "a webhook request got no response");
    PostOutcome::Failed {
        reason: UNREACHABLE.to_owned(),
        timed_out,
    }
}

/// `Retry-After` as a delay from `now`: delta seconds, or an HTTP date (a past date is no delay).
fn retry_after(headers: &HeaderMap, now: SystemTime) -> Option<Duration> {
    let text = headers.get(RETRY_AFTER)?.to_str().ok()?.trim();
    if let Ok(seconds) = text.parse::<u64>() {
        return Some(Duration::from_secs(seconds));
    }
    let at = httpdate::parse_http_date(text).ok()?;
    Some(at.duration_since(now).unwrap_or(Duration::ZERO))
}

/// A host name resolved to an address the policy forbids.
#[derive(Debug, thiserror::Error)]
#[error("the webhook host '{host}' resolves to {address}, which webhooks may not reach")]
struct ForbiddenResolution {
    host: String,
    address: IpAddr,
}

/// Resolves with the system resolver and fails unless every address is permitted.
struct CheckingResolver {
    policy: UrlPolicy,
}

impl Resolve for CheckingResolver {
    fn resolve(&self, name: Name) -> Resolving {
        let policy = self.policy;
        let host = name.as_str().to_owned();
        Box::pin(async move {
            let addresses: Vec<SocketAddr> = tokio::net::lookup_host((host.as_str(), 0)).await?.collect();
            if let Some(forbidden) = addresses.iter().find(|address| !policy.permits_address(address.ip())) {
                return Err(Box::new(ForbiddenResolution {
                    host: excerpt(&host).into_owned(),
                    address: forbidden.ip(),
                }) as Box<dyn StdError + Send + Sync>);
            }
            Ok(Box::new(addresses.into_iter()) as Addrs)
        })
    }
}

#[cfg(test)]
#[path = "webhook_http_tests.rs"]
mod tests;
