//! The SageMaker runtime in front of the mock container: InvokeEndpoint answers the container's
//! bytes or SageMaker's error shapes (restJson1: the code in `x-amzn-errortype`, the fields in the
//! body), and InvokeEndpointWithResponseStream wraps the container's stream in AWS event-stream
//! frames, split at deterministic pseudo-random byte boundaries.

use super::model::{Failure, ModelOutput};
use aws_smithy_eventstream::frame::write_message_to;
use aws_smithy_types::event_stream::{Header, HeaderValue, Message};
use axum::body::{Body, Bytes};
use axum::http::{HeaderName, HeaderValue as HttpHeaderValue, StatusCode};
use axum::response::Response;
use serde_json::{json, Value};

const REQUEST_ID: &str = "00000000-0000-4000-8000-00000000a1a1";

fn response(status: StatusCode, headers: &[(&str, String)], body: impl Into<Body>) -> Response {
    let mut response = Response::new(body.into());
    *response.status_mut() = status;
    let target = response.headers_mut();
    for (name, value) in headers {
        if let (Ok(name), Ok(value)) = (
            HeaderName::from_bytes(name.as_bytes()),
            HttpHeaderValue::from_str(value),
        ) {
            target.insert(name, value);
        }
    }
    target.insert("x-amzn-requestid", HttpHeaderValue::from_static(REQUEST_ID));
    response
}

/// An error in SageMaker's restJson1 shape: the type in `x-amzn-errortype`, the fields as JSON.
fn error(status: StatusCode, error_type: &str, body: &Value) -> Response {
    let headers = [
        ("content-type", "application/json".to_owned()),
        ("x-amzn-errortype", error_type.to_owned()),
    ];
    response(status, &headers, body.to_string())
}

/// A `ValidationError` (400), as SageMaker answers for an unknown endpoint.
pub fn validation_error(message: &str) -> Response {
    error(StatusCode::BAD_REQUEST, "ValidationError", &json!({"message": message}))
}

/// SageMaker's answer to a container failure before any output.
fn failed(endpoint: &str, failure: Failure, status: u16, body: &Value) -> Response {
    match failure {
        Failure::Throttled => error(
            StatusCode::TOO_MANY_REQUESTS,
            "ThrottlingException",
            &json!({"message": "Rate exceeded"}),
        ),
        Failure::Unavailable => error(
            StatusCode::SERVICE_UNAVAILABLE,
            "ServiceUnavailable",
            &json!({"message": "The service is unavailable. Try again later."}),
        ),
        Failure::Rejected | Failure::Internal => {
            let original = body.to_string();
            let kind = if status < 500 { "client" } else { "server" };
            let model_error = json!({
                "ErrorCode": format!("{}_ERROR_FROM_MODEL", kind.to_uppercase()),
                "LogStreamArn": format!(
                    "arn:aws:logs:us-east-1:000000000000:log-group:/aws/sagemaker/Endpoints/{endpoint}"
                ),
                "Message": format!(
                    "Received {kind} error ({status}) from primary with message \"{original}\". \
                     See the endpoint's logs for more information."
                ),
                "OriginalMessage": original,
                "OriginalStatusCode": status
            });
            error(StatusCode::FAILED_DEPENDENCY, "ModelError", &model_error)
        }
    }
}

/// `POST /endpoints/{name}/invocations`.
pub fn invoke(endpoint: &str, output: ModelOutput) -> Response {
    match output {
        ModelOutput::Failed { failure, status, body } => failed(endpoint, failure, status, &body),
        ModelOutput::Document(document) => ok("application/json", document.to_string().into()),
        ModelOutput::Stream { format, lines, .. } => ok(format.content_type(), lines.concat().into()),
    }
}

fn ok(content_type: &str, body: Bytes) -> Response {
    let headers = [
        ("content-type", content_type.to_owned()),
        ("x-amzn-invoked-production-variant", "AllTraffic".to_owned()),
    ];
    response(StatusCode::OK, &headers, body)
}

/// `POST /endpoints/{name}/invocations-response-stream`.
pub fn invoke_stream(endpoint: &str, output: ModelOutput) -> Response {
    let (content_type, bytes, breaks) = match output {
        ModelOutput::Failed { failure, status, body } => return failed(endpoint, failure, status, &body),
        ModelOutput::Document(document) => ("application/json", document.to_string().into_bytes(), false),
        ModelOutput::Stream {
            format,
            lines,
            breaks_after_first,
        } => (format.content_type(), lines.concat().into_bytes(), breaks_after_first),
    };
    let mut parts = split_points(&bytes).map(|(start, end)| payload_part(&bytes[start..end]));
    let frames: Vec<Vec<u8>> = if breaks {
        parts.next().into_iter().chain([model_stream_error()]).collect()
    } else {
        parts.collect()
    };
    let headers = [
        ("content-type", "application/vnd.amazon.eventstream".to_owned()),
        ("x-amzn-sagemaker-content-type", content_type.to_owned()),
        ("x-amzn-invoked-production-variant", "AllTraffic".to_owned()),
    ];
    let body = Body::from_stream(futures::stream::iter(
        frames
            .into_iter()
            .map(|frame| Ok::<_, std::convert::Infallible>(Bytes::from(frame))),
    ));
    response(StatusCode::OK, &headers, body)
}

fn frame(headers: [(&'static str, &'static str); 3], payload: &[u8]) -> Vec<u8> {
    let message = headers.into_iter().fold(
        Message::new(Bytes::copy_from_slice(payload)),
        |message, (name, value)| message.add_header(Header::new(name, HeaderValue::String(value.into()))),
    );
    let mut buffer = Vec::with_capacity(payload.len() + 128);
    // Writing to a Vec cannot run out of room; a message too large for a frame would be a bug here.
    if let Err(error) = write_message_to(&message, &mut buffer) {
        eprintln!("nimbus-mock-lmi: could not encode an event-stream frame: {error}");
    }
    buffer
}

fn payload_part(bytes: &[u8]) -> Vec<u8> {
    frame(
        [
            (":message-type", "event"),
            (":event-type", "PayloadPart"),
            (":content-type", "application/octet-stream"),
        ],
        bytes,
    )
}

fn model_stream_error() -> Vec<u8> {
    let payload = json!({
        "Message": "LMI mock: the model's stream broke ([lmi-stream-error])",
        "ErrorCode": "StreamBroken"
    });
    frame(
        [
            (":message-type", "exception"),
            (":exception-type", "ModelStreamError"),
            (":content-type", "application/json"),
        ],
        payload.to_string().as_bytes(),
    )
}

/// Where the payload parts of `bytes` start and end: a deterministic mix (seeded by the bytes) of
/// cuts inside a line, cuts at a line's end, and parts that run over two lines.
pub fn split_points(bytes: &[u8]) -> impl Iterator<Item = (usize, usize)> + '_ {
    let mut state = bytes.iter().fold(0x9e37_79b9_7f4a_7c15_u64, |hash, byte| {
        (hash ^ u64::from(*byte)).wrapping_mul(0x0100_0000_01b3)
    }) | 1;
    let mut next_random = move || {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        state
    };
    let line_end_after = |position: usize| {
        bytes[position..]
            .iter()
            .position(|byte| *byte == b'\n')
            .map_or(bytes.len(), |offset| position + offset + 1)
    };
    let mut start = 0;
    std::iter::from_fn(move || {
        if start >= bytes.len() {
            return None;
        }
        let random = next_random();
        let end = match random % 4 {
            0 => line_end_after(line_end_after(start)),
            1 => line_end_after(start),
            _ => start + 1 + (random >> 8) as usize % 40,
        }
        .min(bytes.len());
        let part = (start, end);
        start = end;
        Some(part)
    })
}

#[cfg(test)]
mod tests {
    use super::split_points;

    #[test]
    fn parts_cover_the_bytes_and_split_lines_anywhere() {
        let text = "{\"token\": 1, \"text\": \"Hello\"}\n".repeat(12);
        let parts: Vec<(usize, usize)> = split_points(text.as_bytes()).collect();
        assert_eq!(parts.first().map(|p| p.0), Some(0));
        assert_eq!(parts.last().map(|p| p.1), Some(text.len()));
        assert!(parts.windows(2).all(|w| w[0].1 == w[1].0 && w[0].0 < w[0].1));
        let slices: Vec<&str> = parts.iter().map(|(s, e)| &text[*s..*e]).collect();
        assert!(
            slices.iter().any(|s| !s.ends_with('\n')),
            "some part ends inside a line"
        );
        assert!(
            slices.iter().any(|s| s.matches('\n').count() >= 2),
            "some part holds two lines"
        );
    }
}
