//! `/batch_inference` lines: one `/inference` item each (`tensorzero::batch_request`). Running one
//! makes its inference record, under the id minted at submission; the record is the line's result,
//! saved with the chunk's segment like any result line, so it counts exactly once whatever crashes
//! or reruns happen. When the batch ends, `tensorzero_pages.rs` writes the records into the
//! batch's pages of the inference store. A failed item's line is short: its ids and why.

use super::{BatchLine, LineKind, LineResult, NativeAnswer, NativeRequest};
use crate::batches::input_validation::{plan_checked_lines, ChunkLimits, ValidationReport};
use crate::batches::BatchEndpoint;
use crate::batches::BatchesError;
use crate::inference::InferenceService;
use crate::openai::batches::BatchUsage;
use crate::ports::inference_records::InferenceRecord;
use crate::ports::{BlobStore, IdSource, ProjectId, StorageError};
use crate::tensorzero::batch_request::item_ids;
use crate::tensorzero::batch_request::ItemIds;
use crate::tensorzero::function_calls::{FunctionError, FunctionService};
use async_trait::async_trait;
use serde::{Deserialize, Serialize};
use std::collections::HashMap;
use std::sync::Arc;
use uuid::Uuid;

/// The lines of a `/batch_inference` batch: its project, the model its variant calls (none when
/// the variant is no longer configured: its items then fail), and the dynamic credentials it was
/// submitted with.
pub(crate) struct TensorZeroLines {
    pub functions: Arc<FunctionService>,
    pub inference: Arc<InferenceService>,
    pub project: ProjectId,
    pub model: Option<String>,
    pub credentials: HashMap<String, String>,
}

/// What an item became: its ids, and for a failure why (`code` for items that never ran).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct ItemResult {
    pub inference_id: Option<Uuid>,
    pub episode_id: Option<Uuid>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub code: Option<String>,
}

impl ItemResult {
    fn line(&self) -> String {
        serde_json::to_string(self).unwrap_or_default()
    }
}

#[async_trait]
impl LineKind for TensorZeroLines {
    /// Its items were checked when the batch was submitted: only the chunks are planned.
    async fn plan(
        &self,
        blobs: &dyn BlobStore,
        input: &str,
        limits: ChunkLimits,
    ) -> Result<ValidationReport, StorageError> {
        Ok(plan_checked_lines(&blobs.get(input).await?, limits))
    }

    fn slot_of(&self, _stored: &[u8]) -> Option<String> {
        self.model.clone()
    }

    async fn run(&self, line: BatchLine) -> Result<LineResult, BatchesError> {
        let (ids, outcome) = self
            .functions
            .run_batch_line(&self.project, line.into_json(), &self.credentials)
            .await;
        Self::keep(ids, outcome.map_err(ItemFailure::Function))
    }

    fn not_run(&self, _ids: &dyn IdSource, line: &BatchLine, code: &str, message: &str) -> String {
        let ids = line.json().and_then(item_ids);
        ItemResult {
            inference_id: ids.map(|i| i.inference_id),
            episode_id: ids.map(|i| i.episode_id),
            error: Some(message.to_owned()),
            code: Some(code.to_owned()),
        }
        .line()
    }

    fn native_request(&self, line: &BatchLine) -> Option<NativeRequest> {
        let model = self.model.clone()?;
        let target = self.inference.native_batch(&model)?;
        let request = self
            .functions
            .batch_line_request(line.json()?, &self.credentials)
            .ok()?;
        let body = target.api.chat_body(&request).ok()?;
        Some(NativeRequest {
            model,
            provider: target.provider,
            url: BatchEndpoint::ChatCompletions.path(),
            body,
            credentials: self.credentials.clone(),
        })
    }

    async fn native_result(&self, line: BatchLine, answer: NativeAnswer) -> Result<LineResult, BatchesError> {
        let target = self
            .model
            .as_deref()
            .and_then(|model| self.inference.native_batch(model));
        let provider = target.as_ref().map(|t| t.provider.clone()).unwrap_or_default();
        let outcome = match answer {
            NativeAnswer::NotRun { code, message } => {
                return Ok(LineResult {
                    line: self.not_run(&crate::ports::UuidV7Ids, &line, &code, &message),
                    ok: false,
                    usage: BatchUsage::default(),
                })
            }
            NativeAnswer::Failed(error) => (
                line.json().and_then(item_ids),
                Err(ItemFailure::Provider {
                    provider: provider.clone(),
                    message: error.to_string(),
                }),
            ),
            NativeAnswer::Answered(body) => match target.map(|t| t.api.chat_answer(&body)) {
                Some(Ok(response)) => {
                    let (ids, record) = self.functions.native_batch_line_record(
                        &self.project,
                        line.into_json(),
                        &self.credentials,
                        &provider,
                        response,
                    );
                    (ids, record.map_err(ItemFailure::Function))
                }
                Some(Err(error)) => (
                    line.json().and_then(item_ids),
                    Err(ItemFailure::Provider {
                        provider,
                        message: error.to_string(),
                    }),
                ),
                None => (line.json().and_then(item_ids), Err(ItemFailure::NotServed)),
            },
        };
        Self::keep(outcome.0, outcome.1)
    }
}

/// Why an item has no inference: the `error` of its result line.
#[derive(Debug, thiserror::Error)]
enum ItemFailure {
    #[error("{0}")]
    Function(FunctionError),
    #[error("provider `{provider}`: {message}")]
    Provider { provider: String, message: String },
    #[error("the variant's model is no longer served by a native batch provider")]
    NotServed,
}

impl TensorZeroLines {
    /// What the item became: its inference record is the result line, kept with the chunk's
    /// results (the segment protocol counts it exactly once: a line run again after a crash
    /// replaces an unsaved result, never adds one); the batch's pages are written from these when
    /// it ends. A failed item's line says why.
    fn keep(ids: Option<ItemIds>, outcome: Result<InferenceRecord, ItemFailure>) -> Result<LineResult, BatchesError> {
        match outcome {
            Ok(record) => {
                let line = serde_json::to_string(&record)
                    .map_err(|e| BatchesError::Storage(StorageError::Invalid(format!("inference record: {e}"))))?;
                let mut usage = BatchUsage::default();
                usage.add(record.usage.input_tokens, record.usage.output_tokens);
                Ok(LineResult { line, ok: true, usage })
            }
            Err(error) => Ok(LineResult {
                line: ItemResult {
                    inference_id: ids.map(|i| i.inference_id),
                    episode_id: ids.map(|i| i.episode_id),
                    error: Some(error.to_string()),
                    code: None,
                }
                .line(),
                ok: false,
                usage: BatchUsage::default(),
            }),
        }
    }
}
