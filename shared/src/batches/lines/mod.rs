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

use super::input_validation::{ChunkLimits, ChunkRange, ValidationReport};
use super::stored::{BatchFormat, StoredBatch};
use super::{BatchEndpoint, BatchesError};
use crate::inference::InferenceService;
use crate::openai::batches::BatchUsage;
use crate::ports::credential_sealer::open_json;
use crate::ports::{BlobStore, CredentialSealer, IdSource, StorageError};
use crate::tensorzero::function_calls::FunctionService;
use async_trait::async_trait;
use serde_json::Value;
use std::collections::HashMap;
use std::sync::Arc;

/// One request line of a batch's input as a run reads it: its JSON, read once. Every step of the
/// run (its model's slots, staging, running, an error line) reads the line from here, never from
/// the stored bytes again.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct BatchLine {
    /// `None` when the bytes are not JSON (validation let the line in: only an input changed under
    /// the batch does this; the line fails, saying so).
    json: Option<Value>,
}

impl BatchLine {
    pub(crate) fn read(stored: &[u8]) -> Self {
        Self {
            json: serde_json::from_slice(stored).ok(),
        }
    }

    pub(crate) fn json(&self) -> Option<&Value> {
        self.json.as_ref()
    }

    pub(crate) fn into_json(self) -> Option<Value> {
        self.json
    }
}

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
    /// It reads only that from the stored line: slots are taken for a run's lines before any
    /// of them is read whole.
    fn slot_of(&self, stored: &[u8]) -> Option<String>;

    /// Run the line. An `Err` is a failure to keep its result (storage): the run stops and the
    /// line runs again later; anything else the line became is in the [`LineResult`].
    async fn run(&self, line: BatchLine) -> Result<LineResult, BatchesError>;

    /// The error line of a line that never ran (the batch was cancelled or expired).
    fn not_run(&self, ids: &dyn IdSource, line: &BatchLine, code: &str, message: &str) -> String;

    /// The request a provider's own batch API runs for this line, when the line's model is
    /// served by a provider marked `batch = "native"`; `None`: a worker runs it. A line that
    /// cannot be prepared is run by a worker too, which reports why, as for any line.
    fn native_request(&self, line: &BatchLine) -> Option<NativeRequest>;

    /// What the line became from its provider batch's answer. An `Err` is a failure to keep the
    /// result (storage): the collection stops and runs again later.
    async fn native_result(&self, line: BatchLine, answer: NativeAnswer) -> Result<LineResult, BatchesError>;
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

/// Makes a batch's [`LineKind`]: the one way the engine's lines reach the model layers.
#[derive(Clone)]
pub(crate) struct LineKinds {
    /// Runs `/v1/batches` lines.
    pub(crate) inference: Arc<InferenceService>,
    /// Runs `/batch_inference` items.
    pub(crate) functions: Arc<FunctionService>,
    /// Ids of the lines' responses and error lines.
    pub(crate) ids: Arc<dyn IdSource>,
    /// Opens a `/batch_inference` batch's sealed dynamic credentials.
    pub(crate) sealer: Arc<dyn CredentialSealer>,
}

impl LineKinds {
    /// The lines of `batch`'s format, to plan and render them: no provider is called, so no
    /// dynamic credentials are opened (see [`Self::running`]).
    pub(crate) fn of(&self, batch: &StoredBatch) -> Arc<dyn LineKind> {
        self.kind_with(batch, HashMap::new())
    }

    /// The lines of `batch`'s format to run, with the dynamic credentials it was submitted with
    /// (a `/batch_inference` batch keeps them sealed).
    pub(crate) async fn running(&self, batch: &StoredBatch) -> Result<Arc<dyn LineKind>, BatchesError> {
        let credentials = match &batch.format {
            BatchFormat::TensorZero(plan) => match &plan.sealed_credentials {
                Some(sealed) => open_json(self.sealer.as_ref(), &batch.batch.id, sealed)
                    .await
                    .map_err(StorageError::from)?,
                None => plan.credentials.clone(),
            },
            BatchFormat::OpenAiJsonl => HashMap::new(),
        };
        Ok(self.kind_with(batch, credentials))
    }

    fn kind_with(&self, batch: &StoredBatch, credentials: HashMap<String, String>) -> Arc<dyn LineKind> {
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
                    .checks()
                    .batch_variant(&plan.function_name, Some(&plan.variant_name), uuid::Uuid::nil())
                    .ok()
                    .map(|variant| variant.model),
                credentials,
            }),
        }
    }
}

/// The code of the error lines of requests whose input bytes are gone (`missing_input.rs`).
pub(crate) const INPUT_MISSING_CODE: &str = "input_file_missing";

/// One error line per request of `range` from request `from` (0-based within the chunk) on.
pub(crate) fn missing_input_lines(ids: &dyn IdSource, input_file_id: &str, range: &ChunkRange, from: u64) -> Vec<u8> {
    let mut out = Vec::new();
    for request in from..range.lines {
        let line = serde_json::json!({
            "id": ids.prefixed("batch_req_"),
            "custom_id": null,
            "response": null,
            "error": {
                "code": INPUT_MISSING_CODE,
                "message": format!(
                    "The batch's input file {input_file_id} no longer exists: request {} of the {} starting at input line {} could not be read.",
                    request + 1,
                    range.lines,
                    range.first_line
                ),
            },
        });
        out.extend_from_slice(line.to_string().as_bytes());
        out.push(b'\n');
    }
    out
}
