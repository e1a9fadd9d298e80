//! Which records of the state table each Lambda function may touch: the one list behind the
//! `dynamodb:LeadingKeys` conditions of template.yaml. An item's partition key is `{kind}#{id}` and
//! the `by_owner` index's is `{kind}#{owner}` (`adapters::aws::dynamodb_state`), so a record kind is
//! a key prefix in both: a role limited to `api_key#*` reads key records and nothing else.
//!
//! Kept true three ways: `docs/table-access.json` is this table as JSON (a unit test fails while it
//! is stale: `NIMBUS_BLESS=1 cargo test -p nimbus-shared table_access` rewrites it);
//! `tests/python/test_template_leading_keys.py` checks template.yaml's conditions against that file;
//! and each function's state store is wrapped in [`ScopedState`], which refuses a record kind its
//! role does not allow, so a code path that reaches a new kind fails every Lambda test that runs it
//! (with a message naming this file) instead of only failing with `AccessDenied` once deployed.

use crate::auth::KEY_TAG_SECRET_KIND;
use crate::ports::{ListQuery, Page, Record, StateStore, StorageError};
use crate::scheduler::ARM_KIND;
use crate::tensorzero::experiments::{EPISODE_KIND, OBSERVATION_KIND, STATE_KIND};
use async_trait::async_trait;
use std::sync::Arc;

/// A Lambda function of the stack (its template resource name is [`LambdaFunction::resource`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum LambdaFunction {
    Inference,
    Files,
    Batches,
    Worker,
    Poller,
}

/// What a function may do with the state table's records, by kind (groups of kinds).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct TableAccess {
    /// Kinds it only reads (`GetItem`, and `Query` on `by_owner`).
    pub reads: &'static [&'static [&'static str]],
    /// Kinds it reads and writes (`PutItem`, `DeleteItem`, transactions of them).
    pub writes: &'static [&'static [&'static str]],
}

/// Every request authenticates: its API key's record, the project's revocation version, and (once
/// per process) the secret that tags keys (`auth::key_tags`).
const AUTH: &[&str] = &["api_key", "revocation", KEY_TAG_SECRET_KIND];
/// What the batch engine keeps (a batch's records, its input and output files' records and holds,
/// their expiry tasks, idempotency keys).
const BATCH_WORK: &[&str] = &[
    "batch",
    "batch_chunk",
    "batch_live",
    "batch_active",
    "batch_native_part",
    "idempotency",
    "file",
    "blob_hold",
    "janitor",
];
/// Async requests, the scheduler's due index and the models' concurrency slots.
const ASYNC_WORK: &[&str] = &["async_request", "due_work", "model_slots"];
/// The record that says whether the poller's schedule is armed: written by whoever writes due work
/// and by the poller (`scheduler::Arming`).
const SCHEDULE: &[&str] = &[ARM_KIND];
/// Adaptive experiments as inferences use them: episodes bound to a variant, the decision read.
const EXPERIMENT_EPISODES: &[&str] = &[EPISODE_KIND];
const EXPERIMENT_DECISIONS: &[&str] = &[STATE_KIND];
/// A file's and an upload's records.
const FILES: &[&str] = &["file", "upload", "upload_part", "blob_hold", "janitor", "idempotency"];

impl LambdaFunction {
    #[cfg(test)]
    pub const ALL: [LambdaFunction; 5] = [Self::Inference, Self::Files, Self::Batches, Self::Worker, Self::Poller];

    /// The function's resource in template.yaml.
    pub fn resource(self) -> &'static str {
        match self {
            Self::Inference => "NimbusInferenceFunction",
            Self::Files => "NimbusFilesFunction",
            Self::Batches => "NimbusBatchesFunction",
            Self::Worker => "NimbusWorkerFunction",
            Self::Poller => "NimbusPollerFunction",
        }
    }

    /// The records its role reaches.
    pub fn access(self) -> TableAccess {
        match self {
            // Internet-facing: keys and revocations read-only; no webhook secret or endpoint,
            // no batch, file or async record.
            // Feedback on an experiment's metric is counted for its variant (`experiment_observation`).
            Self::Inference => TableAccess {
                reads: &[AUTH, EXPERIMENT_DECISIONS],
                writes: &[
                    &[
                        "inference",
                        "function_inference",
                        "model_cache",
                        "feedback",
                        OBSERVATION_KIND,
                    ],
                    EXPERIMENT_EPISODES,
                ],
            },
            Self::Files => TableAccess {
                reads: &[AUTH],
                writes: &[FILES, SCHEDULE],
            },
            // The queued-work API: batches (a cancel may finish one here), async requests, webhook
            // secrets (a revocation bumps the project's `revocation` record) and endpoints.
            Self::Batches => TableAccess {
                reads: &[&["api_key", KEY_TAG_SECRET_KIND, "inference"]],
                writes: &[
                    BATCH_WORK,
                    ASYNC_WORK,
                    SCHEDULE,
                    &["revocation", "webhook_secret", "webhook_endpoint", "webhook_delivery"],
                ],
            },
            // Runs the queued jobs: signs with the webhook secrets and endpoints, never writes them.
            Self::Worker => TableAccess {
                reads: &[AUTH, &["webhook_secret", "webhook_endpoint"], EXPERIMENT_DECISIONS],
                writes: &[
                    BATCH_WORK,
                    ASYNC_WORK,
                    SCHEDULE,
                    &["inference", "function_inference", "model_cache", "webhook_delivery"],
                    EXPERIMENT_EPISODES,
                ],
            },
            // The scheduler's pass: files sweep, batch recovery and expiry, due async work and
            // event deliveries (queued, not signed here).
            // … and adaptive experiments recomputed from their counted feedback.
            Self::Poller => TableAccess {
                reads: &[AUTH, &["webhook_endpoint", OBSERVATION_KIND]],
                writes: &[
                    FILES,
                    BATCH_WORK,
                    ASYNC_WORK,
                    SCHEDULE,
                    &["inference", "function_inference", "webhook_delivery"],
                    EXPERIMENT_DECISIONS,
                ],
            },
        }
    }
}

impl TableAccess {
    /// The kinds it only reads, each once.
    #[cfg(test)]
    pub(crate) fn read_kinds(&self) -> Vec<&'static str> {
        kinds(self.reads)
    }

    /// The kinds it writes, each once.
    #[cfg(test)]
    pub(crate) fn write_kinds(&self) -> Vec<&'static str> {
        kinds(self.writes)
    }

    fn may_read(&self, kind: &str) -> bool {
        self.reads.iter().any(|group| group.contains(&kind)) || self.may_write(kind)
    }

    fn may_write(&self, kind: &str) -> bool {
        self.writes.iter().any(|group| group.contains(&kind))
    }
}

/// The kinds of `groups`, sorted, each once.
#[cfg(test)]
fn kinds(groups: &[&'static [&'static str]]) -> Vec<&'static str> {
    let mut kinds: Vec<&'static str> = groups.iter().flat_map(|group| group.iter().copied()).collect();
    kinds.sort_unstable();
    kinds.dedup();
    kinds
}

/// A function's state store limited to the records its role reaches ([`LambdaFunction::access`]):
/// anything else fails as IAM would refuse it, naming the kind and this table.
pub(crate) struct ScopedState {
    inner: Arc<dyn StateStore>,
    function: LambdaFunction,
}

impl ScopedState {
    pub fn new(inner: Arc<dyn StateStore>, function: LambdaFunction) -> Self {
        Self { inner, function }
    }

    fn check(&self, kind: &str, write: bool) -> Result<(), StorageError> {
        let access = self.function.access();
        let allowed = if write {
            access.may_write(kind)
        } else {
            access.may_read(kind)
        };
        if allowed {
            return Ok(());
        }
        let verb = if write { "write" } else { "read" };
        tracing::error!(
            function = self.function.resource(),
            kind,
            verb,
            "record kind outside the function's role"
        );
        Err(StorageError::Backend(format!(
            "{} may not {verb} `{kind}` records: its role's dynamodb:LeadingKeys (app/table_access.rs, template.yaml) do not allow them",
            self.function.resource()
        )))
    }
}

#[async_trait]
impl StateStore for ScopedState {
    async fn create(&self, record: &Record) -> Result<(), StorageError> {
        self.check(&record.kind, true)?;
        self.inner.create(record).await
    }

    async fn get(&self, kind: &str, id: &str) -> Result<Option<Record>, StorageError> {
        self.check(kind, false)?;
        self.inner.get(kind, id).await
    }

    async fn update(&self, record: &Record, expected_version: u64) -> Result<(), StorageError> {
        self.check(&record.kind, true)?;
        self.inner.update(record, expected_version).await
    }

    async fn update_all(&self, updates: &[(Record, u64)]) -> Result<(), StorageError> {
        for (record, _) in updates {
            self.check(&record.kind, true)?;
        }
        self.inner.update_all(updates).await
    }

    async fn delete(&self, kind: &str, id: &str, expected_version: Option<u64>) -> Result<bool, StorageError> {
        self.check(kind, true)?;
        self.inner.delete(kind, id, expected_version).await
    }

    async fn list_by_owner(&self, query: &ListQuery) -> Result<Page, StorageError> {
        self.check(&query.kind, false)?;
        self.inner.list_by_owner(query).await
    }

    async fn list_heads_by_owner(&self, query: &ListQuery) -> Result<Page, StorageError> {
        self.check(&query.kind, false)?;
        self.inner.list_heads_by_owner(query).await
    }
}

/// The table as `docs/table-access.json` holds it: per template resource, its kinds, sorted.
#[cfg(test)]
pub(crate) fn table_access_json() -> serde_json::Value {
    // Sorted by resource (serde_json keeps insertion order).
    let functions: std::collections::BTreeMap<String, serde_json::Value> = LambdaFunction::ALL
        .into_iter()
        .map(|function| {
            let access = function.access();
            (
                function.resource().to_owned(),
                serde_json::json!({"reads": access.read_kinds(), "writes": access.write_kinds()}),
            )
        })
        .collect();
    serde_json::Value::Object(functions.into_iter().collect())
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]
    use super::*;
    use crate::adapters::embedded::SqliteStateStore;

    fn record(kind: &str) -> Record {
        Record {
            kind: kind.into(),
            id: "x".into(),
            owner: "p".into(),
            created_at_ms: 1,
            version: 1,
            expires_at: None,
            body: serde_json::json!({}),
        }
    }

    #[tokio::test]
    async fn a_function_reaches_only_the_kinds_its_role_allows() {
        let state = ScopedState::new(
            Arc::new(SqliteStateStore::in_memory().unwrap()),
            LambdaFunction::Inference,
        );
        state.create(&record("inference")).await.unwrap();
        assert!(state.get("api_key", "k").await.unwrap().is_none());
        for denied in [
            state.create(&record("api_key")).await.unwrap_err(),
            state.get("webhook_secret", "w").await.unwrap_err(),
            state.get("webhook_endpoint", "w").await.unwrap_err(),
            state.delete("revocation", "p", None).await.unwrap_err(),
            state
                .update_all(&[(record("inference"), 1), (record("revocation"), 1)])
                .await
                .unwrap_err(),
        ] {
            assert!(
                matches!(&denied, StorageError::Backend(m) if m.contains("NimbusInferenceFunction")),
                "{denied:?}"
            );
        }
    }

    #[test]
    fn no_kind_is_both_read_only_and_written() {
        for function in LambdaFunction::ALL {
            let access = function.access();
            let writes = access.write_kinds();
            for kind in access.read_kinds() {
                assert!(!writes.contains(&kind), "{function:?}: {kind}");
            }
        }
    }

    /// `docs/table-access.json` is this table (the template test reads it).
    #[test]
    fn the_checked_in_table_access_json_is_current() {
        let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../docs/table-access.json");
        let current = format!("{}\n", serde_json::to_string_pretty(&table_access_json()).unwrap());
        if std::env::var_os("NIMBUS_BLESS").is_some() {
            std::fs::write(&path, &current).unwrap();
        }
        let checked_in = std::fs::read_to_string(&path).unwrap_or_default();
        assert!(
            checked_in == current,
            "docs/table-access.json is stale: run `NIMBUS_BLESS=1 cargo test -p nimbus-shared table_access`"
        );
    }
}
