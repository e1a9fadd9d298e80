//! The checks of a batch's parameters that need no stored state: endpoint, completion window,
//! metadata, output expiry. The server runs them before it creates a batch, and
//! `nimbus batch submit` runs the same ones before it uploads anything.

use super::{BatchEndpoint, BatchesError};
use crate::files::{check_expires_after, ExpiryField, FilesError};
use crate::openai::batches::CreateBatchRequest;
use crate::openai::metadata::{self, MetadataProblem, MAX_KEY_CHARS, MAX_PAIRS, MAX_VALUE_CHARS};
use crate::user_text::excerpt;
use std::collections::BTreeMap;

/// What the checks make of a create request's parameters.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CheckedCreate {
    pub endpoint: BatchEndpoint,
    pub window_s: i64,
    pub metadata: Option<BTreeMap<String, String>>,
}

/// Check a create request's parameters (not its input file). `allow_short_windows` also takes
/// `"<N>s"` windows (tests of expiry).
pub fn check_create_request(
    request: &CreateBatchRequest,
    allow_short_windows: bool,
) -> Result<CheckedCreate, BatchesError> {
    let endpoint = BatchEndpoint::parse(&request.endpoint).ok_or_else(|| {
        BatchesError::invalid(
            format!(
                "Invalid 'endpoint': '{}'. Supported: '/v1/chat/completions', '/v1/embeddings'.",
                excerpt(&request.endpoint)
            ),
            "endpoint",
            "invalid_value",
        )
    })?;
    let window_s = window_seconds(&request.completion_window, allow_short_windows)?;
    let metadata = check_metadata(request)?;
    if let Some(policy) = &request.output_expires_after {
        // The files' own rule, with the batch's parameter names and code.
        check_expires_after(policy, ExpiryField::BatchOutputExpiresAfter).map_err(|err| match err {
            FilesError::Invalid { message, param } => BatchesError::Invalid {
                message,
                param,
                code: Some("invalid_value"),
            },
            other => other.into(),
        })?;
    }
    Ok(CheckedCreate {
        endpoint,
        window_s,
        metadata,
    })
}

/// Completion windows: 24 hours (OpenAI's only one) up to 7 days.
const MIN_WINDOW_S: i64 = 24 * 3600;
const MAX_WINDOW_S: i64 = 7 * 24 * 3600;

/// `"24h"`..`"168h"`; with `allow_seconds`, also `"<N>s"` (tests of expiry).
fn window_seconds(window: &str, allow_seconds: bool) -> Result<i64, BatchesError> {
    let invalid = || {
        BatchesError::invalid(
            format!(
                "Invalid 'completion_window': '{}'. Supported: '24h', or up to '168h'.",
                excerpt(window)
            ),
            "completion_window",
            "invalid_value",
        )
    };
    let parse = |digits: &str| digits.parse::<i64>().ok().filter(|n| *n > 0);
    if let Some(hours) = window.strip_suffix('h').and_then(parse) {
        let seconds = hours.saturating_mul(3600);
        return if (MIN_WINDOW_S..=MAX_WINDOW_S).contains(&seconds) {
            Ok(seconds)
        } else {
            Err(invalid())
        };
    }
    match window.strip_suffix('s').and_then(parse) {
        Some(seconds) if allow_seconds && seconds <= MAX_WINDOW_S => Ok(seconds),
        _ => Err(invalid()),
    }
}

/// The metadata as string pairs within OpenAI's limits (`openai::metadata`), all problems coded
/// `invalid_value`.
fn check_metadata(request: &CreateBatchRequest) -> Result<Option<BTreeMap<String, String>>, BatchesError> {
    let Some(pairs) = &request.metadata else {
        return Ok(None);
    };
    let invalid = |message: String| BatchesError::invalid(message, metadata::PARAM, "invalid_value");
    metadata::check_pair_count(pairs.len()).map_err(|problem| invalid(metadata_message(&problem)))?;
    let mut strings = BTreeMap::new();
    for (key, value) in pairs {
        let Some(value) = value.as_str() else {
            return Err(invalid(format!(
                "Invalid 'metadata': the value of '{}' must be a string.",
                excerpt(key)
            )));
        };
        metadata::check_pair(key, value).map_err(|problem| invalid(metadata_message(&problem)))?;
        strings.insert(key.clone(), value.to_owned());
    }
    Ok(Some(strings))
}

/// The Batch API's wording of a metadata problem.
fn metadata_message(problem: &MetadataProblem<'_>) -> String {
    match problem {
        MetadataProblem::TooManyPairs { count } => {
            format!("Invalid 'metadata': at most {MAX_PAIRS} pairs, got {count}.")
        }
        MetadataProblem::KeyTooLong { key, .. } => format!(
            "Invalid 'metadata': key '{}' is longer than {MAX_KEY_CHARS} characters.",
            excerpt(key)
        ),
        MetadataProblem::ValueTooLong { key, .. } => format!(
            "Invalid 'metadata': the value of '{}' is longer than {MAX_VALUE_CHARS} characters.",
            excerpt(key)
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn completion_windows_are_24h_to_7_days_and_seconds_only_for_tests() {
        assert_eq!(window_seconds("24h", false).unwrap(), 86_400);
        assert_eq!(window_seconds("72h", false).unwrap(), 3 * 86_400);
        assert_eq!(window_seconds("168h", false).unwrap(), 7 * 86_400);
        for bad in ["23h", "169h", "0h", "-24h", "24", "1d", "", "5s", "h"] {
            let err = window_seconds(bad, false).unwrap_err();
            assert!(
                matches!(&err, BatchesError::Invalid { param: Some(p), .. } if p == "completion_window"),
                "{bad}: {err:?}"
            );
        }
        assert_eq!(window_seconds("5s", true).unwrap(), 5);
    }

    fn request(metadata: Vec<(String, String)>) -> CreateBatchRequest {
        CreateBatchRequest {
            input_file_id: "file-x".into(),
            endpoint: "/v1/chat/completions".into(),
            completion_window: "24h".into(),
            metadata: Some(metadata.into_iter().map(|(k, v)| (k, json!(v))).collect()),
            output_expires_after: None,
        }
    }

    #[test]
    fn metadata_limits_name_the_param() {
        let ok: Vec<_> = (0..16).map(|i| (format!("k{i}"), "v".repeat(512))).collect();
        assert!(check_metadata(&request(ok)).is_ok());
        let too_many: Vec<_> = (0..17).map(|i| (format!("k{i}"), "v".into())).collect();
        let long_key = vec![("k".repeat(65), "v".into())];
        let long_value = vec![("k".into(), "v".repeat(513))];
        let mut not_a_string = request(vec![]);
        not_a_string.metadata = Some([("k".to_owned(), json!(1))].into_iter().collect());
        for bad in [request(too_many), request(long_key), request(long_value), not_a_string] {
            let err = check_metadata(&bad).unwrap_err();
            assert!(matches!(&err, BatchesError::Invalid { param: Some(p), .. } if p == "metadata"));
        }
    }

    #[test]
    fn metadata_messages_keep_the_batch_wording() {
        let message = |pairs: Vec<(String, String)>| match check_metadata(&request(pairs)) {
            Err(BatchesError::Invalid { message, code, .. }) => {
                assert_eq!(code, Some("invalid_value"));
                message
            }
            other => panic!("expected a rejection, got {other:?}"),
        };
        let too_many: Vec<_> = (0..17).map(|i| (format!("k{i}"), "v".into())).collect();
        assert_eq!(message(too_many), "Invalid 'metadata': at most 16 pairs, got 17.");
        assert_eq!(
            message(vec![("k".repeat(65), "v".repeat(513))]),
            format!(
                "Invalid 'metadata': key '{}' is longer than 64 characters.",
                excerpt(&"k".repeat(65))
            )
        );
        assert_eq!(
            message(vec![("key".into(), "v".repeat(513))]),
            "Invalid 'metadata': the value of 'key' is longer than 512 characters."
        );
    }
}
