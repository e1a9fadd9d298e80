//! `POST /feedback` (TensorZero's): a value for a configured `[metrics.M]`, a `comment`, or a
//! `demonstration`, given on one inference or one episode of the caller's project, checked and
//! stored as a [`FeedbackRecord`].

use super::experiments::ExperimentFeedback;
use super::CompiledSchema;
use crate::config::{MetricConfig, MetricKind, MetricLevel};
use crate::ports::inference_records::{
    rfc3339, FeedbackKind, FeedbackRecord, FeedbackTarget, FunctionType, InferenceRecord,
};
use crate::ports::{Clock, FeedbackStore, IdSource, InferenceStore, ProjectId, StorageError};
use crate::user_text::excerpt;
use serde::{Deserialize, Serialize};
use serde_json::{json, Map, Value};
use std::collections::BTreeMap;
use std::future::Future;
use std::sync::Arc;
use std::time::Duration;
use uuid::Uuid;

/// The body of `POST /feedback`. The TensorZero client sends every field, unset ones as null.
#[derive(Debug, Clone, PartialEq, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct FeedbackRequest {
    pub metric_name: String,
    pub value: Value,
    #[serde(default)]
    pub inference_id: Option<Uuid>,
    #[serde(default)]
    pub episode_id: Option<Uuid>,
    #[serde(default)]
    pub tags: Option<BTreeMap<String, String>>,
    /// Check everything, store nothing.
    #[serde(default)]
    pub dryrun: Option<bool>,
    /// Allows tags in the reserved `tensorzero::` namespace.
    #[serde(default)]
    pub internal: Option<bool>,
}

/// The id of a stored (or, for a dry run, checked) feedback: a UUIDv7.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, utoipa::ToSchema)]
#[serde(transparent)]
pub struct FeedbackId(pub Uuid);

/// Why feedback was refused.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum FeedbackError {
    /// The request breaks a rule (400); the message says which.
    #[error("{0}")]
    Invalid(String),
    /// Neither a configured metric nor `comment`/`demonstration` (404).
    #[error(
        "Unknown metric `{}`: configure it as [metrics.{}], or use `comment` or `demonstration`.",
        excerpt(.0),
        excerpt(.0)
    )]
    UnknownMetric(String),
    /// The inference or episode does not exist in the caller's project (404).
    #[error("{} `{id}` was not found.", match .target { FeedbackTarget::Inference => "Inference", FeedbackTarget::Episode => "Episode" })]
    TargetNotFound { target: FeedbackTarget, id: Uuid },
    #[error("feedback storage failed: {0}")]
    Storage(#[from] StorageError),
}

/// How long a missing target is looked for again before the answer is 404: records are written
/// just after the `/inference` response, so feedback sent at once may arrive first.
pub(crate) const TARGET_WAIT: Duration = Duration::from_secs(2);
const TARGET_POLL_INTERVAL: Duration = Duration::from_millis(100);

/// Checks and stores feedback.
pub struct FeedbackService {
    metrics: BTreeMap<String, MetricConfig>,
    inferences: Arc<dyn InferenceStore>,
    store: Arc<dyn FeedbackStore>,
    clock: Arc<dyn Clock>,
    ids: Arc<dyn IdSource>,
    target_wait: Duration,
    /// Counts metric values for adaptive experiments (none: not counted).
    experiments: Option<Arc<ExperimentFeedback>>,
}

impl FeedbackService {
    pub fn new(
        metrics: BTreeMap<String, MetricConfig>,
        inferences: Arc<dyn InferenceStore>,
        store: Arc<dyn FeedbackStore>,
        clock: Arc<dyn Clock>,
        ids: Arc<dyn IdSource>,
    ) -> Self {
        Self {
            metrics,
            inferences,
            store,
            clock,
            ids,
            target_wait: TARGET_WAIT,
            experiments: None,
        }
    }

    /// Count metric values for adaptive experiments through `experiments`.
    pub fn with_experiments(mut self, experiments: Arc<ExperimentFeedback>) -> Self {
        self.experiments = Some(experiments);
        self
    }

    /// Look for a missing target this long (default [`TARGET_WAIT`]).
    #[cfg(test)]
    pub(crate) fn with_target_wait(mut self, wait: Duration) -> Self {
        self.target_wait = wait;
        self
    }

    /// Check `request` against the metrics and its target in `project`, then store it (unless
    /// `dryrun`).
    pub async fn submit(&self, project: &ProjectId, request: FeedbackRequest) -> Result<FeedbackId, FeedbackError> {
        let FeedbackRequest {
            metric_name,
            value,
            inference_id,
            episode_id,
            tags,
            dryrun,
            internal,
        } = request;
        let tags = tags.unwrap_or_default();
        if let Some(message) = super::tags::reserved_tag_error(&tags, internal.unwrap_or(false)) {
            return Err(FeedbackError::Invalid(message));
        }
        if inference_id.is_some() && episode_id.is_some() {
            return Err(FeedbackError::Invalid(
                "Give one of `inference_id` and `episode_id`, not both.".into(),
            ));
        }
        let (kind, target) = self.kind_and_target(&metric_name, inference_id, episode_id)?;
        let target_id = match target {
            FeedbackTarget::Inference => inference_id,
            FeedbackTarget::Episode => episode_id,
        }
        .ok_or_else(|| FeedbackError::Invalid(missing_target_message(&metric_name, target)))?;
        check_value_type(&metric_name, kind, &value)?;
        let mut inference = None;
        let value = match target {
            FeedbackTarget::Inference => {
                let record = self
                    .wait_for(|| self.inferences.get(project, target_id))
                    .await?
                    .ok_or(FeedbackError::TargetNotFound { target, id: target_id })?;
                let value = if kind == FeedbackKind::Demonstration {
                    demonstration_value(&record, value)?
                } else {
                    value
                };
                inference = Some(record);
                value
            }
            FeedbackTarget::Episode => {
                self.wait_for(|| async { Ok(self.inferences.episode_exists(project, target_id).await?.then_some(())) })
                    .await?
                    .ok_or(FeedbackError::TargetNotFound { target, id: target_id })?;
                value
            }
        };
        let feedback_id = self.ids.new_uuid();
        if dryrun.unwrap_or(false) {
            return Ok(FeedbackId(feedback_id));
        }
        let now_ms = self.clock.now_unix_ms();
        let counted = metric_value(&value);
        self.store
            .put(&FeedbackRecord {
                project: project.clone(),
                feedback_id,
                target_type: target,
                target_id,
                metric_name: metric_name.clone(),
                kind,
                value,
                tags,
                created_at: rfc3339(now_ms),
                timestamp: now_ms,
            })
            .await?;
        if let (Some(experiments), Some(counted)) = (&self.experiments, counted) {
            if experiments.counts(&metric_name) {
                let observed = experiments
                    .observe(
                        project,
                        &metric_name,
                        (target, target_id),
                        inference.as_ref(),
                        self.inferences.as_ref(),
                        feedback_id,
                        counted,
                        now_ms,
                    )
                    .await;
                if let Err(err) = observed {
                    // The feedback is stored; only the experiment misses this value.
                    tracing::warn!(%feedback_id, error = %err, "could not count the feedback for its experiment");
                }
            }
        }
        Ok(FeedbackId(feedback_id))
    }

    /// What `metric_name` is and what it is given on.
    fn kind_and_target(
        &self,
        metric_name: &str,
        inference_id: Option<Uuid>,
        episode_id: Option<Uuid>,
    ) -> Result<(FeedbackKind, FeedbackTarget), FeedbackError> {
        if let Some(metric) = self.metrics.get(metric_name) {
            let kind = match metric.kind {
                MetricKind::Boolean => FeedbackKind::Boolean,
                MetricKind::Float => FeedbackKind::Float,
            };
            let target = match metric.level {
                MetricLevel::Inference => FeedbackTarget::Inference,
                MetricLevel::Episode => FeedbackTarget::Episode,
            };
            return Ok((kind, target));
        }
        match metric_name {
            "comment" => match (inference_id, episode_id) {
                (Some(_), None) => Ok((FeedbackKind::Comment, FeedbackTarget::Inference)),
                (None, Some(_)) => Ok((FeedbackKind::Comment, FeedbackTarget::Episode)),
                _ => Err(FeedbackError::Invalid(
                    "A `comment` needs exactly one of `inference_id` and `episode_id`.".into(),
                )),
            },
            "demonstration" => Ok((FeedbackKind::Demonstration, FeedbackTarget::Inference)),
            _ => Err(FeedbackError::UnknownMetric(metric_name.to_owned())),
        }
    }

    /// `probe` until it finds something or the wait is over.
    async fn wait_for<T, F, Fut>(&self, mut probe: F) -> Result<Option<T>, StorageError>
    where
        F: FnMut() -> Fut,
        Fut: Future<Output = Result<Option<T>, StorageError>>,
    {
        let deadline = tokio::time::Instant::now() + self.target_wait;
        loop {
            if let Some(found) = probe().await? {
                return Ok(Some(found));
            }
            let now = tokio::time::Instant::now();
            if now >= deadline {
                return Ok(None);
            }
            tokio::time::sleep(TARGET_POLL_INTERVAL.min(deadline - now)).await;
        }
    }
}

/// A metric value as a number: a boolean as 0 or 1, a number as it is.
fn metric_value(value: &Value) -> Option<f64> {
    match value {
        Value::Bool(b) => Some(if *b { 1.0 } else { 0.0 }),
        other => other.as_f64(),
    }
}

fn missing_target_message(metric_name: &str, target: FeedbackTarget) -> String {
    let (level, field, other) = match target {
        FeedbackTarget::Inference => ("inference", "inference_id", "episode_id"),
        FeedbackTarget::Episode => ("episode", "episode_id", "inference_id"),
    };
    format!(
        "Metric `{}` is given at the {level} level: give `{field}` (not `{other}`).",
        excerpt(metric_name)
    )
}

fn check_value_type(metric_name: &str, kind: FeedbackKind, value: &Value) -> Result<(), FeedbackError> {
    let expected = match kind {
        FeedbackKind::Boolean if !value.is_boolean() => "a boolean",
        FeedbackKind::Float if !value.is_number() => "a number",
        FeedbackKind::Comment if !value.is_string() => "a string",
        _ => return Ok(()),
    };
    Err(FeedbackError::Invalid(format!(
        "The value for metric `{}` must be {expected}.",
        excerpt(metric_name)
    )))
}

/// A demonstration as the inference's function would have answered it: chat content blocks
/// (from a string, or `text` and `tool_call` blocks), or json `{raw, parsed}` checked against the
/// output schema the inference used.
fn demonstration_value(record: &InferenceRecord, value: Value) -> Result<Value, FeedbackError> {
    match record.function_type {
        FunctionType::Chat => chat_demonstration(value),
        FunctionType::Json => {
            if !value.is_object() {
                return Err(FeedbackError::Invalid(
                    "A demonstration for a json function must be a JSON object.".into(),
                ));
            }
            if let Some(schema) = &record.output_schema {
                match CompiledSchema::compile(schema.clone()) {
                    Ok(schema) => schema.validate(&value).map_err(|violation| {
                        FeedbackError::Invalid(format!(
                            "The demonstration does not match the function's output schema: {violation}."
                        ))
                    })?,
                    Err(e) => {
                        tracing::warn!(inference_id = %record.inference_id, error = %e, "stored output schema does not compile; demonstration not checked");
                    }
                }
            }
            Ok(json!({"raw": value.to_string(), "parsed": value}))
        }
    }
}

fn chat_demonstration(value: Value) -> Result<Value, FeedbackError> {
    let blocks = match value {
        Value::String(text) => return Ok(json!([{"type": "text", "text": text}])),
        Value::Array(blocks) => blocks,
        _ => {
            return Err(FeedbackError::Invalid(
                "A demonstration for a chat function must be a string or an array of content blocks.".into(),
            ))
        }
    };
    let invalid = |index: usize, problem: &str| {
        FeedbackError::Invalid(format!("Invalid demonstration content block {index}: {problem}."))
    };
    let mut checked = Vec::with_capacity(blocks.len());
    for (index, block) in blocks.into_iter().enumerate() {
        let Value::Object(block) = block else {
            return Err(invalid(index, "it must be an object"));
        };
        let only = |allowed: &[&str], block: &Map<String, Value>| match block
            .keys()
            .find(|k| !allowed.contains(&k.as_str()))
        {
            Some(key) => Err(invalid(index, &format!("unknown field `{}`", excerpt(key)))),
            None => Ok(()),
        };
        match block.get("type").and_then(Value::as_str) {
            Some("text") => {
                only(&["type", "text"], &block)?;
                let text = block
                    .get("text")
                    .and_then(Value::as_str)
                    .ok_or_else(|| invalid(index, "a `text` block needs a string `text`"))?;
                checked.push(json!({"type": "text", "text": text}));
            }
            Some("tool_call") => {
                only(&["type", "name", "arguments"], &block)?;
                let name = block
                    .get("name")
                    .and_then(Value::as_str)
                    .ok_or_else(|| invalid(index, "a `tool_call` block needs a string `name`"))?;
                let arguments = block
                    .get("arguments")
                    .filter(|a| a.is_object())
                    .ok_or_else(|| invalid(index, "a `tool_call` block needs an object `arguments`"))?;
                checked.push(json!({"type": "tool_call", "name": name, "arguments": arguments}));
            }
            _ => return Err(invalid(index, "`type` must be `text` or `tool_call`")),
        }
    }
    Ok(Value::Array(checked))
}

#[cfg(test)]
#[path = "feedback_tests.rs"]
mod tests;
