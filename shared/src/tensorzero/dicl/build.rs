//! Building a DICL variant's examples from the function's stored inferences (`POST /dicl/build`,
//! `nimbus dicl build`): each inference's output, or the latest `demonstration` given on it,
//! beside its input as StoredInput JSON, embedded with the variant's `embedding_model` and
//! published as the variant's example set. As TensorZero's optimizer: functions with tools, and
//! examples holding tool calls or tool results, are refused; an inference without an output is
//! skipped.

use super::embed::embed_texts;
use super::examples::{DiclExample, ExampleSet, OutputSource};
use super::loaded::LoadedSets;
use super::stored_input::{has_tool_blocks, stored_input_json};
use crate::config::functions::FunctionKind;
use crate::inference::{InferenceError, InferenceService};
use crate::ports::inference_records::{rfc3339, FeedbackKind, FunctionType, InferenceRecord};
use crate::ports::{Clock, FeedbackStore, IdSource, InferenceStore, ProjectId, StorageError};
use crate::tensorzero::function_calls::input::FunctionInput;
use crate::tensorzero::{Function, FunctionSet};
use crate::user_text::excerpt;
use serde::{Deserialize, Serialize};
use serde_json::Value;
use std::collections::{BTreeSet, HashMap};
use std::sync::Arc;
use uuid::Uuid;

/// Inferences read per listing.
const LIST_PAGE: usize = 100;
/// Texts per embedding call.
const EMBED_BATCH: usize = 64;
/// The feedback name of demonstrations.
const DEMONSTRATION: &str = "demonstration";

/// The body of `POST /dicl/build`.
#[derive(Debug, Clone, PartialEq, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct DiclBuildRequest {
    pub function_name: String,
    /// A variant of the function of type `experimental_dynamic_in_context_learning`.
    pub variant_name: String,
    /// `inference` (default): each inference's output; `demonstration`: the latest
    /// demonstration given on it (inferences without one are skipped).
    #[serde(default)]
    pub output_source: OutputSource,
    /// Keep at most this many examples (the oldest inferences first).
    #[serde(default)]
    pub max_examples: Option<usize>,
    /// Add to the examples built before (inferences already among them are skipped).
    #[serde(default)]
    pub append: bool,
    /// Replace the examples built before.
    #[serde(default)]
    pub replace: bool,
    /// Dynamic credentials for the embedding model's providers, as `/inference` takes them.
    #[serde(default)]
    pub credentials: HashMap<String, String>,
}

/// What a build made.
#[derive(Debug, Clone, PartialEq, Serialize, utoipa::ToSchema)]
pub struct DiclBuildReport {
    pub function_name: String,
    pub variant_name: String,
    /// The version of the set now in use.
    pub version: Uuid,
    pub embedding_model: String,
    pub output_source: OutputSource,
    /// Examples in the set now.
    pub examples: usize,
    /// Of which added by this build.
    pub added: usize,
    /// Inferences left out for want of an output (or, with `demonstration`, of a demonstration).
    pub skipped_without_output: usize,
}

/// Why a build was refused or failed.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum DiclBuildError {
    /// The request breaks a rule (400).
    #[error("{0}")]
    Invalid(String),
    /// No such function or variant (404).
    #[error("{0}")]
    NotFound(String),
    /// Examples exist and neither `append` nor `replace` was asked (409).
    #[error("variant `{variant}` of function `{function}` has examples already: ask for `append` or `replace`")]
    Exists { function: String, variant: String },
    /// The embedding model failed (502).
    #[error("embedding failed: {0}")]
    Embedding(InferenceError),
    #[error("DICL storage failed: {0}")]
    Storage(#[from] StorageError),
}

/// Builds example sets; the sets this instance holds in memory are dropped once rebuilt.
pub struct DiclBuilder {
    pub functions: Arc<FunctionSet>,
    pub inference: Arc<InferenceService>,
    pub records: Arc<dyn InferenceStore>,
    pub feedback: Arc<dyn FeedbackStore>,
    pub sets: Arc<LoadedSets>,
    pub clock: Arc<dyn Clock>,
    pub ids: Arc<dyn IdSource>,
}

/// One candidate example before embedding.
struct Candidate {
    inference_id: Uuid,
    input: String,
    output: Value,
}

impl DiclBuilder {
    pub async fn build(
        &self,
        project: &ProjectId,
        request: &DiclBuildRequest,
    ) -> Result<DiclBuildReport, DiclBuildError> {
        let (function, embedding_model) = self.target(request)?;
        if request.append && request.replace {
            return Err(DiclBuildError::Invalid(
                "`append` and `replace` cannot both be set".to_owned(),
            ));
        }
        let (function_name, variant_name) = (request.function_name.as_str(), request.variant_name.as_str());
        let store = self.sets.store();
        let mut examples = Vec::new();
        if let Some(current) = store.current(project, function_name, variant_name).await? {
            if request.append {
                examples = store
                    .load(project, function_name, variant_name, current.version)
                    .await?
                    .examples;
            } else if !request.replace {
                return Err(DiclBuildError::Exists {
                    function: function_name.to_owned(),
                    variant: variant_name.to_owned(),
                });
            }
        }
        let known: BTreeSet<Uuid> = examples.iter().map(|e| e.inference_id).collect();
        let room = request.max_examples.map(|max| max.saturating_sub(examples.len()));
        let (candidates, skipped) = self.candidates(project, function, request, &known, room).await?;
        let added = candidates.len();
        for batch in candidates.chunks(EMBED_BATCH) {
            let texts = batch.iter().map(|c| c.input.clone()).collect();
            let embedded = embed_texts(&self.inference, &embedding_model, texts, &request.credentials)
                .await
                .map_err(DiclBuildError::Embedding)?;
            for (candidate, embedding) in batch.iter().zip(embedded.vectors) {
                examples.push(DiclExample {
                    inference_id: candidate.inference_id,
                    input: candidate.input.clone(),
                    output: candidate.output.clone(),
                    embedding,
                });
            }
        }
        if examples.is_empty() {
            return Err(DiclBuildError::Invalid(format!(
                "function `{}` has no stored inference with {} to learn from",
                excerpt(function_name),
                match request.output_source {
                    OutputSource::Inference => "an output",
                    OutputSource::Demonstration => "a demonstration",
                }
            )));
        }
        let set = ExampleSet {
            version: self.ids.new_uuid(),
            function_name: function_name.to_owned(),
            variant_name: variant_name.to_owned(),
            function_type: match function.config.kind {
                FunctionKind::Chat => FunctionType::Chat,
                FunctionKind::Json => FunctionType::Json,
            },
            embedding_model: embedding_model.clone(),
            output_source: request.output_source,
            built_at: rfc3339(self.clock.now_unix_ms()),
            examples,
        };
        store.publish(project, &set).await?;
        self.sets.forget(project, function_name, variant_name);
        Ok(DiclBuildReport {
            function_name: set.function_name,
            variant_name: set.variant_name,
            version: set.version,
            embedding_model,
            output_source: set.output_source,
            examples: set.examples.len(),
            added,
            skipped_without_output: skipped,
        })
    }

    /// The function and the variant's embedding model, checked.
    fn target(&self, request: &DiclBuildRequest) -> Result<(&Function, String), DiclBuildError> {
        let function = self
            .functions
            .function(&request.function_name)
            .map_err(|e| DiclBuildError::NotFound(e.to_string()))?;
        let variant = function
            .variant(&request.variant_name)
            .map_err(|e| DiclBuildError::NotFound(e.to_string()))?;
        let Some(settings) = &variant.dicl else {
            return Err(DiclBuildError::Invalid(format!(
                "variant `{}` of function `{}` is not of type `experimental_dynamic_in_context_learning`",
                excerpt(&request.variant_name),
                excerpt(&request.function_name)
            )));
        };
        if !function.config.tools.is_empty() {
            return Err(DiclBuildError::Invalid(format!(
                "function `{}` has tools: DICL examples cannot be built for functions with tools",
                excerpt(&request.function_name)
            )));
        }
        if request.max_examples == Some(0) {
            return Err(DiclBuildError::Invalid("`max_examples` must be at least 1".to_owned()));
        }
        Ok((function, settings.embedding_model.clone()))
    }

    /// The function's inferences that make examples, oldest first, and how many had no output.
    async fn candidates(
        &self,
        project: &ProjectId,
        function: &Function,
        request: &DiclBuildRequest,
        known: &BTreeSet<Uuid>,
        room: Option<usize>,
    ) -> Result<(Vec<Candidate>, usize), DiclBuildError> {
        let mut candidates = Vec::new();
        let mut skipped = 0;
        let mut after = None;
        loop {
            let page = self
                .records
                .list_function(project, &function.name, after, LIST_PAGE)
                .await?;
            for record in &page.records {
                if room.is_some_and(|room| candidates.len() >= room) {
                    return Ok((candidates, skipped));
                }
                if known.contains(&record.inference_id) {
                    continue;
                }
                match self
                    .candidate(project, function.config.kind, record, request.output_source)
                    .await?
                {
                    Some(candidate) => candidates.push(candidate),
                    None => skipped += 1,
                }
            }
            match page.records.last() {
                Some(last) if page.has_more => after = Some(last.inference_id),
                _ => return Ok((candidates, skipped)),
            }
        }
    }

    async fn candidate(
        &self,
        project: &ProjectId,
        kind: FunctionKind,
        record: &InferenceRecord,
        source: OutputSource,
    ) -> Result<Option<Candidate>, DiclBuildError> {
        let id = record.inference_id;
        let input: FunctionInput = serde_json::from_value(record.input.clone())
            .map_err(|e| DiclBuildError::Invalid(format!("the stored input of inference {id} cannot be read: {e}")))?;
        if has_tool_blocks(&input) {
            return Err(DiclBuildError::Invalid(format!(
                "inference {id} has tool calls or tool results in its input: DICL examples cannot hold them"
            )));
        }
        let output = match source {
            OutputSource::Inference => record.output.clone(),
            OutputSource::Demonstration => match self.feedback.latest_for_target(project, id, DEMONSTRATION).await? {
                Some(feedback) if feedback.kind == FeedbackKind::Demonstration => feedback.value,
                _ => return Ok(None),
            },
        };
        if holds_tool_call(&output) {
            return Err(DiclBuildError::Invalid(format!(
                "the output of inference {id} holds tool calls: DICL examples cannot hold them"
            )));
        }
        if super::prompt::output_blocks(kind, &output).is_empty() {
            return Ok(None);
        }
        let input = stored_input_json(&input).map_err(|e| DiclBuildError::Invalid(format!("inference {id}: {e}")))?;
        Ok(Some(Candidate {
            inference_id: id,
            input,
            output,
        }))
    }
}

/// Whether a chat output (content blocks) holds a tool call.
fn holds_tool_call(output: &Value) -> bool {
    output.as_array().is_some_and(|blocks| {
        blocks
            .iter()
            .any(|b| b.get("type").and_then(Value::as_str) == Some("tool_call"))
    })
}
