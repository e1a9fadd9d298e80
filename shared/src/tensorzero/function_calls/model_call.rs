//! The model call that produced a function inference's answer.

use crate::model::ModelResponse;
use std::time::Duration;
use uuid::Uuid;

/// One model call that produced the answer.
#[derive(Debug, Clone, PartialEq)]
pub struct ModelCall {
    pub id: Uuid,
    pub model: String,
    pub provider: String,
    pub response: ModelResponse,
    pub latency: Duration,
    pub ttft: Option<Duration>,
    /// Served from the model cache.
    pub cached: bool,
}
