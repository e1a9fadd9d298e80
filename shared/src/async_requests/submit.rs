//! `POST /async_predict`'s body (Baseten's shape), checked field by field before anything is
//! stored: every refusal is a 400 naming the field.

use super::AsyncError;
use crate::backoff::Backoff;
use crate::ports::Priority;
use crate::user_text::excerpt;
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};
use std::time::Duration;

/// The longest a request may wait in the queue (Baseten: 72 h).
pub(crate) const MAX_TIME_IN_QUEUE_S: u64 = 259_200;
/// The shortest wait a caller may ask for.
pub(crate) const MIN_TIME_IN_QUEUE_S: u64 = 10;
/// Baseten's default wait.
pub(crate) const DEFAULT_TIME_IN_QUEUE_S: u64 = 600;

const FIELDS: [&str; 6] = [
    "model_input",
    "webhook_endpoint",
    "priority",
    "max_time_in_queue_seconds",
    "inference_retry_config",
    "endpoint",
];

/// `POST /async_predict`'s body as the API document describes it; [`parse_submission`] reads the
/// same fields (`FIELDS`) with the same bounds, naming the field it refuses.
#[derive(Debug, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
#[schema(as = AsyncPredictRequest, example = json!({"model_input": {"model": "dummy", "messages": [{"role": "user", "content": "Hello"}]}}))]
#[allow(dead_code)]
pub(crate) struct AsyncPredictDoc {
    /// The request body of `endpoint` (with `model`, or `function_name`/`model_name` for
    /// `/inference`).
    #[schema(value_type = Object)]
    model_input: Map<String, Value>,
    /// Which API runs `model_input` (default `/v1/chat/completions`).
    endpoint: Option<AsyncEndpoint>,
    /// Where the result is posted when the request ends.
    webhook_endpoint: Option<String>,
    /// 0 is served first (default 1).
    #[schema(minimum = 0, maximum = 2)]
    priority: Option<u8>,
    /// How long the request may wait before it runs (default 600).
    #[schema(minimum = 10, maximum = 259200)]
    max_time_in_queue_seconds: Option<u64>,
    inference_retry_config: Option<RetryConfigDoc>,
}

/// `inference_retry_config`: attempts in all and the backoff between them.
#[derive(Debug, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
#[schema(as = InferenceRetryConfig)]
#[allow(dead_code)]
pub(crate) struct RetryConfigDoc {
    #[schema(minimum = 1, maximum = 10)]
    max_attempts: Option<u32>,
    #[schema(minimum = 0, maximum = 10000)]
    initial_delay_ms: Option<u64>,
    #[schema(minimum = 0, maximum = 60000)]
    max_delay_ms: Option<u64>,
}

/// Which Nimbus API runs `model_input`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
pub enum AsyncEndpoint {
    #[serde(rename = "/v1/chat/completions")]
    ChatCompletions,
    #[serde(rename = "/v1/embeddings")]
    Embeddings,
    #[serde(rename = "/inference")]
    Inference,
}

impl AsyncEndpoint {
    fn parse(text: &str) -> Option<Self> {
        match text.trim_end_matches('/') {
            "/v1/chat/completions" | "/chat/completions" => Some(Self::ChatCompletions),
            "/v1/embeddings" | "/embeddings" => Some(Self::Embeddings),
            "/inference" => Some(Self::Inference),
            _ => None,
        }
    }
}

/// `inference_retry_config`: attempts in all, and the exponential backoff between them.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct RetryConfig {
    pub max_attempts: u32,
    pub initial_delay_ms: u64,
    pub max_delay_ms: u64,
}

impl Default for RetryConfig {
    fn default() -> Self {
        Self {
            max_attempts: 3,
            initial_delay_ms: 1000,
            max_delay_ms: 5000,
        }
    }
}

impl RetryConfig {
    /// The wait before the retry that follows failed attempt `attempt` (1-based): the initial
    /// delay doubled per attempt, capped at `max_delay_ms`.
    pub(crate) fn delay_after(&self, attempt: u32) -> u64 {
        let backoff = Backoff {
            first: Duration::from_millis(self.initial_delay_ms),
            cap: Duration::from_millis(self.max_delay_ms),
        };
        u64::try_from(backoff.delay(attempt.saturating_sub(1)).as_millis()).unwrap_or(u64::MAX)
    }
}

/// A checked submission (the webhook URL is checked by the service, against its URL policy).
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Submission {
    pub endpoint: AsyncEndpoint,
    /// What runs: the chat/embeddings body (with `model`) or the `/inference` body.
    pub model_input: Map<String, Value>,
    /// The model (or function) the request is for: Baseten's `model_id`.
    pub model_id: String,
    pub webhook_endpoint: Option<String>,
    pub priority: Priority,
    pub max_time_in_queue_s: u64,
    pub retry: RetryConfig,
}

/// Check `body`; `path_model` is the model of a per-model URL (`/models/{model}/…`).
pub(crate) fn parse_submission(
    mut body: Map<String, Value>,
    path_model: Option<&str>,
) -> Result<Submission, AsyncError> {
    if let Some(unknown) = body.keys().find(|key| !FIELDS.contains(&key.as_str())) {
        return Err(AsyncError::invalid(
            unknown.clone(),
            format!("Unknown field `{}`; accepted: {}.", excerpt(unknown), FIELDS.join(", ")),
        ));
    }
    let endpoint = match body.remove("endpoint") {
        None | Some(Value::Null) => AsyncEndpoint::ChatCompletions,
        Some(Value::String(text)) => AsyncEndpoint::parse(&text).ok_or_else(|| {
            AsyncError::invalid(
                "endpoint",
                format!(
                    "`endpoint` must be \"/v1/chat/completions\", \"/v1/embeddings\" or \"/inference\", not `{}`.",
                    excerpt(&text)
                ),
            )
        })?,
        Some(_) => return Err(AsyncError::invalid("endpoint", "`endpoint` must be a string.")),
    };
    let mut model_input = match body.remove("model_input") {
        Some(Value::Object(map)) => map,
        None | Some(Value::Null) => {
            return Err(AsyncError::invalid(
                "model_input",
                "`model_input` is required: the request body of the endpoint to run.",
            ))
        }
        Some(_) => {
            return Err(AsyncError::invalid(
                "model_input",
                "`model_input` must be a JSON object.",
            ))
        }
    };
    if let Some(stream) = model_input.get("stream") {
        if stream.as_bool() == Some(true) {
            return Err(AsyncError::invalid(
                "model_input.stream",
                "Async requests cannot stream: remove `stream` from `model_input` (the result is delivered whole).",
            ));
        }
    }
    let model_id = target_of(endpoint, &mut model_input, path_model)?;
    let webhook_endpoint = match body.remove("webhook_endpoint") {
        None | Some(Value::Null) => None,
        Some(Value::String(url)) if url.trim().is_empty() => None,
        Some(Value::String(url)) => Some(url),
        Some(_) => {
            return Err(AsyncError::invalid(
                "webhook_endpoint",
                "`webhook_endpoint` must be a URL string.",
            ))
        }
    };
    let priority = match body.remove("priority") {
        None | Some(Value::Null) => Priority::P1,
        Some(value) => value
            .as_u64()
            .and_then(|level| u8::try_from(level).ok())
            .and_then(Priority::from_level)
            .ok_or_else(|| AsyncError::invalid("priority", "`priority` must be 0, 1 or 2 (0 is served first)."))?,
    };
    let max_time_in_queue_s = match body.remove("max_time_in_queue_seconds") {
        None | Some(Value::Null) => DEFAULT_TIME_IN_QUEUE_S,
        Some(value) => in_range(
            &value,
            "max_time_in_queue_seconds",
            MIN_TIME_IN_QUEUE_S,
            MAX_TIME_IN_QUEUE_S,
        )?,
    };
    let retry = match body.remove("inference_retry_config") {
        None | Some(Value::Null) => RetryConfig::default(),
        Some(Value::Object(config)) => retry_config(config)?,
        Some(_) => {
            return Err(AsyncError::invalid(
                "inference_retry_config",
                "`inference_retry_config` must be an object.",
            ))
        }
    };
    Ok(Submission {
        endpoint,
        model_input,
        model_id,
        webhook_endpoint,
        priority,
        max_time_in_queue_s,
        retry,
    })
}

fn retry_config(mut config: Map<String, Value>) -> Result<RetryConfig, AsyncError> {
    const KNOWN: [&str; 3] = ["max_attempts", "initial_delay_ms", "max_delay_ms"];
    if let Some(unknown) = config.keys().find(|key| !KNOWN.contains(&key.as_str())) {
        let field = format!("inference_retry_config.{}", excerpt(unknown));
        return Err(AsyncError::invalid(
            field.clone(),
            format!("Unknown field `{field}`; accepted: {}.", KNOWN.join(", ")),
        ));
    }
    let defaults = RetryConfig::default();
    let mut field = |name: &str, min: u64, max: u64, default: u64| match config.remove(name) {
        None | Some(Value::Null) => Ok(default),
        Some(value) => in_range(&value, &format!("inference_retry_config.{name}"), min, max),
    };
    let max_attempts = field("max_attempts", 1, 10, u64::from(defaults.max_attempts))?;
    let initial_delay_ms = field("initial_delay_ms", 0, 10_000, defaults.initial_delay_ms)?;
    let max_delay_ms = field("max_delay_ms", 0, 60_000, defaults.max_delay_ms)?;
    Ok(RetryConfig {
        max_attempts: u32::try_from(max_attempts).unwrap_or(1),
        initial_delay_ms,
        max_delay_ms,
    })
}

fn in_range(value: &Value, field: &str, min: u64, max: u64) -> Result<u64, AsyncError> {
    value
        .as_u64()
        .filter(|n| (min..=max).contains(n))
        .ok_or_else(|| AsyncError::invalid(field, format!("`{field}` must be an integer from {min} to {max}.")))
}

/// The model (or function) `model_input` targets, with the path's model put in place.
fn target_of(
    endpoint: AsyncEndpoint,
    model_input: &mut Map<String, Value>,
    path_model: Option<&str>,
) -> Result<String, AsyncError> {
    let key = match endpoint {
        AsyncEndpoint::Inference => {
            if let Some(Value::String(function)) = model_input.get("function_name") {
                if path_model.is_some() {
                    return Err(AsyncError::invalid(
                        "model_input.function_name",
                        "A per-model URL runs its model: leave `function_name` out of `model_input`.",
                    ));
                }
                return Ok(function.clone());
            }
            "model_name"
        }
        AsyncEndpoint::ChatCompletions | AsyncEndpoint::Embeddings => "model",
    };
    let field = format!("model_input.{key}");
    match (model_input.get(key), path_model) {
        (Some(Value::String(model)), Some(path)) if model != path => Err(AsyncError::invalid(
            field,
            format!(
                "`{key}` in `model_input` (`{}`) differs from the model in the URL (`{}`).",
                excerpt(model),
                excerpt(path)
            ),
        )),
        (Some(Value::String(model)), _) => Ok(model.clone()),
        (None | Some(Value::Null), Some(path)) => {
            model_input.insert(key.to_owned(), Value::String(path.to_owned()));
            Ok(path.to_owned())
        }
        (None | Some(Value::Null), None) => Err(AsyncError::invalid(
            field,
            format!("`model_input.{key}` is required (or call a per-model URL, `/models/{{model}}/async_predict`)."),
        )),
        (Some(_), _) => Err(AsyncError::invalid(
            field,
            format!("`model_input.{key}` must be a string."),
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn parse(body: Value, path: Option<&str>) -> Result<Submission, AsyncError> {
        let Value::Object(map) = body else { unreachable!() };
        parse_submission(map, path)
    }

    fn field_of(body: Value) -> String {
        parse(body, None).unwrap_err().field().unwrap().to_owned()
    }

    /// The documented body (`AsyncPredictDoc`) has the parser's fields and bounds: each bound the
    /// document gives is accepted, one past it is refused naming the field, and the parser takes no
    /// field the document lacks.
    #[test]
    fn the_documented_body_is_the_one_the_parser_reads() {
        let schema_of =
            |schema: utoipa::openapi::RefOr<utoipa::openapi::schema::Schema>| serde_json::to_value(schema).unwrap();
        let body = schema_of(<AsyncPredictDoc as utoipa::PartialSchema>::schema());
        let retry = schema_of(<RetryConfigDoc as utoipa::PartialSchema>::schema());
        let documented: Vec<&str> = body["properties"]
            .as_object()
            .unwrap()
            .keys()
            .map(String::as_str)
            .collect();
        assert_eq!(documented.len(), FIELDS.len());
        assert!(FIELDS.iter().all(|field| documented.contains(field)), "{documented:?}");
        let input = json!({"model": "m", "messages": []});
        let bounded = [(&body, None), (&retry, Some("inference_retry_config"))];
        let mut checked = 0;
        for (schema, parent) in bounded {
            for (name, property) in schema["properties"].as_object().unwrap() {
                let (Some(min), Some(max)) = (property["minimum"].as_i64(), property["maximum"].as_i64()) else {
                    continue;
                };
                let body_with = |value: i64| match parent {
                    None => json!({"model_input": input, name.as_str(): value}),
                    Some(parent) => json!({"model_input": input, parent: {name.as_str(): value}}),
                };
                let field = parent.map_or_else(|| name.clone(), |parent| format!("{parent}.{name}"));
                for inside in [min, max] {
                    assert!(parse(body_with(inside), None).is_ok(), "{field} = {inside}");
                }
                for outside in [min - 1, max + 1] {
                    assert_eq!(field_of(body_with(outside)), field, "{field} = {outside}");
                }
                checked += 1;
            }
        }
        assert_eq!(
            checked, 5,
            "priority, max_time_in_queue_seconds and the three retry settings"
        );
    }

    #[test]
    fn defaults_follow_baseten() {
        let submission = parse(json!({"model_input": {"model": "m", "messages": []}}), None).unwrap();
        assert_eq!(submission.priority, Priority::P1);
        assert_eq!(submission.max_time_in_queue_s, 600);
        assert_eq!(submission.retry, RetryConfig::default());
        assert_eq!(submission.endpoint, AsyncEndpoint::ChatCompletions);
        assert_eq!(submission.model_id, "m");
        assert_eq!(submission.webhook_endpoint, None);
    }

    #[test]
    fn every_bad_field_is_named() {
        let input = json!({"model": "m", "messages": []});
        assert_eq!(field_of(json!({"model_input": input, "priority": 3})), "priority");
        assert_eq!(field_of(json!({"model_input": input, "priority": "0"})), "priority");
        assert_eq!(
            field_of(json!({"model_input": input, "max_time_in_queue_seconds": 9})),
            "max_time_in_queue_seconds"
        );
        assert_eq!(
            field_of(json!({"model_input": input, "max_time_in_queue_seconds": 259_201})),
            "max_time_in_queue_seconds"
        );
        assert_eq!(
            field_of(json!({"model_input": input, "inference_retry_config": {"max_attempts": 11}})),
            "inference_retry_config.max_attempts"
        );
        assert_eq!(
            field_of(json!({"model_input": input, "inference_retry_config": {"max_delay_ms": 60_001}})),
            "inference_retry_config.max_delay_ms"
        );
        assert_eq!(
            field_of(json!({"model_input": input, "inference_retry_config": {"initial_delay_ms": -1}})),
            "inference_retry_config.initial_delay_ms"
        );
        assert_eq!(
            field_of(json!({"model_input": input, "inference_retry_config": {"tries": 1}})),
            "inference_retry_config.tries"
        );
        assert_eq!(field_of(json!({"model_input": input, "colour": 1})), "colour");
        assert_eq!(
            field_of(json!({"model_input": input, "endpoint": "/v1/files"})),
            "endpoint"
        );
        assert_eq!(field_of(json!({})), "model_input");
        assert_eq!(field_of(json!({"model_input": [1]})), "model_input");
        assert_eq!(field_of(json!({"model_input": {"messages": []}})), "model_input.model");
        assert_eq!(
            field_of(json!({"model_input": {"model": "m", "stream": true}})),
            "model_input.stream"
        );
        assert_eq!(
            field_of(json!({"model_input": input, "webhook_endpoint": 5})),
            "webhook_endpoint"
        );
    }

    #[test]
    fn a_per_model_url_supplies_the_model() {
        let submission = parse(json!({"model_input": {"messages": []}}), Some("m")).unwrap();
        assert_eq!(submission.model_input["model"], "m");
        assert_eq!(submission.model_id, "m");
        let err = parse(json!({"model_input": {"model": "other"}}), Some("m")).unwrap_err();
        assert_eq!(err.field(), Some("model_input.model"));
        let inference = parse(
            json!({"endpoint": "/inference", "model_input": {"input": {"messages": []}}}),
            Some("m"),
        )
        .unwrap();
        assert_eq!(inference.model_input["model_name"], "m");
        let function = parse(
            json!({"endpoint": "/inference", "model_input": {"function_name": "f", "input": {}}}),
            None,
        )
        .unwrap();
        assert_eq!(function.model_id, "f");
    }

    #[test]
    fn backoff_doubles_up_to_the_cap() {
        let retry = RetryConfig::default();
        let delays: Vec<u64> = (1..=5).map(|attempt| retry.delay_after(attempt)).collect();
        assert_eq!(delays, vec![1000, 2000, 4000, 5000, 5000]);
        let zero = RetryConfig {
            max_attempts: 3,
            initial_delay_ms: 0,
            max_delay_ms: 0,
        };
        assert_eq!(zero.delay_after(3), 0);
    }
}
