//! A DICL variant's examples as kept in the blob store, per project, function and variant:
//!
//! | key | holds |
//! |---|---|
//! | `dicl/{project}/{function hex}/{variant hex}/current.json` | `{"version", "examples"}`: the set in use |
//! | `dicl/{project}/{function hex}/{variant hex}/{version}.json` | the set: its examples with their embeddings |
//!
//! Names are hex-encoded (any function or variant name makes a valid key). A build writes a new
//! set under a new version, then points `current.json` at it, then deletes the set it replaced:
//! a reader sees the old set or the new one, never half of one. Embeddings are stored as the
//! base64 of their little-endian `f32`s (a third of the JSON numbers' size).

use crate::ports::inference_records::FunctionType;
use crate::ports::{BlobStore, ProjectId, StorageError};
use base64::Engine;
use bytes::Bytes;
use serde::{Deserialize, Deserializer, Serialize, Serializer};
use serde_json::Value;
use uuid::Uuid;

/// Where an example's output came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum OutputSource {
    /// The stored inference's own output.
    #[default]
    Inference,
    /// The latest `demonstration` feedback on the inference (inferences without one are skipped).
    Demonstration,
}

/// One example: an input (StoredInput JSON text, what was embedded), its output and embedding.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct DiclExample {
    /// The stored inference it was built from.
    pub inference_id: Uuid,
    pub input: String,
    /// chat: content blocks; json: `{raw, parsed}`.
    pub output: Value,
    #[serde(serialize_with = "encode_vector", deserialize_with = "decode_vector")]
    pub embedding: Vec<f32>,
}

/// A built set of examples of one DICL variant.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ExampleSet {
    pub version: Uuid,
    pub function_name: String,
    pub variant_name: String,
    pub function_type: FunctionType,
    pub embedding_model: String,
    pub output_source: OutputSource,
    /// RFC 3339.
    pub built_at: String,
    pub examples: Vec<DiclExample>,
}

/// What `current.json` says.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct CurrentSet {
    pub version: Uuid,
    pub examples: usize,
}

fn encode_vector<S: Serializer>(vector: &[f32], serializer: S) -> Result<S::Ok, S::Error> {
    let bytes: Vec<u8> = vector.iter().flat_map(|v| v.to_le_bytes()).collect();
    serializer.serialize_str(&base64::engine::general_purpose::STANDARD.encode(bytes))
}

fn decode_vector<'de, D: Deserializer<'de>>(deserializer: D) -> Result<Vec<f32>, D::Error> {
    let text = String::deserialize(deserializer)?;
    let bytes = base64::engine::general_purpose::STANDARD
        .decode(text)
        .map_err(serde::de::Error::custom)?;
    if bytes.len() % 4 != 0 {
        return Err(serde::de::Error::custom("an embedding is a whole number of f32s"));
    }
    Ok(bytes
        .chunks_exact(4)
        .map(|b| f32::from_le_bytes([b[0], b[1], b[2], b[3]]))
        .collect())
}

/// The key prefix of one variant's examples.
fn prefix(project: &ProjectId, function: &str, variant: &str) -> String {
    format!("dicl/{project}/{}/{}", hex::encode(function), hex::encode(variant))
}

fn current_key(project: &ProjectId, function: &str, variant: &str) -> String {
    format!("{}/current.json", prefix(project, function, variant))
}

fn set_key(project: &ProjectId, function: &str, variant: &str, version: Uuid) -> String {
    format!("{}/{}.json", prefix(project, function, variant), version.simple())
}

fn corrupt(what: &str, error: serde_json::Error) -> StorageError {
    StorageError::Backend(format!("the DICL {what} is not valid: {error}"))
}

/// Reads and writes example sets.
#[derive(Clone)]
pub struct ExampleStore {
    blobs: std::sync::Arc<dyn BlobStore>,
}

impl ExampleStore {
    pub fn new(blobs: std::sync::Arc<dyn BlobStore>) -> Self {
        Self { blobs }
    }

    /// The set in use, if one was built.
    pub async fn current(
        &self,
        project: &ProjectId,
        function: &str,
        variant: &str,
    ) -> Result<Option<CurrentSet>, StorageError> {
        match self.blobs.get(&current_key(project, function, variant)).await {
            Ok(bytes) => serde_json::from_slice(&bytes)
                .map(Some)
                .map_err(|e| corrupt("pointer", e)),
            Err(StorageError::NotFound) => Ok(None),
            Err(other) => Err(other),
        }
    }

    /// The set of `version`.
    pub async fn load(
        &self,
        project: &ProjectId,
        function: &str,
        variant: &str,
        version: Uuid,
    ) -> Result<ExampleSet, StorageError> {
        let bytes = self.blobs.get(&set_key(project, function, variant, version)).await?;
        serde_json::from_slice(&bytes).map_err(|e| corrupt("example set", e))
    }

    /// Store `set` and make it the one in use; the set it replaces is deleted.
    pub async fn publish(&self, project: &ProjectId, set: &ExampleSet) -> Result<(), StorageError> {
        let (function, variant) = (set.function_name.as_str(), set.variant_name.as_str());
        let previous = self.current(project, function, variant).await?;
        let body = serde_json::to_vec(set).map_err(|e| StorageError::Backend(e.to_string()))?;
        self.blobs
            .put(&set_key(project, function, variant, set.version), Bytes::from(body))
            .await?;
        let pointer = CurrentSet {
            version: set.version,
            examples: set.examples.len(),
        };
        let pointer = serde_json::to_vec(&pointer).map_err(|e| StorageError::Backend(e.to_string()))?;
        self.blobs
            .put(&current_key(project, function, variant), Bytes::from(pointer))
            .await?;
        if let Some(previous) = previous.filter(|p| p.version != set.version) {
            let key = set_key(project, function, variant, previous.version);
            if let Err(error) = self.blobs.delete(&key).await {
                tracing::warn!(%error, key = %key, "could not delete a replaced DICL example set");
            }
        }
        Ok(())
    }
}
