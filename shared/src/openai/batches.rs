//! `/v1/batches` wire types.

use super::files::ExpiresAfter;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// Where a batch is in its life.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum BatchStatus {
    Validating,
    Failed,
    InProgress,
    Finalizing,
    Completed,
    Expired,
    Cancelling,
    Cancelled,
}

impl BatchStatus {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Validating => "validating",
            Self::Failed => "failed",
            Self::InProgress => "in_progress",
            Self::Finalizing => "finalizing",
            Self::Completed => "completed",
            Self::Expired => "expired",
            Self::Cancelling => "cancelling",
            Self::Cancelled => "cancelled",
        }
    }

    /// No further transition happens from here.
    pub fn is_terminal(self) -> bool {
        matches!(self, Self::Failed | Self::Completed | Self::Expired | Self::Cancelled)
    }
}

#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct RequestCounts {
    pub total: u64,
    pub completed: u64,
    /// Requests that failed, and (once a cancelled or expired batch ends) those that never ran.
    pub failed: u64,
    /// A Nimbus extension: of `failed`, the requests that never ran (the batch was cancelled or
    /// expired before they started); absent while zero, so OpenAI's three counts are unchanged.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub not_run: u64,
}

fn is_zero(count: &u64) -> bool {
    *count == 0
}

#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct InputTokensDetails {
    pub cached_tokens: u64,
}

#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct OutputTokensDetails {
    pub reasoning_tokens: u64,
}

/// Token totals over every request that ran.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct BatchUsage {
    pub input_tokens: u64,
    pub output_tokens: u64,
    pub total_tokens: u64,
    pub input_tokens_details: InputTokensDetails,
    pub output_tokens_details: OutputTokensDetails,
}

impl BatchUsage {
    pub fn add(&mut self, input_tokens: u64, output_tokens: u64) {
        self.input_tokens += input_tokens;
        self.output_tokens += output_tokens;
        self.total_tokens += input_tokens + output_tokens;
    }

    pub(crate) fn add_usage(&mut self, other: &BatchUsage) {
        self.add(other.input_tokens, other.output_tokens);
    }
}

/// One problem with the input file.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct BatchError {
    pub code: String,
    pub message: String,
    pub param: Option<String>,
    pub line: Option<u64>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct BatchErrors {
    pub object: String,
    pub data: Vec<BatchError>,
}

/// The Batch object.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct BatchObject {
    pub id: String,
    pub object: String,
    pub endpoint: String,
    pub errors: Option<BatchErrors>,
    pub input_file_id: String,
    pub completion_window: String,
    pub status: BatchStatus,
    pub output_file_id: Option<String>,
    pub error_file_id: Option<String>,
    pub created_at: i64,
    pub in_progress_at: Option<i64>,
    pub expires_at: Option<i64>,
    pub finalizing_at: Option<i64>,
    pub completed_at: Option<i64>,
    pub failed_at: Option<i64>,
    pub expired_at: Option<i64>,
    pub cancelling_at: Option<i64>,
    pub cancelled_at: Option<i64>,
    pub request_counts: RequestCounts,
    pub metadata: Option<BTreeMap<String, String>>,
    pub usage: BatchUsage,
}

impl BatchObject {
    /// A new batch, `validating`, created at `created_at` and due `window_s` later.
    pub fn validating(
        id: String,
        endpoint: &str,
        input_file_id: String,
        completion_window: String,
        created_at: i64,
        window_s: i64,
    ) -> Self {
        Self {
            id,
            object: "batch".to_owned(),
            endpoint: endpoint.to_owned(),
            errors: None,
            input_file_id,
            completion_window,
            status: BatchStatus::Validating,
            output_file_id: None,
            error_file_id: None,
            created_at,
            in_progress_at: None,
            expires_at: Some(created_at + window_s),
            finalizing_at: None,
            completed_at: None,
            failed_at: None,
            expired_at: None,
            cancelling_at: None,
            cancelled_at: None,
            request_counts: RequestCounts::default(),
            metadata: None,
            usage: BatchUsage::default(),
        }
    }
}

/// `POST /v1/batches`. Fields Nimbus does not model are ignored.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct CreateBatchRequest {
    pub input_file_id: String,
    pub endpoint: String,
    pub completion_window: String,
    /// Checked by the business layer (string values only), so that its errors name `metadata`.
    #[serde(default)]
    pub metadata: Option<BTreeMap<String, serde_json::Value>>,
    /// When the batch's output and error files expire, counted from each file's creation.
    /// Not echoed in the Batch object (OpenAI's does not either).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub output_expires_after: Option<ExpiresAfter>,
}

#[derive(Debug, Clone, PartialEq, Serialize, utoipa::ToSchema)]
pub struct BatchList {
    pub object: &'static str,
    pub data: Vec<BatchObject>,
    pub first_id: Option<String>,
    pub last_id: Option<String>,
    pub has_more: bool,
}
