//! Provider-native batch: a provider whose upstream runs batch jobs itself (the OpenAI Batch API:
//! `/files` + `/batches`). The batch engine turns a job's lines into the upstream's request lines,
//! uploads them, creates and polls the upstream batch, and reads its output back through this
//! capability; it never sees the upstream's wire format beyond a line's `body`.

use super::{CallContext, Embeddings, ProviderError};
use crate::model::{ModelRequest, ModelResponse};
use crate::openai::embeddings::EmbeddingRequest;
use async_trait::async_trait;
use bytes::Bytes;
use serde::{Deserialize, Serialize};
use serde_json::Value;
use std::collections::BTreeMap;

/// An upstream batch as last read.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ProviderBatch {
    /// The upstream's id of the batch.
    pub id: String,
    pub status: ProviderBatchStatus,
    pub counts: ProviderCounts,
    /// The file of answered lines, once there is one.
    pub output_file_id: Option<String>,
    /// The file of failed lines, once there is one.
    pub error_file_id: Option<String>,
    /// The metadata the batch was created with.
    pub metadata: BTreeMap<String, String>,
    /// Why the batch (or some of its lines) failed validation, each as `code: message (line N)`.
    pub errors: Vec<String>,
    /// When the upstream created the batch (unix seconds).
    pub created_at: i64,
}

/// Where an upstream batch is in its life.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ProviderBatchStatus {
    Validating,
    InProgress,
    Finalizing,
    Completed,
    Failed,
    Expired,
    Cancelling,
    Cancelled,
}

impl ProviderBatchStatus {
    /// The batch has ended and will not change any more.
    pub fn is_terminal(self) -> bool {
        match self {
            Self::Completed | Self::Failed | Self::Expired | Self::Cancelled => true,
            Self::Validating | Self::InProgress | Self::Finalizing | Self::Cancelling => false,
        }
    }
}

/// How many lines of an upstream batch there are and how many have ended each way.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ProviderCounts {
    #[serde(default)]
    pub total: u64,
    #[serde(default)]
    pub completed: u64,
    #[serde(default)]
    pub failed: u64,
}

/// A provider's own batch API, as the batch engine uses it.
#[async_trait]
pub trait NativeBatchApi: Send + Sync {
    /// The `body` of a request line for this chat request: exactly what the synchronous chat call
    /// would POST (upstream model name, configured and request `extra_body`), never streamed.
    fn chat_body(&self, request: &ModelRequest) -> Result<Value, ProviderError>;

    /// The `body` of a request line for this embeddings request, as the synchronous call sends it.
    fn embeddings_body(&self, request: &EmbeddingRequest) -> Result<Value, ProviderError>;

    /// The `response.body` of a successful output line, read as the synchronous call reads its
    /// answer (`raw_response` is the body as text).
    fn chat_answer(&self, body: &Value) -> Result<ModelResponse, ProviderError>;

    /// The `response.body` of a successful embeddings output line.
    fn embeddings_answer(&self, body: &Value) -> Result<Embeddings, ProviderError>;

    /// Upload `content` as a batch input file named `filename`; answers the file's id.
    async fn upload_file(&self, filename: &str, content: Bytes, ctx: CallContext<'_>) -> Result<String, ProviderError>;

    /// The id of a batch input file named exactly `filename`, if the upstream has one.
    async fn find_file(&self, filename: &str, ctx: CallContext<'_>) -> Result<Option<String>, ProviderError>;

    /// Create a batch of the uploaded `input_file_id` for `endpoint` (e.g. `/v1/chat/completions`)
    /// with a 24 h window; `idempotency_key` lets a repeated create return the same batch.
    async fn create_batch(
        &self,
        input_file_id: &str,
        endpoint: &str,
        metadata: &BTreeMap<String, String>,
        idempotency_key: &str,
        ctx: CallContext<'_>,
    ) -> Result<ProviderBatch, ProviderError>;

    /// The newest batch whose metadata has `key` = `value`, looking no further back than batches
    /// created at `created_after` (unix seconds).
    async fn find_batch(
        &self,
        key: &str,
        value: &str,
        created_after: i64,
        ctx: CallContext<'_>,
    ) -> Result<Option<ProviderBatch>, ProviderError>;

    /// The batch `id`; `None` when the upstream does not know it.
    async fn batch(&self, id: &str, ctx: CallContext<'_>) -> Result<Option<ProviderBatch>, ProviderError>;

    /// Ask the upstream to cancel batch `id` and answer it as it then is (a batch that has
    /// already ended is answered as it ended); `None` when the upstream does not know it.
    async fn cancel_batch(&self, id: &str, ctx: CallContext<'_>) -> Result<Option<ProviderBatch>, ProviderError>;

    /// The content of file `id`; `None` when the upstream does not know it.
    async fn file_content(&self, id: &str, ctx: CallContext<'_>) -> Result<Option<Bytes>, ProviderError>;

    /// Delete file `id`; a file already gone is not an error.
    async fn delete_file(&self, id: &str, ctx: CallContext<'_>) -> Result<(), ProviderError>;
}
