//! Provider keys kept in a parameter store: `api_key_location = "ssm::/NAME"` names a parameter
//! the deployment holds (an SSM SecureString on AWS, a file under the data directory locally), so
//! no key sits in a function's environment. Read on first use and kept for the life of the
//! process ([`CachedProviderSecrets`]).

use async_trait::async_trait;
use std::collections::HashMap;
use std::fmt;
use std::sync::{Arc, Mutex, PoisonError};
use tokio::sync::OnceCell;

/// Reads a provider key by its parameter name (`/nimbus/openai-api-key`), decrypted.
#[async_trait]
pub trait ProviderSecrets: Send + Sync + fmt::Debug {
    /// The value of parameter `name`. Adapters never log it.
    async fn parameter(&self, name: &str) -> Result<SecretValue, SecretError>;
}

/// The longest parameter name SSM takes (its limit on a fully qualified name).
const MAX_PARAMETER_NAME: usize = 1011;
/// The deepest parameter hierarchy SSM takes (`/a/b/…`, 15 levels).
const MAX_PARAMETER_LEVELS: usize = 15;

/// Why a name is no parameter name (the message says what is wrong, never a value).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub(crate) struct InvalidParameterName(String);

/// A parameter name as SSM takes it, fully qualified: `/` then segments of letters, digits and
/// `_.-` joined by `/`, at most 15 levels and 1011 characters, not under SSM's reserved `/aws` or
/// `/ssm`. `.` and `..` segments are refused too (locally the name is a path).
pub(crate) fn check_parameter_name(name: &str) -> Result<(), InvalidParameterName> {
    let Some(path) = name.strip_prefix('/') else {
        return Err(InvalidParameterName(
            "the parameter name must start with `/` (e.g. `ssm::/nimbus/openai-api-key`)".to_owned(),
        ));
    };
    if name.len() > MAX_PARAMETER_NAME {
        return Err(InvalidParameterName(format!(
            "the parameter name is longer than {MAX_PARAMETER_NAME} characters"
        )));
    }
    let segments: Vec<&str> = path.split('/').collect();
    if segments.len() > MAX_PARAMETER_LEVELS {
        return Err(InvalidParameterName(format!(
            "the parameter name has more than {MAX_PARAMETER_LEVELS} levels"
        )));
    }
    for segment in &segments {
        if segment.is_empty() {
            return Err(InvalidParameterName(
                "the parameter name has an empty segment (`//` or a trailing `/`)".to_owned(),
            ));
        }
        if *segment == "." || *segment == ".." {
            return Err(InvalidParameterName(format!(
                "the parameter name has a `{segment}` segment"
            )));
        }
        if let Some(bad) = segment
            .chars()
            .find(|c| !(c.is_ascii_alphanumeric() || matches!(c, '_' | '.' | '-')))
        {
            return Err(InvalidParameterName(format!(
                "the parameter name holds `{bad}`: only letters, digits, `_`, `.`, `-` and `/` are allowed"
            )));
        }
    }
    let first = segments.first().map(|s| s.to_ascii_lowercase()).unwrap_or_default();
    if first.starts_with("aws") || first.starts_with("ssm") {
        return Err(InvalidParameterName(
            "parameter names starting with `/aws` or `/ssm` are reserved by AWS".to_owned(),
        ));
    }
    Ok(())
}

/// A key read from the parameter store: its `Debug` does not show it.
#[derive(Clone, PartialEq, Eq)]
pub struct SecretValue(String);

impl SecretValue {
    pub fn new(value: impl Into<String>) -> Self {
        Self(value.into())
    }

    /// The key itself, for the one place that sends it (the upstream request's bearer token).
    pub fn expose(&self) -> &str {
        &self.0
    }
}

impl fmt::Debug for SecretValue {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("SecretValue(…)")
    }
}

/// Why a parameter could not be read. Messages name the parameter, never its value.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SecretError {
    /// No parameter has this name (or it is empty).
    #[error("parameter `{name}` does not exist{hint}")]
    NotFound { name: String, hint: String },
    /// The parameter exists but may not be read or decrypted by this process.
    #[error("parameter `{name}` may not be read: {reason}")]
    Denied { name: String, reason: String },
    /// The store could not be reached or failed (throttling, network): worth a later try.
    #[error("the parameter store failed reading `{name}`: {reason}")]
    Unavailable { name: String, reason: String },
}

/// No parameter store: every read fails saying so (a stack that wires none).
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct NoProviderSecrets;

#[async_trait]
impl ProviderSecrets for NoProviderSecrets {
    async fn parameter(&self, name: &str) -> Result<SecretValue, SecretError> {
        Err(SecretError::Unavailable {
            name: name.to_owned(),
            reason: "no parameter store is configured in this process".to_owned(),
        })
    }
}

/// Reads each parameter once per process: the first caller reads it (concurrent callers wait for
/// that one read), later callers get the kept value. A failed read is not kept, so the next use
/// tries again (a store briefly unavailable at start-up fails only the requests made meanwhile).
pub(crate) struct CachedProviderSecrets {
    inner: Arc<dyn ProviderSecrets>,
    values: Mutex<HashMap<String, Arc<OnceCell<SecretValue>>>>,
}

impl CachedProviderSecrets {
    pub fn new(inner: Arc<dyn ProviderSecrets>) -> Self {
        Self {
            inner,
            values: Mutex::new(HashMap::new()),
        }
    }
}

impl fmt::Debug for CachedProviderSecrets {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("CachedProviderSecrets")
            .field("inner", &self.inner)
            .finish_non_exhaustive()
    }
}

#[async_trait]
impl ProviderSecrets for CachedProviderSecrets {
    async fn parameter(&self, name: &str) -> Result<SecretValue, SecretError> {
        let cell = {
            let mut values = self.values.lock().unwrap_or_else(PoisonError::into_inner);
            Arc::clone(values.entry(name.to_owned()).or_default())
        };
        cell.get_or_try_init(|| self.inner.parameter(name)).await.cloned()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicUsize, Ordering};

    /// Fails its first `failures` reads, then answers `key-for:<name>`; counts every read.
    #[derive(Debug, Default)]
    struct Flaky {
        failures: usize,
        reads: AtomicUsize,
    }

    #[async_trait]
    impl ProviderSecrets for Flaky {
        async fn parameter(&self, name: &str) -> Result<SecretValue, SecretError> {
            let read = self.reads.fetch_add(1, Ordering::SeqCst);
            tokio::time::sleep(std::time::Duration::from_millis(20)).await;
            if read < self.failures {
                return Err(SecretError::Unavailable {
                    name: name.to_owned(),
                    reason: "throttled".to_owned(),
                });
            }
            Ok(SecretValue::new(format!("key-for:{name}")))
        }
    }

    #[tokio::test]
    async fn each_parameter_is_read_once_even_by_concurrent_callers() {
        let store = Arc::new(Flaky::default());
        let cached = CachedProviderSecrets::new(store.clone());
        let reads = (0..8).map(|_| cached.parameter("/nimbus/a"));
        for value in futures::future::join_all(reads).await {
            assert_eq!(value.unwrap().expose(), "key-for:/nimbus/a");
        }
        assert_eq!(
            cached.parameter("/nimbus/b").await.unwrap().expose(),
            "key-for:/nimbus/b"
        );
        assert_eq!(
            cached.parameter("/nimbus/a").await.unwrap().expose(),
            "key-for:/nimbus/a"
        );
        assert_eq!(store.reads.load(Ordering::SeqCst), 2);
    }

    #[tokio::test]
    async fn a_failed_read_is_not_kept_the_next_use_reads_again() {
        let store = Arc::new(Flaky {
            failures: 1,
            ..Flaky::default()
        });
        let cached = CachedProviderSecrets::new(store.clone());
        let err = cached.parameter("/nimbus/a").await.unwrap_err();
        assert!(matches!(err, SecretError::Unavailable { .. }), "{err:?}");
        assert_eq!(
            cached.parameter("/nimbus/a").await.unwrap().expose(),
            "key-for:/nimbus/a"
        );
        assert_eq!(
            cached.parameter("/nimbus/a").await.unwrap().expose(),
            "key-for:/nimbus/a"
        );
        assert_eq!(store.reads.load(Ordering::SeqCst), 2);
    }

    #[test]
    fn a_key_never_shows_in_debug_output() {
        let value = SecretValue::new("sk-very-secret");
        assert!(!format!("{value:?}").contains("sk-very"));
    }
}
