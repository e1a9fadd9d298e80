//! One request line of a batch through the same inference layer as the synchronous API, and the
//! output or error line it becomes.

use super::BatchEndpoint;
use crate::http::inference_routes::take_credentials;
use crate::http::json_body::parse_json_object;
use crate::http::ApiError;
use crate::inference::InferenceService;
use crate::openai::batches::BatchUsage;
use crate::openai::chat::ChatCompletionRequest;
use crate::openai::embeddings::EmbeddingRequest;
use crate::ports::IdSource;
use crate::providers::ChatRequest;
use serde_json::{json, Map, Value};

/// What became of one line.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct LineResult {
    /// The JSONL line (without newline) for the output file (`ok`) or the error file.
    pub line: String,
    pub ok: bool,
    pub usage: BatchUsage,
}

/// `custom_id` and `body` of a request line (validated when the batch was created).
pub(crate) fn parse_request_line(text: &[u8]) -> Option<(String, Map<String, Value>)> {
    let Ok(Value::Object(mut request)) = serde_json::from_slice::<Value>(text) else {
        return None;
    };
    let custom_id = request.get("custom_id")?.as_str()?.to_owned();
    match request.remove("body") {
        Some(Value::Object(body)) => Some((custom_id, body)),
        _ => None,
    }
}

/// The `custom_id` of a request line, if it has one.
pub(crate) fn custom_id_of(text: &[u8]) -> Option<String> {
    #[derive(serde::Deserialize)]
    struct Id {
        custom_id: String,
    }
    serde_json::from_slice::<Id>(text).ok().map(|id| id.custom_id)
}

/// The `body.model` of a request line, if it has one.
pub(crate) fn model_of(text: &[u8]) -> Option<String> {
    #[derive(serde::Deserialize)]
    struct Body {
        model: String,
    }
    #[derive(serde::Deserialize)]
    struct Line {
        body: Body,
    }
    serde_json::from_slice::<Line>(text).ok().map(|line| line.body.model)
}

/// An error-file line for a request that never ran (`batch_cancelled`, `batch_expired`).
pub(crate) fn not_run_line(ids: &dyn IdSource, custom_id: &str, code: &str, message: &str) -> String {
    json!({
        "id": ids.prefixed("batch_req_"),
        "custom_id": custom_id,
        "response": null,
        "error": {"code": code, "message": message},
    })
    .to_string()
}

/// Run one request line.
pub(crate) async fn run_line(
    inference: &InferenceService,
    ids: &dyn IdSource,
    endpoint: BatchEndpoint,
    text: &[u8],
) -> LineResult {
    let Some((custom_id, body)) = parse_request_line(text) else {
        // Validation let it through, so this only happens if the input changed under the batch.
        let line = json!({
            "id": ids.prefixed("batch_req_"),
            "custom_id": custom_id_of(text),
            "response": null,
            "error": {"code": "invalid_request", "message": "This line is not a valid batch request."},
        });
        return LineResult {
            line: line.to_string(),
            ok: false,
            usage: BatchUsage::default(),
        };
    };
    let mut usage = BatchUsage::default();
    let answer = call(inference, endpoint, body, &mut usage).await;
    let (status, body) = match answer {
        Ok(body) => (200, body),
        Err(error) => (error.status.as_u16(), error.envelope()),
    };
    let line = json!({
        "id": ids.prefixed("batch_req_"),
        "custom_id": custom_id,
        "response": {"status_code": status, "request_id": ids.prefixed("req_"), "body": body},
        "error": null,
    });
    LineResult {
        line: line.to_string(),
        ok: status == 200,
        usage,
    }
}

async fn call(
    inference: &InferenceService,
    endpoint: BatchEndpoint,
    mut body: Map<String, Value>,
    usage: &mut BatchUsage,
) -> Result<Value, ApiError> {
    let credentials = take_credentials(&mut body)?;
    let value = match endpoint {
        BatchEndpoint::ChatCompletions => {
            let parsed = parse_json_object::<ChatCompletionRequest>(body)?;
            let request = ChatRequest {
                typed: parsed.typed,
                raw: parsed.raw,
            };
            let completion = inference.chat(&request, &credentials).await?;
            usage.add(completion.usage.prompt_tokens, completion.usage.completion_tokens);
            serde_json::to_value(&completion)
        }
        BatchEndpoint::Embeddings => {
            let parsed = parse_json_object::<EmbeddingRequest>(body)?;
            let response = inference.embed(&parsed.typed, &credentials).await?;
            usage.add(response.usage.prompt_tokens, 0);
            serde_json::to_value(&response)
        }
    };
    value.map_err(|e| ApiError::internal(format!("could not encode the answer: {e}")))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ports::UuidV7Ids;

    #[test]
    fn request_line_fields_are_read_without_the_rest() {
        let line =
            br#"{"custom_id": "r1", "method": "POST", "url": "/v1/embeddings", "body": {"model": "m", "input": "x"}}"#;
        assert_eq!(custom_id_of(line).as_deref(), Some("r1"));
        assert_eq!(model_of(line).as_deref(), Some("m"));
        let (id, body) = parse_request_line(line).unwrap();
        assert_eq!(id, "r1");
        assert_eq!(body["input"], "x");
        assert_eq!(custom_id_of(b"not json"), None);
        assert!(parse_request_line(br#"{"custom_id": "r", "body": 5}"#).is_none());
    }

    #[test]
    fn never_run_lines_carry_the_code_and_no_response() {
        let line: Value = serde_json::from_str(&not_run_line(&UuidV7Ids, "r9", "batch_expired", "late")).unwrap();
        assert_eq!(line["custom_id"], "r9");
        assert!(line["response"].is_null());
        assert_eq!(line["error"]["code"], "batch_expired");
        assert!(line["id"].as_str().unwrap().starts_with("batch_req_"));
    }
}
