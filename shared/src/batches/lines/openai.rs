//! `/v1/batches` lines: one OpenAI request line through the same inference layer as the
//! synchronous API, and the output or error file line it becomes.

use super::{BatchLine, LineKind, LineResult, NativeAnswer, NativeRequest};
use crate::batches::input_validation::{validate_input, ChunkLimits, ValidationReport};
use crate::batches::{BatchEndpoint, BatchesError};
use crate::inference::{one_failure, InferenceError, InferenceService};
use crate::openai::batches::BatchUsage;
use crate::openai::chat::ChatCompletionRequest;
use crate::openai::credentials::take_credentials;
use crate::openai::embeddings::EmbeddingRequest;
use crate::openai::error::ApiError;
use crate::openai::json_body::parse_json_object;
use crate::openai::to_model::OpenAiChatRequest;
use crate::ports::{BlobStore, IdSource, StorageError};
use crate::providers::router::RoutingError;
use crate::providers::ProviderError;
use async_trait::async_trait;
use serde_json::{json, Map, Value};
use std::sync::Arc;

/// The lines of an OpenAI batch input file, for one endpoint.
pub(crate) struct OpenAiLines {
    pub inference: Arc<InferenceService>,
    pub ids: Arc<dyn IdSource>,
    pub endpoint: BatchEndpoint,
}

#[async_trait]
impl LineKind for OpenAiLines {
    async fn plan(
        &self,
        blobs: &dyn BlobStore,
        input: &str,
        limits: ChunkLimits,
    ) -> Result<ValidationReport, StorageError> {
        let stream = blobs.get_stream(input).await?;
        let model_exists = |model: &str| self.inference.can_route(model);
        validate_input(stream, self.endpoint, &model_exists, limits).await
    }

    fn slot_of(&self, stored: &[u8]) -> Option<String> {
        stored_model(stored)
    }

    async fn run(&self, line: BatchLine) -> Result<LineResult, BatchesError> {
        Ok(run_line(&self.inference, self.ids.as_ref(), self.endpoint, line).await)
    }

    fn not_run(&self, ids: &dyn IdSource, line: &BatchLine, code: &str, message: &str) -> String {
        not_run_line(ids, custom_id_of(line).unwrap_or_default(), code, message)
    }

    fn native_request(&self, line: &BatchLine) -> Option<NativeRequest> {
        custom_id_of(line)?;
        let mut body = line.json()?.get("body")?.as_object()?.clone();
        let model = model_of(line)?;
        let target = self.inference.native_batch(&model)?;
        let credentials = take_credentials(&mut body).ok()?;
        let body = match self.endpoint {
            BatchEndpoint::ChatCompletions => {
                let parsed = parse_json_object::<ChatCompletionRequest>(body).ok()?;
                let request = OpenAiChatRequest {
                    typed: parsed.typed,
                    raw: parsed.raw,
                };
                self.inference.native_chat_body(&request, &target).ok()?
            }
            BatchEndpoint::Embeddings => {
                let parsed = parse_json_object::<EmbeddingRequest>(body).ok()?;
                self.inference.native_embeddings_body(&parsed.typed, &target).ok()?
            }
        };
        Some(NativeRequest {
            model,
            provider: target.provider,
            url: self.endpoint.path(),
            body,
            credentials,
        })
    }

    async fn native_result(&self, line: BatchLine, answer: NativeAnswer) -> Result<LineResult, BatchesError> {
        let ids = self.ids.as_ref();
        let (custom_id, mut body) = match request_parts(line) {
            Ok(parts) => parts,
            Err(custom_id) => return Ok(unreadable_line(ids, custom_id)),
        };
        let mut usage = BatchUsage::default();
        let request_id = ids.prefixed("req_");
        let outcome = match answer {
            NativeAnswer::NotRun { code, message } => {
                return Ok(LineResult {
                    line: not_run_line(ids, &custom_id, &code, &message),
                    ok: false,
                    usage,
                })
            }
            NativeAnswer::Answered(value) => {
                native_answer(&self.inference, self.endpoint, &mut body, &value, &mut usage)
            }
            NativeAnswer::Failed(error) => {
                let model = body.get("model").and_then(Value::as_str).unwrap_or_default().to_owned();
                let provider = self
                    .inference
                    .native_batch(&model)
                    .map(|t| t.provider)
                    .unwrap_or_default();
                Err(LineError::Inference(one_failure(&model, &provider, error)))
            }
        };
        Ok(result_line(ids, &custom_id, &request_id, outcome, usage))
    }
}

/// The answer of a line from its provider batch's `response.body`, read as the synchronous call
/// reads the provider's answer.
fn native_answer(
    inference: &InferenceService,
    endpoint: BatchEndpoint,
    body: &mut Map<String, Value>,
    answer: &Value,
    usage: &mut BatchUsage,
) -> Result<Value, LineError> {
    take_credentials(body)?;
    let model = body.get("model").and_then(Value::as_str).unwrap_or_default().to_owned();
    let target = inference
        .native_batch(&model)
        .ok_or_else(|| InferenceError::from(RoutingError::ModelNotFound(model.clone())))?;
    let value = match endpoint {
        BatchEndpoint::ChatCompletions => {
            let parsed = parse_json_object::<ChatCompletionRequest>(std::mem::take(body))?;
            let request = OpenAiChatRequest {
                typed: parsed.typed,
                raw: parsed.raw,
            };
            let completion = inference.native_chat_completion(&request, &target, answer)?;
            usage.add(completion.usage.prompt_tokens, completion.usage.completion_tokens);
            serde_json::to_value(&completion)
        }
        BatchEndpoint::Embeddings => {
            let parsed = parse_json_object::<EmbeddingRequest>(std::mem::take(body))?;
            let response = inference.native_embedding_response(&parsed.typed, &target, answer)?;
            usage.add(response.usage.prompt_tokens, 0);
            response.to_json_value()
        }
    };
    value.map_err(|e| ApiError::internal(format!("could not encode the answer: {e}")).into())
}

/// The result of a line that cannot be read (validation let it through, so only an input
/// changed under the batch).
fn unreadable_line(ids: &dyn IdSource, custom_id: Option<String>) -> LineResult {
    let line = json!({
        "id": ids.prefixed("batch_req_"),
        "custom_id": custom_id,
        "response": null,
        "error": {"code": "invalid_request", "message": "This line is not a valid batch request."},
    });
    LineResult {
        line: line.to_string(),
        ok: false,
        usage: BatchUsage::default(),
    }
}

/// The output or error line of a line that was answered or failed.
fn result_line(
    ids: &dyn IdSource,
    custom_id: &str,
    request_id: &str,
    outcome: Result<Value, LineError>,
    usage: BatchUsage,
) -> LineResult {
    let (ok, response) = match outcome {
        Ok(body) => (
            true,
            json!({"status_code": 200, "request_id": request_id, "body": body}),
        ),
        Err(error) => (false, failed_response(error, request_id)),
    };
    let line = json!({
        "id": ids.prefixed("batch_req_"),
        "custom_id": custom_id,
        "response": response,
        "error": null,
    });
    LineResult {
        line: line.to_string(),
        ok,
        usage,
    }
}

/// `custom_id` and `body` of a request line (validated when the batch was created); else the
/// `custom_id` it has, if any.
fn request_parts(line: BatchLine) -> Result<(String, Map<String, Value>), Option<String>> {
    let custom_id = custom_id_of(&line).map(str::to_owned);
    let Some(Value::Object(mut request)) = line.into_json() else {
        return Err(custom_id);
    };
    match (custom_id, request.remove("body")) {
        (Some(custom_id), Some(Value::Object(body))) => Ok((custom_id, body)),
        (custom_id, _) => Err(custom_id),
    }
}

/// The `custom_id` of a request line, if it has one.
fn custom_id_of(line: &BatchLine) -> Option<&str> {
    line.json()?.get("custom_id")?.as_str()
}

/// The `custom_id` of a line of a provider batch's input file (as staged), if it has one.
pub(crate) fn staged_custom_id(text: &[u8]) -> Option<String> {
    #[derive(serde::Deserialize)]
    struct Id {
        custom_id: String,
    }
    serde_json::from_slice::<Id>(text).ok().map(|id| id.custom_id)
}

/// The `body.model` of a stored request line, if it has one: only that is read.
fn stored_model(stored: &[u8]) -> Option<String> {
    #[derive(serde::Deserialize)]
    struct Body {
        model: String,
    }
    #[derive(serde::Deserialize)]
    struct Line {
        body: Body,
    }
    serde_json::from_slice::<Line>(stored).ok().map(|line| line.body.model)
}

/// The `body.model` of a request line, if it has one.
fn model_of(line: &BatchLine) -> Option<String> {
    Some(line.json()?.get("body")?.get("model")?.as_str()?.to_owned())
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
    line: BatchLine,
) -> LineResult {
    let (custom_id, body) = match request_parts(line) {
        Ok(parts) => parts,
        Err(custom_id) => return unreadable_line(ids, custom_id),
    };
    let mut usage = BatchUsage::default();
    let request_id = ids.prefixed("req_");
    let outcome = call(inference, endpoint, body, &mut usage).await;
    result_line(ids, &custom_id, &request_id, outcome, usage)
}

/// Why a line got no answer: the gateway refused the request, or inference failed.
#[derive(Debug)]
enum LineError {
    Request(ApiError),
    Inference(InferenceError),
}

impl From<ApiError> for LineError {
    fn from(err: ApiError) -> Self {
        Self::Request(err)
    }
}

impl From<InferenceError> for LineError {
    fn from(err: InferenceError) -> Self {
        Self::Inference(err)
    }
}

/// The `response` of a failed line. When a provider answered with an HTTP error (the last one
/// tried, after retries and fallback), the line carries what that provider said: its status and
/// its error body; the gateway's own verdict (the envelope the synchronous API would answer, e.g.
/// code `provider_error`, "All providers ... failed: p (3 attempts): ...") goes next to it as
/// `gateway_error`. Any other failure (a timeout, a refused connection, a request the gateway
/// refused) has no provider status: the gateway's status and envelope.
fn failed_response(error: LineError, request_id: &str) -> Value {
    let provider_answer = match &error {
        LineError::Inference(InferenceError::Routing(routing)) => last_provider_answer(routing),
        _ => None,
    };
    let gateway = match error {
        LineError::Request(api) => api,
        LineError::Inference(inference) => ApiError::from(inference),
    };
    match provider_answer {
        Some((status, body)) => json!({
            "status_code": status,
            "request_id": request_id,
            "body": body,
            "gateway_error": gateway.envelope()["error"].take(),
        }),
        None => json!({
            "status_code": gateway.status.as_u16(),
            "request_id": request_id,
            "body": gateway.envelope(),
        }),
    }
}

/// The status and error body of the last provider tried, if it answered with an HTTP error. The
/// body is kept as sent when it is an OpenAI-style `{"error": {...}}` object, else the envelope is
/// built around the provider's message. A missing credential is the client's to fix: the gateway's.
fn last_provider_answer(routing: &RoutingError) -> Option<(u16, Value)> {
    let RoutingError::AllFailed { failures, .. } = routing else {
        return None;
    };
    if failures
        .iter()
        .any(|f| matches!(f.error, ProviderError::MissingCredential(_)))
    {
        return None;
    }
    let ProviderError::Http {
        status, message, body, ..
    } = &failures.last()?.error
    else {
        return None;
    };
    let body = match body {
        Some(body) if body.get("error").is_some_and(Value::is_object) => body.clone(),
        _ => {
            let kind = if *status >= 500 {
                "server_error"
            } else {
                "invalid_request_error"
            };
            json!({"error": {"message": message, "type": kind, "param": null, "code": null}})
        }
    };
    Some((*status, body))
}

async fn call(
    inference: &InferenceService,
    endpoint: BatchEndpoint,
    mut body: Map<String, Value>,
    usage: &mut BatchUsage,
) -> Result<Value, LineError> {
    let credentials = take_credentials(&mut body)?;
    let value = match endpoint {
        BatchEndpoint::ChatCompletions => {
            let parsed = parse_json_object::<ChatCompletionRequest>(body)?;
            let request = OpenAiChatRequest {
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
            response.to_json_value()
        }
    };
    value.map_err(|e| ApiError::internal(format!("could not encode the answer: {e}")).into())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ports::UuidV7Ids;
    use crate::providers::router::ProviderFailure;
    use std::time::Duration;

    #[test]
    fn request_line_fields_are_read_without_the_rest() {
        let read = BatchLine::read;
        let line = read(
            br#"{"custom_id": "r1", "method": "POST", "url": "/v1/embeddings", "body": {"model": "m", "input": "x"}}"#,
        );
        assert_eq!(custom_id_of(&line), Some("r1"));
        assert_eq!(model_of(&line).as_deref(), Some("m"));
        assert_eq!(
            stored_model(br#"{"custom_id": "r1", "body": {"model": "m", "input": "x"}}"#).as_deref(),
            Some("m")
        );
        let (id, body) = request_parts(line).unwrap();
        assert_eq!(id, "r1");
        assert_eq!(body["input"], "x");
        assert_eq!(custom_id_of(&read(b"not json")), None);
        assert!(request_parts(read(br#"{"custom_id": "r", "body": 5}"#)).is_err());
    }

    fn all_failed(errors: Vec<ProviderError>) -> LineError {
        let failures = errors
            .into_iter()
            .enumerate()
            .map(|(i, error)| ProviderFailure {
                provider: format!("p{i}"),
                attempts: 3,
                error,
            })
            .collect();
        LineError::Inference(InferenceError::Routing(RoutingError::AllFailed {
            model: "m".into(),
            failures,
        }))
    }

    fn http(status: u16, body: Option<Value>) -> ProviderError {
        ProviderError::Http {
            status,
            message: format!("upstream says {status}"),
            retry_after: None,
            body,
        }
    }

    fn timeout() -> ProviderError {
        ProviderError::Timeout {
            after: Duration::from_secs(1),
        }
    }

    #[test]
    fn a_provider_http_error_keeps_its_status_and_body_next_to_the_gateway_verdict() {
        let provider_body = json!({"error": {"message": "boom", "type": "server_error", "param": null,
                                             "code": "upstream_code", "extra": [1, 2]}});
        let response = failed_response(all_failed(vec![http(500, Some(provider_body.clone()))]), "req_1");
        assert_eq!(response["status_code"], 500);
        assert_eq!(response["request_id"], "req_1");
        assert_eq!(response["body"], provider_body, "the provider's body as sent");
        let gateway = &response["gateway_error"];
        assert_eq!(gateway["code"], "provider_error");
        assert_eq!(gateway["type"], "server_error");
        let message = gateway["message"].as_str().unwrap();
        assert!(message.contains("All providers for model `m` failed"), "{message}");
        assert!(
            message.contains("p0 (3 attempts)") && message.contains("upstream says 500"),
            "{message}"
        );
    }

    #[test]
    fn the_last_provider_tried_gives_the_status() {
        // Fallback: the first provider timed out, the last answered 429.
        let response = failed_response(all_failed(vec![timeout(), http(429, None)]), "r");
        assert_eq!(response["status_code"], 429);
        // A body that was not JSON: the envelope around the provider's message.
        assert_eq!(response["body"]["error"]["message"], "upstream says 429");
        assert_eq!(response["body"]["error"]["type"], "invalid_request_error");
        assert!(response["body"]["error"].as_object().unwrap().contains_key("code"));
        assert_eq!(response["gateway_error"]["code"], "provider_error");
        // JSON without an OpenAI `error` object is wrapped too, with the provider's message.
        let response = failed_response(all_failed(vec![http(503, Some(json!({"detail": "x"})))]), "r");
        assert_eq!(response["status_code"], 503);
        assert_eq!(response["body"]["error"]["message"], "upstream says 503");
        assert_eq!(response["body"]["error"]["type"], "server_error");
    }

    #[test]
    fn failures_without_a_provider_status_keep_the_gateway_status() {
        let response = failed_response(all_failed(vec![timeout()]), "r");
        assert_eq!(response["status_code"], 504);
        assert_eq!(response["body"]["error"]["code"], "provider_timeout");
        assert!(response.get("gateway_error").is_none());
        // The last provider could not be reached: no provider status, whatever came before.
        let refused = ProviderError::Connection("refused".into());
        let response = failed_response(all_failed(vec![http(500, None), refused]), "r");
        assert_eq!(response["status_code"], 502);
        assert_eq!(response["body"]["error"]["code"], "provider_error");
        // A missing credential is the client's to fix, whatever the providers answered.
        let missing = ProviderError::MissingCredential("key".into());
        let response = failed_response(all_failed(vec![missing, http(500, None)]), "r");
        assert_eq!(response["status_code"], 400);
        assert_eq!(response["body"]["error"]["code"], "missing_credential");
        // A request the gateway refused before any provider.
        let refused = LineError::Request(ApiError::invalid_request("bad").with_param("messages"));
        let response = failed_response(refused, "r");
        assert_eq!(response["status_code"], 400);
        assert_eq!(response["body"]["error"]["param"], "messages");
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
