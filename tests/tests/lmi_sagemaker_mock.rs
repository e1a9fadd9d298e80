//! The LMI mock's SageMaker runtime paths, checked with the real AWS SDK
//! (`aws-sdk-sagemakerruntime`) pointed at it through `AWS_ENDPOINT_URL_SAGEMAKER_RUNTIME`:
//! InvokeEndpoint answers the container's bytes, its errors decode as the SDK's modeled errors
//! (ModelError with the container's status and body), and the response stream's event-stream
//! frames reassemble into exactly the container's lines, however the parts split them.
//!
//! One test function: the endpoint variable is process-wide, so one mock serves every case.

use aws_sdk_sagemakerruntime::config::retry::RetryConfig;
use aws_sdk_sagemakerruntime::error::ProvideErrorMetadata;
use aws_sdk_sagemakerruntime::operation::invoke_endpoint::InvokeEndpointError;
use aws_sdk_sagemakerruntime::primitives::Blob;
use aws_sdk_sagemakerruntime::types::error::ResponseStreamError;
use aws_sdk_sagemakerruntime::types::ResponseStream;
use aws_sdk_sagemakerruntime::Client;
use nimbus_integration_tests::lmi_mock::MockLmi;
use serde_json::{json, Value};

async fn client() -> Client {
    let config = aws_config::defaults(aws_config::BehaviorVersion::latest())
        .region(aws_config::Region::new("us-east-1"))
        .http_client(nimbus_shared::adapters::aws::https_client())
        .credentials_provider(aws_sdk_sagemakerruntime::config::Credentials::new(
            "testing", "testing", None, None, "lmi-mock",
        ))
        .retry_config(RetryConfig::disabled())
        .load()
        .await;
    Client::new(&config)
}

/// What the container itself answers on `/{schema}/invocations` for `body`.
async fn container_bytes(mock: &MockLmi, schema: &str, body: &Value) -> Vec<u8> {
    let response = reqwest::Client::new()
        .post(format!("{}/{schema}/invocations", mock.url))
        .json(body)
        .send()
        .await
        .expect("container call");
    response.bytes().await.expect("container body").to_vec()
}

/// The payload parts of one response stream, and the stream error it ended with, if any.
async fn stream_parts(
    client: &Client,
    endpoint: &str,
    body: &Value,
) -> (String, Vec<Vec<u8>>, Option<ResponseStreamError>) {
    let mut output = client
        .invoke_endpoint_with_response_stream()
        .endpoint_name(endpoint)
        .content_type("application/json")
        .body(Blob::new(body.to_string()))
        .send()
        .await
        .expect("stream call");
    let content_type = output.content_type().unwrap_or_default().to_owned();
    let mut parts = Vec::new();
    loop {
        match output.body.recv().await {
            Ok(Some(ResponseStream::PayloadPart(part))) => {
                parts.push(part.bytes().map(|blob| blob.as_ref().to_vec()).unwrap_or_default())
            }
            Ok(Some(other)) => panic!("unexpected event {other:?}"),
            Ok(None) => return (content_type, parts, None),
            Err(error) => return (content_type, parts, error.into_service_error().into()),
        }
    }
}

async fn invoke_answers_the_container_bytes(client: &Client, mock: &MockLmi) {
    let body = json!({"inputs": "What is LMI?", "parameters": {"details": true, "max_new_tokens": 2}});
    let output = client
        .invoke_endpoint()
        .endpoint_name("rolling-batch-main")
        .content_type("application/json")
        .body(Blob::new(body.to_string()))
        .send()
        .await
        .expect("invoke");
    let bytes = output.body().map(|blob| blob.as_ref().to_vec()).unwrap_or_default();
    assert_eq!(bytes, container_bytes(mock, "rolling_batch", &body).await);
    let answer: Value = serde_json::from_slice(&bytes).expect("JSON answer");
    assert_eq!(answer["generated_text"], "Hello from");
    assert_eq!(answer["details"]["finish_reason"], "length");
    assert_eq!(output.content_type(), Some("application/json"));
}

async fn streams_reassemble_into_the_container_lines(client: &Client, mock: &MockLmi) {
    let prompt = "a prompt long enough to make lines of some length";
    let cases = [
        (
            "rolling-batch-main",
            "rolling_batch",
            json!({"inputs": prompt, "stream": true,
            "parameters": {"details": true}}),
            "application/jsonlines",
        ),
        (
            "tgi-compat-main",
            "tgi_compat",
            json!({"inputs": prompt, "stream": true,
            "parameters": {"details": true}}),
            "text/event-stream",
        ),
        (
            "dynamic-batch-main",
            "dynamic_batch",
            json!({"inputs": [prompt, prompt], "stream": true}),
            "application/jsonlines",
        ),
        (
            "chat-main",
            "chat",
            json!({"messages": [{"role": "user", "content": prompt}], "stream": true,
            "stream_options": {"include_usage": true}}),
            "application/jsonlines",
        ),
    ];
    let mut all_parts = Vec::new();
    for (endpoint, schema, body, expected_type) in cases {
        let (content_type, parts, error) = stream_parts(client, endpoint, &body).await;
        assert!(error.is_none(), "{endpoint}: {error:?}");
        assert_eq!(content_type, expected_type, "{endpoint}");
        assert_eq!(parts.concat(), container_bytes(mock, schema, &body).await, "{endpoint}");
        all_parts.extend(parts);
    }
    assert!(
        all_parts.iter().any(|part| part.last() != Some(&b'\n')),
        "some part ends inside a line"
    );
    assert!(
        all_parts
            .iter()
            .any(|part| part.iter().filter(|byte| **byte == b'\n').count() >= 2),
        "some part carries two lines"
    );
}

async fn a_stream_error_arrives_after_one_part(client: &Client) {
    let body = json!({"inputs": "[lmi-stream-error] go", "stream": true});
    let (_, parts, error) = stream_parts(client, "rolling-batch-main", &body).await;
    assert_eq!(parts.len(), 1);
    match error {
        Some(ResponseStreamError::ModelStreamError(error)) => {
            assert_eq!(error.error_code(), Some("StreamBroken"));
            assert!(error.message().unwrap_or_default().contains("[lmi-stream-error]"));
        }
        other => panic!("expected a ModelStreamError, got {other:?}"),
    }
}

async fn invoke_error(client: &Client, endpoint: &str, prompt: &str) -> InvokeEndpointError {
    client
        .invoke_endpoint()
        .endpoint_name(endpoint)
        .content_type("application/json")
        .body(Blob::new(json!({"inputs": prompt}).to_string()))
        .send()
        .await
        .expect_err("an error")
        .into_service_error()
}

async fn errors_decode_as_the_sdk_errors(client: &Client) {
    for (prompt, status) in [("[lmi-424] bad", 424), ("[lmi-500] boom", 500)] {
        match invoke_error(client, "rolling-batch-main", prompt).await {
            InvokeEndpointError::ModelError(error) => {
                assert_eq!(error.original_status_code(), Some(status));
                let original: Value =
                    serde_json::from_str(error.original_message().unwrap_or_default()).expect("container body");
                assert_eq!(original["code"], status);
                assert!(original["error"]
                    .as_str()
                    .is_some_and(|message| message.contains("LMI mock")));
                assert!(error.log_stream_arn().is_some());
            }
            other => panic!("expected ModelError for {prompt}, got {other:?}"),
        }
    }
    let throttled = invoke_error(client, "rolling-batch-main", "[lmi-throttle]").await;
    assert_eq!(throttled.code(), Some("ThrottlingException"));
    let unavailable = invoke_error(client, "rolling-batch-main", "[lmi-fail-times:1:sdk]").await;
    assert!(
        matches!(unavailable, InvokeEndpointError::ServiceUnavailable(_)),
        "{unavailable:?}"
    );
    let missing = invoke_error(client, "missing-endpoint", "hello").await;
    assert!(
        matches!(missing, InvokeEndpointError::ValidationError(_)),
        "{missing:?}"
    );

    let stream_error = client
        .invoke_endpoint_with_response_stream()
        .endpoint_name("chat-main")
        .body(Blob::new(
            json!({"messages": [{"role": "user", "content": "[lmi-424]"}], "stream": true}).to_string(),
        ))
        .send()
        .await
        .expect_err("an error")
        .into_service_error();
    assert!(stream_error.is_model_error(), "{stream_error:?}");
}

#[tokio::test]
async fn sagemaker_runtime_paths_through_the_sdk() {
    let mock = MockLmi::start().expect("mock LMI");
    std::env::set_var("AWS_ENDPOINT_URL_SAGEMAKER_RUNTIME", &mock.url);
    let client = client().await;
    invoke_answers_the_container_bytes(&client, &mock).await;
    streams_reassemble_into_the_container_lines(&client, &mock).await;
    a_stream_error_arrives_after_one_part(&client).await;
    errors_decode_as_the_sdk_errors(&client).await;
    let recorded: Vec<Value> = reqwest::get(format!("{}/_requests", mock.url))
        .await
        .expect("recorded")
        .json()
        .await
        .expect("recorded JSON");
    assert!(recorded.iter().any(|request| {
        request["path"] == "/endpoints/chat-main/invocations-response-stream"
            && request["headers"]["authorization"]
                .as_str()
                .is_some_and(|auth| auth.starts_with("AWS4-HMAC-SHA256"))
    }));
}
