//! A chat request as providers receive it: the typed view plus the client's raw body.

use crate::openai::chat::ChatCompletionRequest;
use serde_json::{Map, Value};

/// The validated request and the raw JSON object it came from (minus gateway-only fields such as
/// `credentials`). OpenAI-compatible providers forward the raw body so that parameters the gateway
/// does not model still reach the upstream server.
#[derive(Debug, Clone, PartialEq)]
pub struct ChatRequest {
    pub typed: ChatCompletionRequest,
    pub raw: Map<String, Value>,
}

impl ChatRequest {
    /// Build from a typed request alone (the raw body is its serialization).
    pub fn from_typed(typed: ChatCompletionRequest) -> Self {
        let raw = match serde_json::to_value(&typed) {
            Ok(Value::Object(map)) => map,
            _ => Map::new(),
        };
        Self { typed, raw }
    }
}
