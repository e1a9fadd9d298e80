//! What a line of a batch is: the one seam between the engine and a batch format. The engine
//! (chunks, leases, segments, finalize, cancel and expiry, the poller) moves lines it does not
//! read; a [`LineKind`] checks a batch's input and plans its chunks, says which model's slots a
//! line takes, runs it, and writes what it became (a never-run line included). Where the results
//! end up when the batch ends (output and error files, or the items' failures beside their
//! inference records) is decided once, by the batch's format, in `finalize.rs`.
//!
//! - `openai.rs`: `/v1/batches` — a JSONL request line in, an output or error file line out.
//! - `tensorzero.rs`: `/batch_inference` — one `/inference` item in; its inference record out (or
//!   a short line: its ids and why it failed), kept in the batch's pages when it ends.

pub(crate) mod openai;
pub(crate) mod tensorzero;

use super::input_validation::{ChunkLimits, ValidationReport};
use super::records::{BatchFormat, StoredBatch};
use super::{BatchEndpoint, BatchService, BatchesError};
use crate::openai::batches::BatchUsage;
use crate::ports::credential_sealer::open_json;
use crate::ports::{BlobStore, IdSource, StorageError};
use async_trait::async_trait;
use std::collections::HashMap;
use std::sync::Arc;

/// What became of one line.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct LineResult {
    /// The line (without newline) kept with the results (`ok`) or with the errors.
    pub line: String,
    pub ok: bool,
    pub usage: BatchUsage,
}

/// One batch format's lines.
#[async_trait]
pub(crate) trait LineKind: Send + Sync {
    /// Check the batch's stored input (what a format checks) and plan its chunks.
    async fn plan(
        &self,
        blobs: &dyn BlobStore,
        input: &str,
        limits: ChunkLimits,
    ) -> Result<ValidationReport, StorageError>;

    /// The model whose concurrency slots (`[models.M] max_concurrency`) the line takes.
    fn slot_of(&self, line: &[u8]) -> Option<String>;

    /// Run the line. An `Err` is a failure to keep its result (storage): the run stops and the
    /// line runs again later; anything else the line became is in the [`LineResult`].
    async fn run(&self, line: &[u8]) -> Result<LineResult, BatchesError>;

    /// The error line of a line that never ran (the batch was cancelled or expired).
    fn not_run(&self, ids: &dyn IdSource, line: &[u8], code: &str, message: &str) -> String;

    /// The request a provider's own batch API runs for this line, when the line's model is
    /// served by a provider marked `batch = "native"`; `None`: a worker runs it. A line that
    /// cannot be prepared is run by a worker too, which reports why, as for any line.
    fn native_request(&self, line: &[u8]) -> Option<NativeRequest>;

    /// What the line became from its provider batch's answer. An `Err` is a failure to keep the
    /// result (storage): the collection stops and runs again later.
    async fn native_result(&self, line: &[u8], answer: NativeAnswer) -> Result<LineResult, BatchesError>;
}

/// One line's request for a provider's own batch API, in the provider's wire format.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct NativeRequest {
    /// The configured model and its provider that runs the batch.
    pub model: String,
    pub provider: String,
    /// The provider endpoint, e.g. `/v1/chat/completions`.
    pub url: &'static str,
    /// The request line's `body`.
    pub body: serde_json::Value,
    /// The line's dynamic credentials (the provider batch is created and polled with them).
    pub credentials: std::collections::HashMap<String, String>,
}

/// What a provider batch answered for one line.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum NativeAnswer {
    /// A 2xx `response.body`.
    Answered(serde_json::Value),
    /// The provider's error for this line (its status and body when it gave them).
    Failed(crate::providers::ProviderError),
    /// The provider never ran it: `code` and `message` say why.
    NotRun { code: String, message: String },
}

impl BatchService {
    /// The lines of `batch`'s format, to plan and render them: no provider is called, so no
    /// dynamic credentials are opened (see [`Self::running_line_kind`]).
    pub(crate) fn line_kind(&self, batch: &StoredBatch) -> Arc<dyn LineKind> {
        self.line_kind_with(batch, HashMap::new())
    }

    /// The lines of `batch`'s format to run, with the dynamic credentials it was submitted with
    /// (a `/batch_inference` batch keeps them sealed).
    pub(crate) async fn running_line_kind(&self, batch: &StoredBatch) -> Result<Arc<dyn LineKind>, BatchesError> {
        let credentials = match &batch.format {
            BatchFormat::TensorZero(plan) => match &plan.sealed_credentials {
                Some(sealed) => open_json(self.sealer.as_ref(), &batch.batch.id, sealed)
                    .await
                    .map_err(StorageError::from)?,
                None => plan.credentials.clone(),
            },
            BatchFormat::OpenAiJsonl => HashMap::new(),
        };
        Ok(self.line_kind_with(batch, credentials))
    }

    fn line_kind_with(&self, batch: &StoredBatch, credentials: HashMap<String, String>) -> Arc<dyn LineKind> {
        match &batch.format {
            BatchFormat::OpenAiJsonl => Arc::new(openai::OpenAiLines {
                inference: Arc::clone(&self.inference),
                ids: Arc::clone(&self.ids),
                endpoint: BatchEndpoint::parse(&batch.batch.endpoint).unwrap_or(BatchEndpoint::ChatCompletions),
            }),
            BatchFormat::TensorZero(plan) => Arc::new(tensorzero::TensorZeroLines {
                functions: Arc::clone(&self.functions),
                inference: Arc::clone(&self.inference),
                project: batch.project.clone(),
                // The variant's model as configured now: the one its items call.
                model: self
                    .functions
                    .batch_variant(&plan.function_name, Some(&plan.variant_name), uuid::Uuid::nil())
                    .ok()
                    .map(|variant| variant.model),
                credentials,
            }),
        }
    }
}
