//! The capability of a provider with its own Batch API (OpenAI's, and every server speaking it):
//! what the batch engine needs to run batch lines there at the provider's batch discount. The
//! provider translates the neutral request into its request line and reads its answers back.
use super::{CallContext, Embeddings, ProviderError};
use crate::model::{ModelRequest, ModelResponse};
use crate::openai::embeddings::EmbeddingRequest;
use async_trait::async_trait;
use bytes::Bytes;
use serde::{Deserialize, Serialize};
use serde_json::Value;
use std::collections::BTreeMap;
use std::sync::Arc;

#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ProviderCounts {
    pub total: u64,
    pub completed: u64,
    pub failed: u64,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
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
    pub fn is_terminal(self) -> bool {
        matches!(self, Self::Completed | Self::Failed | Self::Expired | Self::Cancelled)
    }
}

#[derive(Debug, Clone, PartialEq)]
pub struct ProviderBatch {
    pub id: String,
    pub status: ProviderBatchStatus,
    pub counts: ProviderCounts,
    pub output_file_id: Option<String>,
    pub error_file_id: Option<String>,
    pub metadata: BTreeMap<String, String>,
    pub errors: Vec<String>,
    pub created_at: i64,
}

#[async_trait]
pub trait NativeBatchApi: Send + Sync {
    fn chat_body(&self, request: &ModelRequest) -> Result<Value, ProviderError>;
    fn embeddings_body(&self, request: &EmbeddingRequest) -> Result<Value, ProviderError>;
    fn chat_answer(&self, body: &Value) -> Result<ModelResponse, ProviderError>;
    fn embeddings_answer(&self, body: &Value) -> Result<Embeddings, ProviderError>;
    async fn upload_file(&self, filename: &str, content: Bytes, ctx: CallContext<'_>) -> Result<String, ProviderError>;
    async fn find_file(&self, filename: &str, ctx: CallContext<'_>) -> Result<Option<String>, ProviderError>;
    async fn create_batch(
        &self,
        input_file_id: &str,
        endpoint: &str,
        metadata: &BTreeMap<String, String>,
        idempotency_key: &str,
        ctx: CallContext<'_>,
    ) -> Result<ProviderBatch, ProviderError>;
    async fn find_batch(
        &self,
        key: &str,
        value: &str,
        created_after: i64,
        ctx: CallContext<'_>,
    ) -> Result<Option<ProviderBatch>, ProviderError>;
    async fn batch(&self, id: &str, ctx: CallContext<'_>) -> Result<Option<ProviderBatch>, ProviderError>;
    async fn cancel_batch(&self, id: &str, ctx: CallContext<'_>) -> Result<Option<ProviderBatch>, ProviderError>;
    async fn file_content(&self, id: &str, ctx: CallContext<'_>) -> Result<Option<Bytes>, ProviderError>;
    async fn delete_file(&self, id: &str, ctx: CallContext<'_>) -> Result<(), ProviderError>;
}

#[derive(Clone)]
pub struct NativeBatchTarget {
    pub provider: String,
    pub api: Arc<dyn NativeBatchApi>,
}
