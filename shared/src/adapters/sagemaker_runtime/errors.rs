//! SageMaker runtime errors as provider errors.
//!
//! - `ModelError` (the container answered non-2xx): HTTP with the container's own status
//!   (`OriginalStatusCode`, 424 when absent) and message (`OriginalMessage`'s `error` / `message`
//!   when it is JSON, kept as the error body; else its text).
//! - SageMaker's own errors: HTTP with the status each stands for (see [`SERVICE_STATUS`]); the
//!   rest keep the status SageMaker answered with.
//! - Stream failures (`ModelStreamError`, `InternalStreamFailure`): `ModelInvocationTimeExceeded`
//!   is a timeout (the model ran out of time: 504, not retried, like the gateway's own timeouts);
//!   `StreamBroken`, any other code and `InternalStreamFailure` are a broken connection (retryable
//!   while nothing was sent to the client).
//! - No answer in time: a timeout; no connection or a broken one: a connection error; a request
//!   that cannot be built (no region, no credentials): a misconfiguration.

use crate::adapters::aws::describe_sdk_error;
use crate::ports::lmi_transport::MODEL_ERROR_STATUS;
use crate::ports::provider_call::upstream_error_message;
use crate::ports::provider_call::ProviderError;
use aws_sdk_sagemakerruntime::config::http::HttpResponse;
use aws_sdk_sagemakerruntime::error::{ProvideErrorMetadata, SdkError};
use aws_sdk_sagemakerruntime::operation::invoke_endpoint::InvokeEndpointError;
use aws_sdk_sagemakerruntime::operation::invoke_endpoint_with_response_stream::InvokeEndpointWithResponseStreamError;
use aws_sdk_sagemakerruntime::types::error::{ModelError, ModelStreamError, ResponseStreamError};
use serde_json::Value;
use std::time::Duration;
use tokio::time::Instant;

/// SageMaker's own error codes and the status each is reported with. Throttling is not modelled
/// by the SDK (it arrives as a generic `ThrottlingException`, HTTP 400): 429, so it is retried.
/// `InternalDependencyException` keeps SageMaker's 530 (a 5xx: retried).
const SERVICE_STATUS: [(&str, u16); 6] = [
    ("ValidationError", 400),
    ("ModelNotReadyException", 429),
    ("ThrottlingException", 429),
    ("InternalFailure", 500),
    ("ServiceUnavailable", 503),
    ("InternalDependencyException", 530),
];

/// What went wrong, alike for both operations and the event stream.
#[derive(Debug)]
enum Fault {
    /// The container answered with an error.
    Model(ModelError),
    /// SageMaker's own error.
    Service {
        code: String,
        message: Option<String>,
        raw_status: Option<u16>,
    },
    /// The model's stream failed after it started.
    ModelStream(ModelStreamError),
    /// SageMaker's stream failed after it started.
    InternalStream(Option<String>),
}

impl Fault {
    fn service(code: &str, err: &impl ProvideErrorMetadata, raw_status: Option<u16>) -> Self {
        Self::Service {
            code: code.to_owned(),
            message: err.message().map(str::to_owned),
            raw_status,
        }
    }

    fn unmodelled(err: &impl ProvideErrorMetadata, raw_status: Option<u16>) -> Self {
        Self::service(err.code().unwrap_or("UnknownError"), err, raw_status)
    }

    fn of_invoke(err: InvokeEndpointError, raw_status: Option<u16>) -> Self {
        use InvokeEndpointError as E;
        match err {
            E::ModelError(model) => Self::Model(model),
            E::ValidationError(e) => Self::service("ValidationError", &e, raw_status),
            E::ModelNotReadyException(e) => Self::service("ModelNotReadyException", &e, raw_status),
            E::ServiceUnavailable(e) => Self::service("ServiceUnavailable", &e, raw_status),
            E::InternalFailure(e) => Self::service("InternalFailure", &e, raw_status),
            E::InternalDependencyException(e) => Self::service("InternalDependencyException", &e, raw_status),
            other => Self::unmodelled(&other, raw_status),
        }
    }

    fn of_stream_open(err: InvokeEndpointWithResponseStreamError, raw_status: Option<u16>) -> Self {
        use InvokeEndpointWithResponseStreamError as E;
        match err {
            E::ModelError(model) => Self::Model(model),
            E::ModelStreamError(stream) => Self::ModelStream(stream),
            E::InternalStreamFailure(e) => Self::InternalStream(e.message().map(str::to_owned)),
            E::ValidationError(e) => Self::service("ValidationError", &e, raw_status),
            E::ServiceUnavailable(e) => Self::service("ServiceUnavailable", &e, raw_status),
            E::InternalFailure(e) => Self::service("InternalFailure", &e, raw_status),
            other => Self::unmodelled(&other, raw_status),
        }
    }

    fn of_stream_event(err: ResponseStreamError) -> Self {
        match err {
            ResponseStreamError::ModelStreamError(stream) => Self::ModelStream(stream),
            ResponseStreamError::InternalStreamFailure(e) => Self::InternalStream(e.message().map(str::to_owned)),
            other => Self::unmodelled(&other, None),
        }
    }

    /// `started`: when the invocation began (a model timeout reports the time it ran).
    fn into_provider_error(self, started: Instant) -> ProviderError {
        match self {
            Self::Model(model) => model_error(&model),
            Self::Service { code, message, .. }
                if code == "ValidationError" && names_missing_endpoint(message.as_deref()) =>
            {
                ProviderError::Misconfigured(format!(
                    "SageMaker {code}: {} (check the provider's endpoint_name and region)",
                    message.as_deref().unwrap_or("the endpoint was not found")
                ))
            }
            Self::Service {
                code,
                message,
                raw_status,
            } => {
                let status = SERVICE_STATUS
                    .iter()
                    .find(|(known, _)| *known == code)
                    .map(|(_, status)| *status)
                    .or(raw_status.filter(|status| (400..=599).contains(status)))
                    .unwrap_or(500);
                let message = match message {
                    Some(message) => format!("SageMaker {code}: {message}"),
                    None => format!("SageMaker {code}"),
                };
                ProviderError::Http {
                    status,
                    message,
                    retry_after: None,
                    body: None,
                }
            }
            Self::ModelStream(stream) => {
                let code = stream.error_code().unwrap_or("unknown");
                if code == "ModelInvocationTimeExceeded" {
                    return ProviderError::Timeout {
                        after: started.elapsed(),
                    };
                }
                let message = stream.message().unwrap_or("no message");
                ProviderError::Connection(format!("SageMaker model stream failed ({code}): {message}"))
            }
            Self::InternalStream(message) => ProviderError::Connection(format!(
                "SageMaker stream failed (InternalStreamFailure): {}",
                message.as_deref().unwrap_or("no message")
            )),
        }
    }
}

/// A `ValidationError` about the endpoint itself ("Could not find endpoint …", "… not found"): the
/// gateway's configuration is wrong, not the client's request.
fn names_missing_endpoint(message: Option<&str>) -> bool {
    message.is_some_and(|message| {
        let message = message.to_ascii_lowercase();
        message.contains("could not find endpoint") || message.contains("not found")
    })
}

/// The container's failure: its status and message, its body when JSON.
fn model_error(model: &ModelError) -> ProviderError {
    let status = model
        .original_status_code()
        .and_then(|code| u16::try_from(code).ok())
        .filter(|status| (400..=599).contains(status))
        .unwrap_or(MODEL_ERROR_STATUS);
    let original = model.original_message().map(str::trim).filter(|text| !text.is_empty());
    let body = original.and_then(|text| serde_json::from_str::<Value>(text).ok());
    let message = body
        .as_ref()
        .and_then(upstream_error_message)
        .or_else(|| original.map(str::to_owned))
        .or_else(|| model.message().map(str::to_owned))
        .unwrap_or_else(|| format!("the model container failed with HTTP {status}"));
    ProviderError::Http {
        status,
        message,
        retry_after: None,
        body,
    }
}

/// Failures before any answer: the request could not be sent or no answer came.
fn transport_error<E, R>(err: SdkError<E, R>, timeout: Duration) -> ProviderError
where
    E: std::error::Error + 'static,
    R: std::fmt::Debug,
{
    match &err {
        SdkError::TimeoutError(_) => ProviderError::Timeout { after: timeout },
        SdkError::DispatchFailure(failure) if failure.is_timeout() => ProviderError::Timeout { after: timeout },
        SdkError::ConstructionFailure(_) => {
            ProviderError::Misconfigured(format!("SageMaker request not sent: {}", describe_sdk_error(&err)))
        }
        _ => ProviderError::Connection(format!("SageMaker: {}", describe_sdk_error(&err))),
    }
}

/// An `InvokeEndpoint` failure. `timeout`: the request's.
pub(super) fn invoke_error(
    err: SdkError<InvokeEndpointError, HttpResponse>,
    timeout: Duration,
    started: Instant,
) -> ProviderError {
    operation_error(err, timeout, started, Fault::of_invoke)
}

/// An `InvokeEndpointWithResponseStream` failure before the stream started.
pub(super) fn stream_open_error(
    err: SdkError<InvokeEndpointWithResponseStreamError, HttpResponse>,
    timeout: Duration,
    started: Instant,
) -> ProviderError {
    operation_error(err, timeout, started, Fault::of_stream_open)
}

/// An operation's failure: its service error read by `fault`, else a transport failure.
fn operation_error<E>(
    err: SdkError<E, HttpResponse>,
    timeout: Duration,
    started: Instant,
    fault: fn(E, Option<u16>) -> Fault,
) -> ProviderError
where
    E: std::error::Error + 'static,
{
    match err {
        SdkError::ServiceError(context) => {
            let raw_status = Some(context.raw().status().as_u16());
            fault(context.into_err(), raw_status).into_provider_error(started)
        }
        other => transport_error(other, timeout),
    }
}

/// A failure while reading the event stream. `idle_timeout`: the longest wait between parts.
pub(super) fn stream_event_error<R: std::fmt::Debug>(
    err: SdkError<ResponseStreamError, R>,
    idle_timeout: Duration,
    started: Instant,
) -> ProviderError {
    match err {
        SdkError::ServiceError(context) => Fault::of_stream_event(context.into_err()).into_provider_error(started),
        other => match transport_error(other, idle_timeout) {
            ProviderError::Connection(message) => ProviderError::Connection(format!("stream broke: {message}")),
            mapped => mapped,
        },
    }
}

#[cfg(test)]
#[path = "errors_tests.rs"]
mod tests;
