//! The model-response cache of the `/inference` endpoint: one entry per project, model and
//! provider-neutral request, with a time to live.

use super::ProjectId;
use super::StorageError;
use crate::model::{ModelRequest, ModelResponse};
use async_trait::async_trait;
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};
use std::time::Duration;

/// Where a response is cached: the project, and the hex SHA-256 of
/// `project ‖ 0 ‖ model ‖ 0 ‖ stream flag ("1"/"0") ‖ 0 ‖ JSON of the ModelRequest`.
///
/// The JSON is canonical as serde_json writes it: struct fields in declaration order, and JSON
/// objects inside (pass-through fields, extra body values, schemas) with their keys sorted,
/// since serde_json's `Map` is a `BTreeMap` (the `preserve_order` feature is off; a test pins
/// it). So equal requests give equal keys whatever order a client wrote its keys in.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct CacheKey {
    project: ProjectId,
    digest: String,
}

impl CacheKey {
    /// `model_name` names what answers (e.g. the model and provider the request is routed to);
    /// streamed and whole answers are cached apart.
    pub fn new(project: &ProjectId, model_name: &str, request: &ModelRequest, streamed: bool) -> Self {
        let mut hasher = Sha256::new();
        hasher.update(project.as_str().as_bytes());
        hasher.update([0]);
        hasher.update(model_name.as_bytes());
        hasher.update([0]);
        hasher.update(if streamed { b"1" } else { b"0" });
        hasher.update([0]);
        if serde_json::to_writer(&mut hasher, request).is_err() {
            // Not reachable with these types (string-keyed maps, a writer that cannot fail);
            // still deterministic and request-specific.
            hasher.update(format!("{request:?}").as_bytes());
        }
        Self {
            project: project.clone(),
            digest: hex::encode(hasher.finalize()),
        }
    }

    /// The key with `salt` mixed in: the same request asked for a different purpose (a
    /// best-of-n candidate's index) gets its own entry.
    pub fn salted(self, salt: &str) -> Self {
        let mut hasher = Sha256::new();
        hasher.update(self.digest.as_bytes());
        hasher.update([0]);
        hasher.update(salt.as_bytes());
        Self {
            project: self.project,
            digest: hex::encode(hasher.finalize()),
        }
    }

    pub fn project(&self) -> &ProjectId {
        &self.project
    }

    /// The hex digest (64 characters).
    pub fn digest(&self) -> &str {
        &self.digest
    }
}

/// A cached answer and when it was produced.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CachedModelResponse {
    pub response: ModelResponse,
    pub created_at_ms: i64,
}

/// Cached model responses. Callers treat an error as a miss (and a failed store as nothing):
/// the cache never fails an inference.
#[async_trait]
pub trait ModelCache: Send + Sync {
    /// The entry under `key` unless it has expired or, with `max_age_s`, was created more than
    /// that many seconds ago.
    async fn lookup(&self, key: &CacheKey, max_age_s: Option<u64>)
        -> Result<Option<CachedModelResponse>, StorageError>;

    /// Write (or replace) the entry under `key`, served for `ttl` from now.
    async fn store(&self, key: &CacheKey, entry: &CachedModelResponse, ttl: Duration) -> Result<(), StorageError>;
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::{ContentBlock, Message, Role};
    use serde_json::{json, Map, Value};

    fn request(text: &str) -> ModelRequest {
        ModelRequest {
            model: "m".into(),
            messages: vec![Message::new(Role::User, vec![ContentBlock::text_block(text)])],
            ..ModelRequest::default()
        }
    }

    #[test]
    fn keys_are_deterministic_and_tell_every_part_apart() {
        let base = CacheKey::new(&ProjectId::new("p"), "m", &request("hi"), false);
        assert_eq!(base, CacheKey::new(&ProjectId::new("p"), "m", &request("hi"), false));
        assert_eq!(base.digest().len(), 64);
        assert_eq!(base.project().as_str(), "p");
        for other in [
            CacheKey::new(&ProjectId::new("q"), "m", &request("hi"), false),
            CacheKey::new(&ProjectId::new("p"), "n", &request("hi"), false),
            CacheKey::new(&ProjectId::new("p"), "m", &request("hi"), true),
            CacheKey::new(&ProjectId::new("p"), "m", &request("ho"), false),
        ] {
            assert_ne!(base.digest(), other.digest());
        }
        // The separators keep shifted boundaries apart.
        assert_ne!(
            CacheKey::new(&ProjectId::new("ab"), "c", &request("hi"), false).digest(),
            CacheKey::new(&ProjectId::new("a"), "bc", &request("hi"), false).digest()
        );
    }

    /// Fails if serde_json's `preserve_order` feature is ever switched on (keys would then
    /// depend on the order a client wrote its JSON in).
    #[test]
    fn keys_do_not_depend_on_the_order_of_json_keys() {
        let mut forward = request("hi");
        let mut backward = request("hi");
        let pairs = [("a", json!(1)), ("b", json!({"y": 2, "x": 1})), ("c", json!(3))];
        let mut first = Map::new();
        for (k, v) in pairs.iter() {
            first.insert((*k).to_owned(), v.clone());
        }
        let mut second = Map::new();
        for (k, v) in pairs.iter().rev() {
            let v = if *k == "b" {
                serde_json::from_str::<Value>(r#"{"x": 1, "y": 2}"#).unwrap()
            } else {
                v.clone()
            };
            second.insert((*k).to_owned(), v);
        }
        forward.openai_pass_through.fields = first;
        backward.openai_pass_through.fields = second;
        assert_eq!(
            CacheKey::new(&ProjectId::new("p"), "m", &forward, false),
            CacheKey::new(&ProjectId::new("p"), "m", &backward, false)
        );
    }
}
