//! `/batch_inference` lines: one `/inference` item each (`functions::batch_request`). Running one
//! stores its inference record, under the id minted at submission, before the line counts: a
//! line run again after a crash finds its record there and the first one stays (every inference
//! exactly once): what the line counts (success, usage) is then the stored record's, even when the
//! rerun's own model call failed or answered differently. The result line is short: the item's
//! ids, or why it produced no inference.

use super::{LineKind, LineResult, NativeAnswer, NativeRequest};
use crate::batches::input_validation::{plan_checked_lines, ChunkLimits, ValidationReport};
use crate::batches::BatchEndpoint;
use crate::batches::BatchesError;
use crate::functions::batch_request::item_ids;
use crate::functions::batch_request::ItemIds;
use crate::functions::inference::FunctionService;
use crate::functions::records::InferenceRecord;
use crate::inference::InferenceService;
use crate::openai::batches::BatchUsage;
use crate::ports::{BlobStore, IdSource, InferenceStore, StorageError};
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
    pub records: Arc<dyn InferenceStore>,
    pub project: String,
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

    fn slot_of(&self, _line: &[u8]) -> Option<String> {
        self.model.clone()
    }

    async fn run(&self, line: &[u8]) -> Result<LineResult, BatchesError> {
        let (ids, outcome) = self
            .functions
            .run_batch_line(&self.project, line, &self.credentials)
            .await;
        self.keep(ids, outcome.map_err(|error| error.to_string())).await
    }

    fn not_run(&self, _ids: &dyn IdSource, line: &[u8], code: &str, message: &str) -> String {
        let ids = item_ids(line);
        ItemResult {
            inference_id: ids.map(|i| i.inference_id),
            episode_id: ids.map(|i| i.episode_id),
            error: Some(message.to_owned()),
            code: Some(code.to_owned()),
        }
        .line()
    }

    fn native_request(&self, line: &[u8]) -> Option<NativeRequest> {
        let model = self.model.clone()?;
        let target = self.inference.native_batch(&model)?;
        let request = self.functions.batch_line_request(line, &self.credentials).ok()?;
        let body = target.api.chat_body(&request).ok()?;
        Some(NativeRequest {
            model,
            provider: target.provider,
            url: BatchEndpoint::ChatCompletions.path(),
            body,
            credentials: self.credentials.clone(),
        })
    }

    async fn native_result(&self, line: &[u8], answer: NativeAnswer) -> Result<LineResult, BatchesError> {
        let target = self
            .model
            .as_deref()
            .and_then(|model| self.inference.native_batch(model));
        let provider = target.as_ref().map(|t| t.provider.clone()).unwrap_or_default();
        let outcome = match answer {
            NativeAnswer::NotRun { code, message } => {
                return Ok(LineResult {
                    line: self.not_run(&crate::ports::UuidV7Ids, line, &code, &message),
                    ok: false,
                    usage: BatchUsage::default(),
                })
            }
            NativeAnswer::Failed(error) => (item_ids(line), Err(format!("provider `{provider}`: {error}"))),
            NativeAnswer::Answered(body) => match target.map(|t| t.api.chat_answer(&body)) {
                Some(Ok(response)) => {
                    let (ids, record) = self.functions.native_batch_line_record(
                        &self.project,
                        line,
                        &self.credentials,
                        &provider,
                        response,
                    );
                    (ids, record.map_err(|error| error.to_string()))
                }
                Some(Err(error)) => (item_ids(line), Err(format!("provider `{provider}`: {error}"))),
                None => (
                    item_ids(line),
                    Err("the variant's model is no longer served by a native batch provider".to_owned()),
                ),
            },
        };
        self.keep(outcome.0, outcome.1).await
    }
}

impl TensorZeroLines {
    /// Store the item's record (create-if-absent under its id) before the line counts; an item
    /// stored by an earlier run of the line keeps that record, which is what counts.
    async fn keep(
        &self,
        ids: Option<ItemIds>,
        outcome: Result<InferenceRecord, String>,
    ) -> Result<LineResult, BatchesError> {
        let mut result = ItemResult {
            inference_id: ids.map(|i| i.inference_id),
            episode_id: ids.map(|i| i.episode_id),
            error: None,
            code: None,
        };
        let mut usage = BatchUsage::default();
        let stored = match outcome {
            Ok(record) => match self.records.put(&record).await {
                Ok(()) => Some(record),
                // Stored by an earlier run of this line: that one stays, and is what counts.
                Err(StorageError::Conflict) => Some(
                    self.records
                        .get(&self.project, record.inference_id)
                        .await?
                        .unwrap_or(record),
                ),
                Err(err) => return Err(err.into()),
            },
            Err(error) => {
                // An earlier run of this line stored its inference before this run failed: the
                // item has its inference, and is not a failure.
                let earlier = match result.inference_id {
                    Some(id) => self.records.get(&self.project, id).await?,
                    None => None,
                };
                if earlier.is_none() {
                    result.error = Some(error);
                }
                earlier
            }
        };
        if let Some(record) = &stored {
            usage.add(record.usage.input_tokens, record.usage.output_tokens);
        }
        Ok(LineResult {
            line: result.line(),
            ok: stored.is_some(),
            usage,
        })
    }
}
