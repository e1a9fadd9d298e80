//! What an inference leaves behind, written after the response: the model cache entry and the
//! inference record. Neither ever fails or delays an inference: a cache error is a miss, a
//! failed write is logged.

use super::model_call::ModelCall;
use super::output::{FunctionOutput, OutputBlock};
use super::prepare::PreparedCall;
use super::validate::InferenceCall;
use crate::config::functions::FunctionKind;
use crate::config::{CacheConfig, CacheMode};
use crate::model::{FinishReason, ModelResponse, ModelUsage};
use crate::ports::inference_records::{rfc3339, FunctionType, InferenceRecord, ModelCallRecord, TokenUsage};
use crate::ports::{
    AfterResponse, CacheKey, CachedModelResponse, Clock, InferenceStore, MetricUnit, MetricsSink, ModelCache, ProjectId,
};
use serde_json::{json, Value};
use std::sync::Arc;
use std::time::Duration;
use uuid::Uuid;

/// The stores an inference writes to, and how work is put after the response.
#[derive(Clone)]
pub struct InferencePersistence {
    pub records: Arc<dyn InferenceStore>,
    pub cache: Arc<dyn ModelCache>,
    pub cache_config: CacheConfig,
    pub after_response: Arc<dyn AfterResponse>,
    pub clock: Arc<dyn Clock>,
    /// Cache lookups are counted here (`cache_lookups` by `result`: hit, miss, error).
    pub metrics: Arc<dyn MetricsSink>,
}

/// One finished inference, as recorded.
pub struct Finished<'a> {
    pub project: &'a ProjectId,
    pub call: &'a InferenceCall,
    pub prepared: &'a PreparedCall,
    pub inference_id: Uuid,
    pub function_name: &'a str,
    pub variant_name: &'a str,
    pub kind: FunctionKind,
    pub output: &'a FunctionOutput,
    pub usage: &'a ModelUsage,
    pub finish_reason: Option<FinishReason>,
    /// Every model call the answer took, in the order they are stored.
    pub model_calls: &'a [ModelCall],
    /// Blocks stored with the output but not returned (a chain of thought's reasoning).
    pub auxiliary_content: &'a [OutputBlock],
    pub processing_time: Duration,
}

impl InferencePersistence {
    /// The call's cache mode (the configured default when it names none; never writes in a dryrun).
    pub fn mode(&self, call: &InferenceCall) -> CacheMode {
        call.effective_cache_mode(self.cache_config.enabled)
    }

    /// A cached answer for `key`, if reading is on and one is fresh enough.
    pub async fn cached(&self, key: &CacheKey, mode: CacheMode, max_age_s: Option<u64>) -> Option<ModelResponse> {
        if !mode.reads() {
            return None;
        }
        let (result, response) = match self.cache.lookup(key, max_age_s).await {
            Ok(Some(entry)) => ("hit", Some(entry.response)),
            Ok(None) => ("miss", None),
            Err(error) => {
                tracing::warn!(%error, "model cache read failed; calling the model");
                ("error", None)
            }
        };
        self.metrics
            .record("cache_lookups", MetricUnit::Count, 1.0, &[("result", result)]);
        response
    }

    /// Write `response` to the cache after the response, if writing is on.
    pub(crate) fn remember(&self, key: CacheKey, mode: CacheMode, response: &ModelResponse) {
        if !mode.writes() {
            return;
        }
        let cache = Arc::clone(&self.cache);
        let entry = CachedModelResponse {
            response: response.clone(),
            created_at_ms: self.clock.now_unix_ms(),
        };
        let ttl = Duration::from_secs(self.cache_config.ttl_s);
        self.after_response.defer(Box::pin(async move {
            if let Err(error) = cache.store(&key, &entry, ttl).await {
                tracing::warn!(%error, "model cache write failed");
            }
        }));
    }

    /// Store the inference record after the response (not for a dryrun).
    pub fn record(&self, finished: Finished<'_>) {
        if finished.call.dryrun {
            return;
        }
        let record = self.build_record(finished);
        let records = Arc::clone(&self.records);
        self.after_response.defer(Box::pin(async move {
            if let Err(error) = records.put(&record).await {
                tracing::error!(%error, inference_id = %record.inference_id, "storing the inference record failed");
            }
        }));
    }

    pub(super) fn build_record(&self, f: Finished<'_>) -> InferenceRecord {
        let now = self.clock.now_unix_ms();
        let request = &f.prepared.request;
        let tool_params = (!request.tools.is_empty()).then(|| {
            json!({
                "tools_available": request.tools,
                "tool_choice": request.tool_choice,
                "parallel_tool_calls": request.parallel_tool_calls,
            })
        });
        let mut output = f.output.to_value();
        if let (false, Value::Object(fields)) = (f.auxiliary_content.is_empty(), &mut output) {
            let auxiliary = serde_json::to_value(f.auxiliary_content).unwrap_or(Value::Null);
            fields.insert("auxiliary_content".to_owned(), auxiliary);
        }
        InferenceRecord {
            project: f.project.clone(),
            inference_id: f.inference_id,
            episode_id: f.call.episode_id,
            function_name: f.function_name.to_owned(),
            variant_name: f.variant_name.to_owned(),
            function_type: match f.kind {
                FunctionKind::Chat => FunctionType::Chat,
                FunctionKind::Json => FunctionType::Json,
            },
            input: serde_json::to_value(&f.call.input).unwrap_or(Value::Null),
            output,
            tags: f.call.tags.clone(),
            tool_params,
            output_schema: f.prepared.rules.output_schema.as_ref().map(|s| s.value().clone()),
            inference_params: json!({ "chat_completion": request.params }),
            processing_time_ms: millis(f.processing_time),
            ttft_ms: f.model_calls.first().and_then(|c| c.ttft).map(millis),
            usage: token_usage(f.usage),
            finish_reason: f.finish_reason.map(finish_reason_name),
            cached: !f.model_calls.is_empty() && f.model_calls.iter().all(|c| c.cached),
            created_at: rfc3339(now),
            timestamp: now,
            model_calls: f.model_calls.iter().map(model_call_record).collect(),
        }
    }
}

fn model_call_record(call: &ModelCall) -> ModelCallRecord {
    let response = &call.response;
    ModelCallRecord {
        id: call.id,
        model_name: call.model.clone(),
        provider_name: response.provider_name.clone(),
        raw_request: response.raw_request.clone().unwrap_or_default(),
        raw_response: response.raw_response.clone().unwrap_or_default(),
        usage: token_usage(&response.usage),
        response_time_ms: millis(call.latency),
        ttft_ms: call.ttft.map(millis),
        cached: call.cached,
        finish_reason: response
            .choices
            .first()
            .and_then(|c| c.finish_reason)
            .map(finish_reason_name),
    }
}

fn millis(duration: Duration) -> u64 {
    u64::try_from(duration.as_millis()).unwrap_or(u64::MAX)
}

fn token_usage(usage: &ModelUsage) -> TokenUsage {
    TokenUsage {
        input_tokens: usage.input_tokens,
        output_tokens: usage.output_tokens,
    }
}

fn finish_reason_name(reason: FinishReason) -> String {
    serde_json::to_value(reason)
        .ok()
        .and_then(|v| v.as_str().map(str::to_owned))
        .unwrap_or_default()
}
