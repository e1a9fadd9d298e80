use super::*;
use aws_sdk_sagemakerruntime::error::ErrorMetadata;
use aws_sdk_sagemakerruntime::types::error::{
    InternalDependencyException, InternalFailure, InternalStreamFailure, ModelNotReadyException, ServiceUnavailable,
    ValidationError,
};
use aws_smithy_runtime_api::http::StatusCode;
use aws_smithy_types::body::SdkBody;
use serde_json::json;

const TIMEOUT: Duration = Duration::from_secs(7);

fn raw(status: u16) -> HttpResponse {
    HttpResponse::new(StatusCode::try_from(status).unwrap(), SdkBody::empty())
}

fn invoke_failure(err: InvokeEndpointError, status: u16) -> ProviderError {
    invoke_error(SdkError::service_error(err, raw(status)), TIMEOUT, Instant::now())
}

fn http_parts(err: ProviderError) -> (u16, String, Option<Value>) {
    match err {
        ProviderError::Http {
            status, message, body, ..
        } => (status, message, body),
        other => panic!("expected an HTTP error, got {other:?}"),
    }
}

fn model_error(status: Option<i32>, original: Option<&str>) -> ModelError {
    let mut builder = ModelError::builder()
        .message("Received client error (424) from primary with message \"...\". See the log stream.")
        .log_stream_arn("arn:aws:logs:us-east-1:123456789012:log-group:/aws/sagemaker/Endpoints/chat");
    builder = builder.set_original_status_code(status);
    builder = builder.set_original_message(original.map(str::to_owned));
    builder.build()
}

#[test]
fn a_model_error_keeps_the_containers_status_message_and_json_body() {
    let original = r#"{"error": "Prompt too long for the model", "code": 424}"#;
    let err = invoke_failure(
        InvokeEndpointError::ModelError(model_error(Some(424), Some(original))),
        424,
    );
    assert!(!err.is_retryable());
    let (status, message, body) = http_parts(err);
    assert_eq!(status, 424);
    assert_eq!(message, "Prompt too long for the model");
    assert_eq!(
        body,
        Some(json!({"error": "Prompt too long for the model", "code": 424}))
    );
}

#[test]
fn a_model_error_with_a_5xx_original_status_is_retryable() {
    let original = r#"{"message": "CUDA out of memory"}"#;
    let err = invoke_failure(
        InvokeEndpointError::ModelError(model_error(Some(500), Some(original))),
        424,
    );
    assert!(err.is_retryable());
    let (status, message, _) = http_parts(err);
    assert_eq!((status, message.as_str()), (500, "CUDA out of memory"));
}

#[test]
fn a_model_error_reads_openai_style_nested_messages() {
    let original = r#"{"error": {"message": "bad request", "type": "invalid_request_error"}}"#;
    let (status, message, _) = http_parts(invoke_failure(
        InvokeEndpointError::ModelError(model_error(Some(400), Some(original))),
        424,
    ));
    assert_eq!((status, message.as_str()), (400, "bad request"));
}

#[test]
fn a_model_error_with_a_text_body_keeps_the_text_and_no_body() {
    let (status, message, body) = http_parts(invoke_failure(
        InvokeEndpointError::ModelError(model_error(Some(503), Some("  upstream worker died\n"))),
        424,
    ));
    assert_eq!((status, message.as_str(), body), (503, "upstream worker died", None));
}

#[test]
fn a_model_error_without_original_details_is_a_424_with_sagemakers_message() {
    let (status, message, body) = http_parts(invoke_failure(
        InvokeEndpointError::ModelError(model_error(None, None)),
        424,
    ));
    assert_eq!(status, 424);
    assert!(message.starts_with("Received client error (424)"), "{message}");
    assert_eq!(body, None);
    // An original status that is no error status is not trusted either.
    let (status, _, _) = http_parts(invoke_failure(
        InvokeEndpointError::ModelError(model_error(Some(200), Some("{}"))),
        424,
    ));
    assert_eq!(status, 424);
}

#[test]
fn sagemakers_own_errors_have_the_status_they_stand_for() {
    let cases: Vec<(InvokeEndpointError, u16, u16, bool)> = vec![
        (
            InvokeEndpointError::ValidationError(
                ValidationError::builder()
                    .message("Received payload exceeds the limit")
                    .build(),
            ),
            400,
            400,
            false,
        ),
        (
            InvokeEndpointError::ModelNotReadyException(ModelNotReadyException::builder().message("not ready").build()),
            429,
            429,
            true,
        ),
        (
            InvokeEndpointError::ServiceUnavailable(ServiceUnavailable::builder().message("busy").build()),
            503,
            503,
            true,
        ),
        (
            InvokeEndpointError::InternalFailure(InternalFailure::builder().message("oops").build()),
            500,
            500,
            true,
        ),
        (
            InvokeEndpointError::InternalDependencyException(
                InternalDependencyException::builder().message("dependency").build(),
            ),
            530,
            530,
            true,
        ),
        (
            InvokeEndpointError::generic(
                ErrorMetadata::builder()
                    .code("ThrottlingException")
                    .message("Rate exceeded")
                    .build(),
            ),
            400,
            429,
            true,
        ),
        (
            InvokeEndpointError::generic(
                ErrorMetadata::builder()
                    .code("AccessDeniedException")
                    .message("not authorized to perform sagemaker:InvokeEndpoint")
                    .build(),
            ),
            403,
            403,
            false,
        ),
    ];
    for (err, raw_status, expected, retryable) in cases {
        let described = format!("{err:?}");
        let mapped = invoke_failure(err, raw_status);
        assert_eq!(mapped.is_retryable(), retryable, "{described}");
        let (status, message, _) = http_parts(mapped);
        assert_eq!(status, expected, "{described}");
        assert!(message.starts_with("SageMaker "), "{message}");
    }
}

#[test]
fn a_missing_endpoint_is_a_misconfiguration_not_the_clients_error() {
    for message in [
        "Endpoint chat-x of account 123456789012 not found.",
        "Could not find endpoint \"chat-x\".",
    ] {
        // As the SDK parses it: the message in the error's metadata too.
        let meta = ErrorMetadata::builder()
            .code("ValidationError")
            .message(message)
            .build();
        let err = InvokeEndpointError::ValidationError(ValidationError::builder().message(message).meta(meta).build());
        match invoke_failure(err, 400) {
            ProviderError::Misconfigured(text) => assert!(text.contains("chat-x"), "{text}"),
            other => panic!("{other:?}"),
        }
    }
}

#[test]
fn a_throttling_message_names_the_code_and_sagemakers_message() {
    let err = InvokeEndpointError::generic(
        ErrorMetadata::builder()
            .code("ThrottlingException")
            .message("Rate exceeded")
            .build(),
    );
    let (_, message, _) = http_parts(invoke_failure(err, 400));
    assert_eq!(message, "SageMaker ThrottlingException: Rate exceeded");
}

#[test]
fn stream_open_errors_map_like_invoke_errors() {
    let model = InvokeEndpointWithResponseStreamError::ModelError(model_error(
        Some(424),
        Some(r#"{"error": "bad input", "code": 424}"#),
    ));
    let (status, message, _) = http_parts(stream_open_error(
        SdkError::service_error(model, raw(424)),
        TIMEOUT,
        Instant::now(),
    ));
    assert_eq!((status, message.as_str()), (424, "bad input"));

    let not_ready = InvokeEndpointWithResponseStreamError::generic(
        ErrorMetadata::builder()
            .code("ModelNotReadyException")
            .message("warming up")
            .build(),
    );
    let (status, _, _) = http_parts(stream_open_error(
        SdkError::service_error(not_ready, raw(429)),
        TIMEOUT,
        Instant::now(),
    ));
    assert_eq!(status, 429);
}

fn stream_failure(err: ResponseStreamError, started: Instant) -> ProviderError {
    stream_event_error(SdkError::service_error(err, ()), TIMEOUT, started)
}

#[tokio::test(start_paused = true)]
async fn a_model_invocation_timeout_mid_stream_is_a_timeout_after_the_time_run() {
    let started = Instant::now();
    tokio::time::advance(Duration::from_secs(61)).await;
    let err = ResponseStreamError::ModelStreamError(
        ModelStreamError::builder()
            .error_code("ModelInvocationTimeExceeded")
            .message("Model invocation time exceeded")
            .build(),
    );
    match stream_failure(err, started) {
        ProviderError::Timeout { after } => assert_eq!(after, Duration::from_secs(61)),
        other => panic!("expected a timeout, got {other:?}"),
    }
}

#[test]
fn a_broken_model_stream_is_a_connection_error_naming_the_code() {
    let err = ResponseStreamError::ModelStreamError(
        ModelStreamError::builder()
            .error_code("StreamBroken")
            .message("the model container closed the stream")
            .build(),
    );
    match stream_failure(err, Instant::now()) {
        ProviderError::Connection(message) => {
            assert!(message.contains("StreamBroken"), "{message}");
            assert!(message.contains("the model container closed the stream"), "{message}");
        }
        other => panic!("expected a connection error, got {other:?}"),
    }
}

#[test]
fn an_internal_stream_failure_is_a_connection_error() {
    let err = ResponseStreamError::InternalStreamFailure(
        InternalStreamFailure::builder()
            .message("internal stream failure")
            .build(),
    );
    let mapped = stream_failure(err, Instant::now());
    assert!(mapped.is_retryable());
    assert!(
        matches!(&mapped, ProviderError::Connection(m) if m.contains("InternalStreamFailure") && m.contains("internal stream failure")),
        "{mapped:?}"
    );
}

#[test]
fn transport_failures_are_timeouts_connections_or_misconfiguration() {
    let started = Instant::now();
    let timed_out: SdkError<InvokeEndpointError, HttpResponse> = SdkError::timeout_error("operation timed out");
    assert!(matches!(
        invoke_error(timed_out, TIMEOUT, started),
        ProviderError::Timeout { after } if after == TIMEOUT
    ));

    let refused: SdkError<InvokeEndpointError, HttpResponse> = SdkError::dispatch_failure(
        aws_sdk_sagemakerruntime::error::ConnectorError::io("connection refused".into()),
    );
    assert!(
        matches!(invoke_error(refused, TIMEOUT, started), ProviderError::Connection(m) if m.contains("connection refused"))
    );

    let slow: SdkError<InvokeEndpointError, HttpResponse> = SdkError::dispatch_failure(
        aws_sdk_sagemakerruntime::error::ConnectorError::timeout("read timed out".into()),
    );
    assert!(matches!(
        invoke_error(slow, TIMEOUT, started),
        ProviderError::Timeout { .. }
    ));

    let unbuilt: SdkError<InvokeEndpointError, HttpResponse> = SdkError::construction_failure("no region configured");
    assert!(matches!(
        invoke_error(unbuilt, TIMEOUT, started),
        ProviderError::Misconfigured(m) if m.contains("no region configured")
    ));

    let cut: SdkError<ResponseStreamError, ()> = SdkError::response_error("frame CRC mismatch", ());
    assert!(matches!(
        stream_event_error(cut, TIMEOUT, started),
        ProviderError::Connection(m) if m.starts_with("stream broke") && m.contains("frame CRC mismatch")
    ));
}
