//! Retry policy: exponential backoff with jitter, honouring the provider's `Retry-After`.

use crate::backoff::{Backoff, Jitter};
use crate::config::RetryConfig;
use std::time::Duration;

#[derive(Debug, Clone, PartialEq)]
pub struct RetryPolicy {
    pub max_retries: u32,
    pub initial_backoff: Duration,
    pub max_backoff: Duration,
    pub max_retry_after: Duration,
}

/// What to do after a failed attempt.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum RetryDecision {
    /// Wait this long, then try the same provider again.
    RetryAfter(Duration),
    /// Stop trying this provider.
    GiveUp,
}

impl From<&RetryConfig> for RetryPolicy {
    fn from(config: &RetryConfig) -> Self {
        Self {
            max_retries: config.max_retries,
            initial_backoff: Duration::from_millis(config.initial_backoff_ms),
            max_backoff: Duration::from_millis(config.max_backoff_ms),
            max_retry_after: Duration::from_millis(config.max_retry_after_ms),
        }
    }
}

impl RetryPolicy {
    /// Decide after failed attempt number `attempt` (0-based). `jitter` is a uniform sample from
    /// `[0, 1)`; the backoff is "equal jitter": half the exponential delay plus a random half.
    pub(crate) fn decide(
        &self,
        attempt: u32,
        retryable: bool,
        retry_after: Option<Duration>,
        jitter: f64,
    ) -> RetryDecision {
        if !retryable || attempt >= self.max_retries {
            return RetryDecision::GiveUp;
        }
        if let Some(wait) = retry_after {
            return if wait <= self.max_retry_after {
                RetryDecision::RetryAfter(wait)
            } else {
                RetryDecision::GiveUp
            };
        }
        let backoff = Backoff {
            first: self.initial_backoff,
            cap: self.max_backoff,
        };
        RetryDecision::RetryAfter(Jitter::Equal.apply(backoff.delay(attempt), jitter))
    }
}

/// Parse `retry-after-ms` (milliseconds) or `retry-after` (seconds, or an HTTP date ignored as
/// unknown) from response headers.
pub(crate) fn retry_after_from_headers(headers: &http::HeaderMap) -> Option<Duration> {
    let text = |name: &str| headers.get(name).and_then(|v| v.to_str().ok()).map(str::trim);
    if let Some(ms) = text("retry-after-ms").and_then(|v| v.parse::<f64>().ok()) {
        if ms.is_finite() && ms >= 0.0 {
            return Some(Duration::from_secs_f64(ms / 1000.0));
        }
    }
    text("retry-after")
        .and_then(|v| v.parse::<f64>().ok())
        .filter(|s| s.is_finite() && *s >= 0.0)
        .map(Duration::from_secs_f64)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn policy() -> RetryPolicy {
        RetryPolicy {
            max_retries: 3,
            initial_backoff: Duration::from_millis(100),
            max_backoff: Duration::from_millis(300),
            max_retry_after: Duration::from_secs(10),
        }
    }

    #[test]
    fn backoff_grows_exponentially_with_bounded_jitter() {
        let p = policy();
        assert_eq!(
            p.decide(0, true, None, 0.0),
            RetryDecision::RetryAfter(Duration::from_millis(50))
        );
        assert_eq!(
            p.decide(0, true, None, 1.0),
            RetryDecision::RetryAfter(Duration::from_millis(100))
        );
        assert_eq!(
            p.decide(1, true, None, 0.0),
            RetryDecision::RetryAfter(Duration::from_millis(100))
        );
        // Capped at max_backoff.
        assert_eq!(
            p.decide(2, true, None, 1.0),
            RetryDecision::RetryAfter(Duration::from_millis(300))
        );
    }

    #[test]
    fn gives_up_when_not_retryable_or_out_of_attempts() {
        let p = policy();
        assert_eq!(p.decide(0, false, None, 0.5), RetryDecision::GiveUp);
        assert_eq!(p.decide(3, true, None, 0.5), RetryDecision::GiveUp);
    }

    #[test]
    fn honours_retry_after_unless_too_long() {
        let p = policy();
        let wait = Duration::from_secs(2);
        assert_eq!(p.decide(0, true, Some(wait), 0.9), RetryDecision::RetryAfter(wait));
        assert_eq!(
            p.decide(0, true, Some(Duration::from_secs(60)), 0.9),
            RetryDecision::GiveUp
        );
    }

    #[test]
    fn reads_retry_after_headers() {
        let mut headers = http::HeaderMap::new();
        headers.insert("retry-after", http::HeaderValue::from_static("3"));
        assert_eq!(retry_after_from_headers(&headers), Some(Duration::from_secs(3)));
        headers.insert("retry-after-ms", http::HeaderValue::from_static("250"));
        assert_eq!(retry_after_from_headers(&headers), Some(Duration::from_millis(250)));
        let mut dated = http::HeaderMap::new();
        dated.insert(
            "retry-after",
            http::HeaderValue::from_static("Wed, 21 Oct 2015 07:28:00 GMT"),
        );
        assert_eq!(retry_after_from_headers(&dated), None);
    }
}
