//! What the HTTP providers (OpenAI-compatible servers, LMI containers over HTTP) share: one
//! upstream's pooled client, API key and configured headers; its requests; and how its failures read.

use super::api_key::ApiKeySource;
use super::extras::ConfiguredExtras;
use super::retry::retry_after_from_headers;
use super::{CallContext, ProviderError};
use crate::model::ExtraHeaderEntry;
pub(crate) use crate::ports::provider_call::upstream_error_message;
use serde_json::Value;
use std::time::Duration;

/// The largest error body kept as JSON (larger ones keep only their message).
const MAX_KEPT_ERROR_BODY: usize = 64 * 1024;

/// The HTTP client could not be made.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("the HTTP client could not be made: {0}")]
pub(crate) struct HttpClientError(String);

/// The HTTP client of one provider (connection pooling, no Nagle delay).
pub fn http_client(connect_timeout: Duration) -> Result<reqwest::Client, HttpClientError> {
    reqwest::Client::builder()
        .tcp_nodelay(true)
        .connect_timeout(connect_timeout)
        .pool_idle_timeout(Duration::from_secs(60))
        .user_agent(concat!("nimbus/", env!("CARGO_PKG_VERSION")))
        .build()
        .map_err(|e| HttpClientError(e.to_string()))
}

/// One upstream server as a provider calls it.
#[derive(Debug, Clone)]
pub(crate) struct HttpUpstream {
    /// The provider's name (in errors, and to pick the request's extra entries).
    pub provider: String,
    pub client: reqwest::Client,
    pub api_key: ApiKeySource,
    /// The provider's configured `extra_body` / `extra_headers`.
    pub extras: ConfiguredExtras,
    /// The whole-request timeout.
    pub timeout: Duration,
}

impl HttpUpstream {
    /// A JSON POST of `body` to `url`, made ready by [`Self::prepare`]; `whole_request_timeout`
    /// bounds the call by the provider's timeout (not for streams, which their reader times).
    pub(crate) async fn post_json(
        &self,
        url: &str,
        body: impl Into<reqwest::Body>,
        whole_request_timeout: bool,
        headers: &[ExtraHeaderEntry],
        ctx: CallContext<'_>,
    ) -> Result<reqwest::Request, ProviderError> {
        let builder = self
            .client
            .post(url)
            .header(http::header::CONTENT_TYPE, "application/json")
            .body(body);
        self.prepare(builder, whole_request_timeout.then_some(self.timeout), headers, ctx)
            .await
    }

    /// `builder` as this upstream takes it: bounded by `timeout` when given, with the API key as
    /// a bearer token, then the headers: the request's placed before the configured ones, the
    /// configured ones, the request's placed after (a header without a value removes it).
    pub(crate) async fn prepare(
        &self,
        mut builder: reqwest::RequestBuilder,
        timeout: Option<Duration>,
        headers: &[ExtraHeaderEntry],
        ctx: CallContext<'_>,
    ) -> Result<reqwest::Request, ProviderError> {
        if let Some(timeout) = timeout {
            builder = builder.timeout(timeout);
        }
        if let Some(key) = self.api_key.key(&self.provider, ctx).await? {
            builder = builder.bearer_auth(key);
        }
        let mut request = builder.build().map_err(|e| self.transport_error(&e))?;
        self.extras
            .edit_headers(request.headers_mut(), headers, &self.provider)?;
        Ok(request)
    }

    /// Send `request`; a non-2xx answer is [`ProviderError::Http`] with the upstream's message.
    pub async fn send(&self, request: reqwest::Request) -> Result<reqwest::Response, ProviderError> {
        let response = self
            .client
            .execute(request)
            .await
            .map_err(|e| self.transport_error(&e))?;
        if response.status().is_success() {
            return Ok(response);
        }
        Err(error_from_response(response).await)
    }

    /// A failed exchange: a timeout, else a connection error with the whole cause.
    pub(crate) fn transport_error(&self, error: &reqwest::Error) -> ProviderError {
        self.transport_error_within(error, self.timeout)
    }

    /// [`Self::transport_error`] of a call bounded by `timeout` rather than the provider's.
    pub(crate) fn transport_error_within(&self, error: &reqwest::Error, timeout: Duration) -> ProviderError {
        if error.is_timeout() {
            ProviderError::Timeout { after: timeout }
        } else {
            ProviderError::Connection(crate::user_text::error_chain(error))
        }
    }
}

/// A non-2xx answer as [`ProviderError::Http`], keeping the upstream's own message.
async fn error_from_response(response: reqwest::Response) -> ProviderError {
    let status = response.status().as_u16();
    let retry_after = retry_after_from_headers(response.headers());
    let text = response.text().await.unwrap_or_default();
    let parsed = serde_json::from_str::<Value>(&text).ok();
    let message = parsed.as_ref().and_then(upstream_error_message).unwrap_or_else(|| {
        if text.trim().is_empty() {
            format!("HTTP {status} with an empty body")
        } else {
            text.chars().take(2000).collect()
        }
    });
    ProviderError::Http {
        status,
        message,
        retry_after,
        body: parsed.filter(|_| text.len() <= MAX_KEPT_ERROR_BODY),
    }
}
