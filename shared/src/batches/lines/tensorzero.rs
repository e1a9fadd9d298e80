//! `/batch_inference` lines: one `/inference` item each (`functions::batch_request`). Running one
//! stores its inference record, under the id minted at submission, before the line counts: a
//! line run again after a crash finds its record there and the first one stays (every inference
//! exactly once): what the line counts (success, usage) is then the stored record's, even when the
//! rerun's own model call failed or answered differently. The result line is short: the item's
//! ids, or why it produced no inference.

use super::{LineKind, LineResult};
use crate::batches::input_validation::{plan_checked_lines, ChunkLimits, ValidationReport};
use crate::batches::BatchesError;
use crate::functions::batch_request::item_ids;
use crate::functions::inference::FunctionService;
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
    pub records: Arc<dyn InferenceStore>,
    pub project: String,
    pub model: Option<String>,
    pub credentials: HashMap<String, String>,
}

/// What an item became: its ids, and for a failure why (`code` for items that never ran).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
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
                    result.error = Some(error.to_string());
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
}
