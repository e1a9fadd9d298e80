//! What the `/inference` endpoint stores about each inference, and the feedback given on it: the
//! types the `InferenceStore` and `FeedbackStore` ports carry, and the JSON the records routes
//! answer (`GET /inferences/{id}`, `GET /episodes/{id}/inferences`). The project is stored beside
//! a record but is no part of its JSON.

use super::ProjectId;
use serde::{Deserialize, Serialize};
use serde_json::Value;
use std::collections::BTreeMap;
use uuid::Uuid;

/// The project of a record just decoded from its JSON, before the store sets the one it was
/// stored under.
fn unset_project() -> ProjectId {
    ProjectId::new(String::new())
}

/// `chat` or `json`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum FunctionType {
    Chat,
    Json,
}

/// Tokens read and written.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize, utoipa::ToSchema)]
pub struct TokenUsage {
    pub input_tokens: u64,
    pub output_tokens: u64,
}

/// One stored inference.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct InferenceRecord {
    /// The owning project: stored with the record, never in its JSON.
    #[serde(skip, default = "unset_project")]
    pub project: ProjectId,
    pub inference_id: Uuid,
    pub episode_id: Uuid,
    pub function_name: String,
    pub variant_name: String,
    pub function_type: FunctionType,
    /// The `/inference` request's `input`, as received.
    pub input: Value,
    /// chat: the content blocks array; json: `{raw, parsed}`.
    pub output: Value,
    #[serde(default)]
    pub tags: BTreeMap<String, String>,
    #[serde(default)]
    pub tool_params: Option<Value>,
    #[serde(default)]
    pub output_schema: Option<Value>,
    #[serde(default)]
    pub inference_params: Value,
    pub processing_time_ms: u64,
    #[serde(default)]
    pub ttft_ms: Option<u64>,
    pub usage: TokenUsage,
    #[serde(default)]
    pub finish_reason: Option<String>,
    /// Served from the model cache.
    #[serde(default)]
    pub cached: bool,
    /// RFC 3339 (see [`rfc3339`]).
    pub created_at: String,
    /// Milliseconds since the epoch.
    pub timestamp: i64,
    #[serde(default)]
    pub model_calls: Vec<ModelCallRecord>,
}

/// One call to a model provider made for an inference.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct ModelCallRecord {
    pub id: Uuid,
    pub model_name: String,
    pub provider_name: String,
    pub raw_request: String,
    pub raw_response: String,
    pub usage: TokenUsage,
    pub response_time_ms: u64,
    #[serde(default)]
    pub ttft_ms: Option<u64>,
    #[serde(default)]
    pub cached: bool,
    #[serde(default)]
    pub finish_reason: Option<String>,
}

/// What feedback is about: one inference or a whole episode.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum FeedbackTarget {
    Inference,
    Episode,
}

/// The kind of feedback, which decides the shape of its value.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum FeedbackKind {
    /// A `boolean` metric: the value is a bool.
    Boolean,
    /// A `float` metric: the value is a number.
    Float,
    /// Free text on an inference or an episode.
    Comment,
    /// What the inference should have answered: chat content blocks, or json `{raw, parsed}`.
    Demonstration,
}

/// One stored feedback.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct FeedbackRecord {
    /// The owning project: stored with the record, never in its JSON.
    #[serde(skip, default = "unset_project")]
    pub project: ProjectId,
    pub feedback_id: Uuid,
    pub target_type: FeedbackTarget,
    pub target_id: Uuid,
    pub metric_name: String,
    pub kind: FeedbackKind,
    pub value: Value,
    #[serde(default)]
    pub tags: BTreeMap<String, String>,
    /// RFC 3339 (see [`rfc3339`]).
    pub created_at: String,
    /// Milliseconds since the epoch.
    pub timestamp: i64,
}

/// Milliseconds since the epoch as an RFC 3339 UTC time, e.g. `2026-04-24T10:15:30.123Z`
/// (out-of-range inputs give the epoch).
pub fn rfc3339(unix_ms: i64) -> String {
    jiff::Timestamp::from_millisecond(unix_ms)
        .unwrap_or(jiff::Timestamp::UNIX_EPOCH)
        .to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn times_are_rfc3339_utc() {
        assert_eq!(rfc3339(0), "1970-01-01T00:00:00Z");
        assert_eq!(rfc3339(1_777_025_730_123), "2026-04-24T10:15:30.123Z");
        assert_eq!(rfc3339(i64::MAX), "1970-01-01T00:00:00Z");
    }
}
