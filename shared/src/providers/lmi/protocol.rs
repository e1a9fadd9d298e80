//! LMI's vocabulary, in one place: generation-parameter names, finish reasons, and how a container
//! reports errors. The LMI provider, the SageMaker adapter and the inbound LMI API all read it here.

use crate::model::FinishReason;
use crate::providers::http_upstream::upstream_error_message;
use serde_json::Value;

/// LMI generation parameters the neutral request does not model, passed through as sent: the
/// common ones (`top_k`, `repetition_penalty`) and those of the lmi-dist, vLLM and TensorRT-LLM
/// backends.
pub(crate) const PASS_THROUGH_PARAMETERS: [&str; 17] = [
    "top_k",
    "repetition_penalty",
    "typical_p",
    "truncate",
    "ignore_eos_token",
    "min_p",
    "best_of",
    "num_beams",
    "length_penalty",
    "early_stopping",
    "stop_token_ids",
    "include_stop_str_in_output",
    "prompt_logprobs",
    "skip_special_tokens",
    "spaces_between_special_tokens",
    "min_length",
    "bad_sequences",
];

/// LMI generation parameters with a meaning the gateway models (sampling, token cap, stops, the
/// shape of the answer).
pub(crate) const MODELLED_PARAMETERS: [&str; 14] = [
    "do_sample",
    "seed",
    "temperature",
    "top_p",
    "max_new_tokens",
    "details",
    "return_full_text",
    "stop_sequences",
    "decoder_input_details",
    "presence_penalty",
    "frequency_penalty",
    "n",
    "logprobs",
    "stop",
];

/// Modelled LMI parameters that an OpenAI client may still send to an LMI model as its own fields
/// (the neutral request has no place for them): they go into `parameters` as sent.
pub(crate) const OPENAI_FORWARDED_MODELLED_PARAMETERS: [&str; 3] =
    ["do_sample", "return_full_text", "decoder_input_details"];

/// A field an OpenAI client sent that an LMI prompt schema forwards into `parameters`.
pub(crate) fn is_forwarded_parameter(name: &str) -> bool {
    PASS_THROUGH_PARAMETERS.contains(&name) || OPENAI_FORWARDED_MODELLED_PARAMETERS.contains(&name)
}

/// One of LMI's generation parameters (modelled or passed through).
pub(crate) fn is_generation_parameter(name: &str) -> bool {
    PASS_THROUGH_PARAMETERS.contains(&name) || MODELLED_PARAMETERS.contains(&name)
}

pub(crate) use crate::ports::lmi_transport::MODEL_ERROR_STATUS;

/// LMI's finish reason (also the OpenAI names its chat schema uses) as the gateway's. No reason is
/// a finished answer; `error` never gets here (it is an error).
pub(crate) fn finish_reason_from_lmi(reason: Option<&str>) -> FinishReason {
    match reason {
        Some("length") => FinishReason::Length,
        Some("stop_sequence") => FinishReason::StopSequence,
        Some("eos_token" | "stop") | None => FinishReason::Stop,
        Some("tool_calls" | "function_call") => FinishReason::ToolCall,
        Some("content_filter") => FinishReason::ContentFilter,
        Some(_) => FinishReason::Unknown,
    }
}

/// LMI's name for why generation stopped.
pub(crate) fn finish_reason_to_lmi(reason: Option<FinishReason>) -> &'static str {
    match reason {
        Some(FinishReason::Length) => "length",
        Some(FinishReason::StopSequence) => "stop_sequence",
        Some(FinishReason::Stop | FinishReason::ToolCall | FinishReason::ContentFilter | FinishReason::Unknown)
        | None => "eos_token",
    }
}

/// An error LMI reported in a body it answered (`{"error": …, "code"?}`), on a 200 or in a stream.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct ReportedError {
    /// `code` when it is an HTTP error status, else [`MODEL_ERROR_STATUS`].
    pub status: u16,
    pub message: String,
}

/// The error a body reports, if it is an error object (a non-null `error`).
pub(crate) fn reported_error(body: &Value) -> Option<ReportedError> {
    body.get("error").filter(|e| !e.is_null())?;
    let message = upstream_error_message(body).unwrap_or_else(|| "the model reported an error".to_owned());
    let status = body
        .get("code")
        .and_then(Value::as_u64)
        .and_then(|code| u16::try_from(code).ok())
        .filter(|code| (400..600).contains(code))
        .unwrap_or(MODEL_ERROR_STATUS);
    Some(ReportedError { status, message })
}

/// The token id LMI gives the token of a generation that failed.
pub(crate) const ERROR_TOKEN_ID: i64 = -1;

/// A rolling-batch / TGI line (or answer, or the first element of a list) that says generation
/// failed: a token with id −1, or `details.finish_reason` (also spelled `finish reason`) `error`.
pub(crate) fn is_error_line(value: &Value) -> bool {
    let line = match value {
        Value::Array(items) => match items.first() {
            Some(first) => first,
            None => return false,
        },
        other => other,
    };
    let error_token = line
        .get("token")
        .and_then(|token| token.get("id"))
        .and_then(Value::as_i64)
        == Some(ERROR_TOKEN_ID);
    let details = line.get("details");
    let error_finish = ["finish_reason", "finish reason"]
        .iter()
        .any(|key| details.and_then(|d| d.get(*key)).and_then(Value::as_str) == Some("error"));
    error_token || error_finish
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn finish_reasons_map_both_ways() {
        assert_eq!(finish_reason_from_lmi(Some("eos_token")), FinishReason::Stop);
        assert_eq!(
            finish_reason_from_lmi(Some("stop_sequence")),
            FinishReason::StopSequence
        );
        assert_eq!(finish_reason_from_lmi(Some("length")), FinishReason::Length);
        assert_eq!(finish_reason_from_lmi(Some("tool_calls")), FinishReason::ToolCall);
        assert_eq!(finish_reason_from_lmi(None), FinishReason::Stop);
        assert_eq!(finish_reason_from_lmi(Some("odd")), FinishReason::Unknown);
        assert_eq!(finish_reason_to_lmi(Some(FinishReason::Stop)), "eos_token");
        assert_eq!(finish_reason_to_lmi(Some(FinishReason::Length)), "length");
        assert_eq!(finish_reason_to_lmi(Some(FinishReason::StopSequence)), "stop_sequence");
        assert_eq!(finish_reason_to_lmi(None), "eos_token");
    }

    #[test]
    fn reported_errors_keep_an_error_status_or_default_to_424() {
        let reported = reported_error(&json!({"error": "boom", "code": 400}));
        assert_eq!(
            reported,
            Some(ReportedError {
                status: 400,
                message: "boom".to_owned()
            })
        );
        let reported = reported_error(&json!({"error": "boom", "code": 7}));
        assert_eq!(reported.map(|r| r.status), Some(MODEL_ERROR_STATUS));
        assert_eq!(reported_error(&json!({"error": null, "generated_text": "x"})), None);
    }

    #[test]
    fn error_token_lines_are_recognised() {
        let token = json!({"token": {"id": -1, "text": ""}, "generated_text": ""});
        assert!(is_error_line(&token));
        assert!(is_error_line(&json!([{"details": {"finish reason": "error"}}])));
        assert!(!is_error_line(&json!({"token": {"id": 5, "text": "a"}})));
        assert!(!is_error_line(
            &json!({"generated_text": "a", "details": {"finish_reason": "length"}})
        ));
    }

    #[test]
    fn parameter_lists_do_not_overlap() {
        assert!(PASS_THROUGH_PARAMETERS.iter().all(|p| !MODELLED_PARAMETERS.contains(p)));
        assert!(OPENAI_FORWARDED_MODELLED_PARAMETERS
            .iter()
            .all(|p| MODELLED_PARAMETERS.contains(p)));
        assert!(is_forwarded_parameter("do_sample") && !is_forwarded_parameter("temperature"));
        assert!(is_generation_parameter("temperature") && !is_generation_parameter("model"));
    }
}
