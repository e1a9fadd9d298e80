//! JSON request bodies read with precise 400s: malformed JSON, wrong types and missing fields name
//! the parameter (`messages[0].content`, `model`). Used by the HTTP extractors and by the batch
//! engine for the bodies of request lines.

use super::error::ApiError;
use crate::user_text::excerpt;
use serde::de::DeserializeOwned;
use serde_json::{Map, Value};

/// The typed body and the raw JSON object it was read from.
pub(crate) struct ParsedJson<T> {
    pub typed: T,
    pub raw: Map<String, Value>,
}

/// Parse `bytes` as a JSON object into `T`, naming the offending parameter on failure.
pub(crate) fn parse_json_body<T: DeserializeOwned>(bytes: &[u8]) -> Result<ParsedJson<T>, ApiError> {
    if bytes.iter().all(u8::is_ascii_whitespace) {
        return Err(ApiError::invalid_request(
            "We could not parse the JSON body of your request: the body is empty. Send a JSON object.",
        ));
    }
    let value: Value = serde_json::from_slice(bytes).map_err(|e| {
        ApiError::invalid_request(format!(
            "We could not parse the JSON body of your request: {e}. Send a valid JSON object."
        ))
        .with_code("invalid_json")
    })?;
    let Value::Object(raw) = value else {
        return Err(ApiError::invalid_request("The request body must be a JSON object.").with_code("invalid_json"));
    };
    parse_json_object(raw)
}

/// Read a JSON object into `T`, naming the offending parameter on failure.
pub(crate) fn parse_json_object<T: DeserializeOwned>(raw: Map<String, Value>) -> Result<ParsedJson<T>, ApiError> {
    let raw = Value::Object(raw);
    // Deserialized from a reference: a large body's JSON tree is not copied.
    let typed = serde_path_to_error::deserialize::<_, T>(&raw).map_err(|err| {
        let path = err.path().to_string();
        let inner = err.inner().to_string();
        if let Some(field) = missing_field(&inner) {
            let param = if path == "." {
                field.to_owned()
            } else {
                format!("{path}.{field}")
            };
            ApiError::invalid_request(format!("Missing required parameter: '{}'.", excerpt(&param)))
                .with_param(excerpt(&param))
                .with_code("missing_required_parameter")
        } else {
            let param = if path == "." {
                None
            } else {
                Some(excerpt(&path).into_owned())
            };
            let inner = bounded_serde_message(&inner);
            if let (Some(p), Some((expected, got))) = (&param, wrong_type(&inner)) {
                return ApiError::invalid_request(format!(
                    "Invalid type for '{p}': expected {expected}, but got {got} instead."
                ))
                .with_param(p.clone())
                .with_code("invalid_type");
            }
            let message = match &param {
                Some(p) => format!("Invalid value for '{p}': {inner}."),
                None => format!("Invalid request body: {inner}."),
            };
            let error = ApiError::invalid_request(message).with_code("invalid_value");
            match param {
                Some(p) => error.with_param(p),
                None => error,
            }
        }
    })?;
    let Value::Object(raw) = raw else {
        return Err(ApiError::invalid_request("The request body must be a JSON object.").with_code("invalid_json"));
    };
    Ok(ParsedJson { typed, raw })
}

/// The most characters of a deserializer's message quoted (it lists expected values, which may be many).
const MAX_SERDE_MESSAGE_CHARS: usize = 512;

/// A deserializer's message with every quoted client value (`string "…"`, `` `…` ``) cut to a short
/// prefix, and the whole bounded: serde quotes what it could not accept, whatever its size.
pub(crate) fn bounded_serde_message(message: &str) -> String {
    let mut out = String::with_capacity(message.len().min(MAX_SERDE_MESSAGE_CHARS + 16));
    let mut chars = message.char_indices();
    while let Some((_, quote)) = chars.next() {
        out.push(quote);
        if quote != '"' && quote != '`' {
            continue;
        }
        // The quoted value runs to the matching quote; inside `"…"`, `\"` does not end it.
        let start = chars.clone().next().map_or(message.len(), |(i, _)| i);
        let mut end = message.len();
        let mut escaped = false;
        for (i, c) in chars.by_ref() {
            if c == quote && !escaped {
                end = i;
                break;
            }
            escaped = quote == '"' && c == '\\' && !escaped;
        }
        out.push_str(&excerpt(&message[start..end]));
        if end < message.len() {
            out.push(quote);
        }
    }
    match out.char_indices().nth(MAX_SERDE_MESSAGE_CHARS) {
        None => out,
        Some((cut, _)) => format!("{}…", &out[..cut]),
    }
}

/// What was expected and what came, in JSON words, from serde's
/// "invalid type: floating point `1.5`, expected i64" (the value itself is not repeated).
fn wrong_type(message: &str) -> Option<(&'static str, &'static str)> {
    let (got, expected) = message.strip_prefix("invalid type: ")?.rsplit_once(", expected ")?;
    let got = [
        ("floating point", "a decimal number"),
        ("integer", "an integer"),
        ("string", "a string"),
        ("boolean", "a boolean"),
        ("map", "an object"),
        ("sequence", "an array"),
        ("unit", "null"),
        ("null", "null"),
    ]
    .into_iter()
    .find_map(|(prefix, words)| got.starts_with(prefix).then_some(words))?;
    let expected = match expected {
        "i8" | "i16" | "i32" | "i64" | "u8" | "u16" | "u32" | "u64" | "usize" => "an integer",
        "f32" | "f64" => "a number",
        "a string" | "string" => "a string",
        "a boolean" | "bool" => "a boolean",
        "a sequence" => "an array",
        "a map" => "an object",
        other if other.starts_with("struct ") => "an object",
        _ => return None,
    };
    Some((expected, got))
}

/// `x` from serde's "missing field `x`".
fn missing_field(message: &str) -> Option<&str> {
    let rest = message.strip_prefix("missing field `")?;
    rest.split('`').next()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::openai::chat::ChatCompletionRequest;
    use serde_json::json;

    fn error_of(body: &str) -> ApiError {
        match parse_json_body::<ChatCompletionRequest>(body.as_bytes()) {
            Ok(_) => panic!("{body} should fail"),
            Err(err) => err,
        }
    }

    #[test]
    fn missing_fields_are_named() {
        let err = error_of(r#"{"model": "dummy"}"#);
        assert_eq!(err.param.as_deref(), Some("messages"));
        assert_eq!(err.code.as_deref(), Some("missing_required_parameter"));
        let err = error_of(r#"{"messages": []}"#);
        assert_eq!(err.param.as_deref(), Some("model"));
    }

    #[test]
    fn wrong_types_name_the_path() {
        let err = error_of(r#"{"model": "dummy", "messages": [{"role": "user", "content": 5}]}"#);
        assert!(err.param.as_deref().unwrap().starts_with("messages[0]"), "{err:?}");
        let err = error_of(r#"{"model": "dummy", "messages": [], "temperature": "hot"}"#);
        assert_eq!(err.param.as_deref(), Some("temperature"));
    }

    #[test]
    fn wrong_json_types_are_invalid_type_naming_the_field_without_echoing_it() {
        for (body, param, words) in [
            (
                r#"{"model": "m", "messages": [], "seed": 1.5}"#,
                "seed",
                "expected an integer, but got a decimal number",
            ),
            (
                r#"{"model": "m", "messages": [], "seed": "42"}"#,
                "seed",
                "expected an integer, but got a string",
            ),
            (
                r#"{"model": "m", "messages": [], "n": true}"#,
                "n",
                "expected an integer, but got a boolean",
            ),
            (
                r#"{"model": "m", "messages": [], "max_tokens": [1]}"#,
                "max_tokens",
                "expected an integer, but got an array",
            ),
            (
                r#"{"model": "m", "messages": [], "temperature": "hot"}"#,
                "temperature",
                "expected a number, but got a string",
            ),
            (
                r#"{"model": "m", "messages": [], "metadata": {"k": 5}}"#,
                "metadata.k",
                "expected a string, but got an integer",
            ),
        ] {
            let err = error_of(body);
            assert_eq!(err.param.as_deref(), Some(param), "{body}");
            assert_eq!(err.code.as_deref(), Some("invalid_type"), "{body}");
            assert!(err.message.contains(words), "{body}: {}", err.message);
        }
        let long = format!(r#"{{"model": "m", "messages": [], "seed": "{}"}}"#, "9".repeat(10_000));
        assert!(error_of(&long).message.len() < 200);
    }

    #[test]
    fn malformed_or_non_object_json_is_a_400() {
        for body in ["{", "", "[1]", "null"] {
            assert_eq!(error_of(body).status, http::StatusCode::BAD_REQUEST, "{body}");
        }
    }

    #[test]
    fn oversized_values_are_quoted_short() {
        let huge = "x".repeat(1_000_000);
        let bodies = [
            json!({"model": "dummy", "messages": [], "temperature": huge}),
            json!({"model": "dummy", "messages": [{"role": huge, "content": "hi"}]}),
            json!({"model": huge.clone(), "messages": "no"}),
        ];
        for body in bodies {
            let err = error_of(&body.to_string());
            assert!(err.message.len() < 1024, "{}", err.message.len());
            assert!(err.param.is_some(), "{err:?}");
        }
    }

    #[test]
    fn serde_messages_keep_short_quotes_and_cut_long_ones() {
        assert_eq!(
            bounded_serde_message("unknown variant `x`, expected `a` or `b`"),
            "unknown variant `x`, expected `a` or `b`"
        );
        let long = format!(
            "invalid type: string \"{}\\\"{}\", expected f64",
            "a".repeat(100),
            "b".repeat(100)
        );
        let bounded = bounded_serde_message(&long);
        assert!(bounded.starts_with("invalid type: string \"aaaa"), "{bounded}");
        assert!(bounded.ends_with("\", expected f64"), "{bounded}");
        assert!(bounded.len() < 150, "{bounded}");
        assert!(bounded_serde_message(&"`".repeat(10_000)).chars().count() <= 513);
    }

    #[test]
    fn raw_body_keeps_unknown_fields() {
        let body =
            parse_json_body::<ChatCompletionRequest>(br#"{"model": "m", "messages": [], "logit_bias": {"1": 2}}"#)
                .unwrap();
        assert!(body.raw.contains_key("logit_bias"));
    }
}
