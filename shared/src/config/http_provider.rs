//! What the config of every provider that calls over HTTP shares: its URL check and timeouts.

use super::ConfigError;

/// Shared by every provider type that takes a whole-request timeout.
pub(super) fn default_timeout_ms() -> u64 {
    120_000
}
pub(super) fn default_connect_timeout_ms() -> u64 {
    5_000
}

/// `url` (the value of `key`) is an http(s) URL.
pub(super) fn check_http_url(key: &str, url: &str) -> Result<(), ConfigError> {
    if url.starts_with("http://") || url.starts_with("https://") {
        return Ok(());
    }
    Err(ConfigError::invalid(key, format!("`{url}` is not an http(s) URL")))
}

/// Every timeout of the provider at `key` is positive (named `{key}.timeout_ms`).
pub(super) fn check_timeouts(key: &str, timeouts: &[u64]) -> Result<(), ConfigError> {
    if timeouts.contains(&0) {
        return Err(ConfigError::invalid(
            format!("{key}.timeout_ms"),
            "timeouts must be positive",
        ));
    }
    Ok(())
}
