//! The reply to a (non-streamed) inference, exactly in TensorZero's shape: `content` for chat
//! functions, `output` for json functions. `/batch_inference` returns the same objects.

use super::model_call::ModelCall;
use super::output::{FunctionOutput, JsonOutput, OutputBlock};
use super::service::InferenceResult;
use super::stream::UsageReport;
use super::validate::Includes;
use crate::model::FinishReason;
use crate::ports::inference_records::{FunctionType, InferenceRecord};
use serde::{Deserialize, Serialize};
use serde_json::Value;
use uuid::Uuid;

/// One model call's raw data, for `include_raw_response` / `include_raw_usage`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct RawEntry {
    pub model_inference_id: Uuid,
    pub provider_type: String,
    pub api_type: String,
    pub data: Value,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct InferenceReply {
    pub inference_id: Uuid,
    pub episode_id: Uuid,
    pub variant_name: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub content: Option<Vec<OutputBlock>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub output: Option<JsonOutput>,
    pub usage: UsageReport,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub finish_reason: Option<FinishReason>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub original_response: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub raw_response: Option<Vec<RawEntry>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub raw_usage: Option<Vec<RawEntry>>,
}

impl InferenceReply {
    pub fn new(result: &InferenceResult, includes: Includes) -> Self {
        let (content, output) = match &result.output {
            FunctionOutput::Chat(blocks) => (Some(blocks.clone()), None),
            FunctionOutput::Json(output) => (None, Some(output.clone())),
        };
        let entries = |data: fn(&ModelCall) -> Value| {
            let entries: Vec<RawEntry> = result
                .model_calls
                .iter()
                .filter(|call| !call.cached)
                .map(|call| RawEntry {
                    model_inference_id: call.id,
                    provider_type: call.provider.clone(),
                    api_type: "chat_completions".to_owned(),
                    data: data(call),
                })
                .collect();
            (!entries.is_empty()).then_some(entries)
        };
        let raw_response = if includes.raw_response {
            entries(|call| Value::String(call.response.raw_response.clone().unwrap_or_default()))
        } else {
            None
        };
        let raw_usage = if includes.raw_usage {
            entries(|call| provider_usage(call.response.raw_response.as_deref()))
        } else {
            None
        };
        Self {
            inference_id: result.inference_id,
            episode_id: result.episode_id,
            variant_name: result.variant_name.clone(),
            content,
            output,
            usage: UsageReport::from(&result.usage),
            finish_reason: result.finish_reason,
            original_response: if includes.original_response {
                result.original_response.clone()
            } else {
                None
            },
            raw_response,
            raw_usage,
        }
    }
}

impl InferenceReply {
    /// The reply rebuilt from a stored record (what `/batch_inference` answers once its items
    /// have run): content or output, usage, finish reason and ids; no raw provider data.
    pub fn from_record(record: &InferenceRecord) -> Result<Self, serde_json::Error> {
        let (content, output) = match record.function_type {
            FunctionType::Chat => (Some(serde_json::from_value(record.output.clone())?), None),
            FunctionType::Json => (None, Some(serde_json::from_value(record.output.clone())?)),
        };
        let finish_reason = match &record.finish_reason {
            Some(name) => Some(serde_json::from_value(Value::String(name.clone()))?),
            None => None,
        };
        Ok(Self {
            inference_id: record.inference_id,
            episode_id: record.episode_id,
            variant_name: record.variant_name.clone(),
            content,
            output,
            usage: UsageReport {
                input_tokens: record.usage.input_tokens,
                output_tokens: record.usage.output_tokens,
            },
            finish_reason,
            original_response: None,
            raw_response: None,
            raw_usage: None,
        })
    }
}

/// The provider's own usage object, unprocessed (an OpenAI-compatible answer's `usage`, with its
/// provider-specific details such as cached prompt tokens); null when the answer carries none.
fn provider_usage(raw_response: Option<&str>) -> Value {
    raw_response
        .and_then(|raw| serde_json::from_str::<Value>(raw).ok())
        .and_then(|mut body| body.get_mut("usage").map(Value::take))
        .unwrap_or(Value::Null)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn raw_usage_is_the_providers_usage_object_as_it_answered() {
        let raw = json!({
            "choices": [],
            "usage": {"prompt_tokens": 9, "completion_tokens": 2, "prompt_tokens_details": {"cached_tokens": 8}}
        });
        assert_eq!(
            provider_usage(Some(&raw.to_string())),
            json!({"prompt_tokens": 9, "completion_tokens": 2, "prompt_tokens_details": {"cached_tokens": 8}})
        );
        assert_eq!(provider_usage(Some("not json")), Value::Null);
        assert_eq!(provider_usage(Some(r#"{"choices": []}"#)), Value::Null);
        assert_eq!(provider_usage(None), Value::Null);
    }
}
