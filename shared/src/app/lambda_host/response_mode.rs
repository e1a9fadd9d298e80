//! One runtime loop answers both ways. The HTTP API invokes the function with `Invoke` and needs
//! a buffered proxy response; the streaming REST API (a Lambda proxy integration with
//! `responseTransferMode: STREAM`) invokes it with `InvokeWithResponseStream` and needs the
//! streaming format (a JSON prelude, eight NUL bytes, then the body as it is produced), as a
//! function URL in `RESPONSE_STREAM` mode would. Each answer takes the form its invocation's front
//! expects. The Runtime API does not say how an invocation was made, so the event's shape does: a
//! REST (payload 1.0) proxy event comes only from the streaming REST API in this stack, an HTTP API
//! (payload 2.0) one from the HTTP API, unless its request context names a function URL host.

use futures::future::BoxFuture;
use futures::{FutureExt, TryFutureExt};
use lambda_http::lambda_runtime::{FunctionResponse, LambdaEvent, StreamResponse};
use lambda_http::request::LambdaRequest;
use lambda_http::Service;
use std::task::{Context, Poll};

/// How the Lambda service wants an invocation answered.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum ResponseMode {
    /// One proxy response object (the HTTP API, ALB).
    Buffered,
    /// The streaming format, body chunks as they come (the streaming REST API, or a function URL
    /// in `RESPONSE_STREAM` mode).
    Streamed,
}

impl ResponseMode {
    /// REST API (payload 1.0) events stream: every integration of the stack's REST API is a
    /// streaming one. Function URL events look like HTTP API (payload 2.0) events; their request
    /// context names the function URL's own host, `<url-id>.lambda-url.<region>.on.aws`.
    pub fn of(event: &LambdaRequest) -> Self {
        match event {
            LambdaRequest::ApiGatewayV1(_) => Self::Streamed,
            LambdaRequest::ApiGatewayV2(request)
                if is_function_url_host(request.request_context.domain_name.as_deref()) =>
            {
                Self::Streamed
            }
            _ => Self::Buffered,
        }
    }
}

pub(crate) fn is_function_url_host(domain: Option<&str>) -> bool {
    domain.and_then(|domain| domain.split('.').nth(1)) == Some("lambda-url")
}

/// The handler of the runtime loop: `buffered` and `streamed` serve the same router, as
/// `lambda_http::run` and `lambda_http::run_with_streaming_response` would; each invocation
/// goes to the one its [`ResponseMode`] asks for.
pub(crate) struct ByResponseMode<B, S> {
    buffered: B,
    streamed: S,
}

impl<B, S> ByResponseMode<B, S> {
    pub fn new(buffered: B, streamed: S) -> Self {
        Self { buffered, streamed }
    }
}

impl<B, S, Body> Service<LambdaEvent<LambdaRequest>> for ByResponseMode<B, S>
where
    B: Service<LambdaEvent<LambdaRequest>>,
    B::Future: Send + 'static,
    B::Response: Send + 'static,
    B::Error: Send + 'static,
    S: Service<LambdaEvent<LambdaRequest>, Response = StreamResponse<Body>, Error = B::Error>,
    S::Future: Send + 'static,
    Body: Send + 'static,
{
    type Response = FunctionResponse<B::Response, Body>;
    type Error = B::Error;
    type Future = BoxFuture<'static, Result<Self::Response, Self::Error>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        match self.buffered.poll_ready(cx) {
            Poll::Ready(Ok(())) => self.streamed.poll_ready(cx),
            other => other,
        }
    }

    fn call(&mut self, event: LambdaEvent<LambdaRequest>) -> Self::Future {
        match ResponseMode::of(&event.payload) {
            ResponseMode::Buffered => self
                .buffered
                .call(event)
                .map_ok(FunctionResponse::BufferedResponse)
                .boxed(),
            ResponseMode::Streamed => self
                .streamed
                .call(event)
                .map_ok(FunctionResponse::StreamingResponse)
                .boxed(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use axum::body::Body;
    use axum::routing::get;
    use axum::Router;
    use futures::StreamExt;
    use lambda_http::lambda_runtime::Context as InvocationContext;
    use lambda_http::StreamAdapter;
    use std::time::Duration;

    fn event(file: &str) -> LambdaRequest {
        serde_json::from_str(file).unwrap()
    }

    const FUNCTION_URL: &str = include_str!("../../../../infra/events/inference-models-function-url.json");
    const HTTP_API: &str = include_str!("../../../../infra/events/inference-models.json");
    const REST_API: &str = include_str!("../../../../infra/events/inference-chat-rest-v1.json");

    #[test]
    fn the_streaming_rest_api_and_function_urls_stream_and_the_http_api_is_answered_whole() {
        assert_eq!(ResponseMode::of(&event(REST_API)), ResponseMode::Streamed);
        assert_eq!(ResponseMode::of(&event(FUNCTION_URL)), ResponseMode::Streamed);
        assert_eq!(ResponseMode::of(&event(HTTP_API)), ResponseMode::Buffered);
    }

    #[test]
    fn only_the_function_url_host_itself_counts() {
        for (domain, streams) in [
            (Some("abc123.lambda-url.eu-west-1.on.aws"), true),
            (Some("abc123.execute-api.eu-west-1.amazonaws.com"), false),
            (Some("lambda-url.example.com"), false),
            (Some("api.example.com"), false),
            (None, false),
        ] {
            assert_eq!(is_function_url_host(domain), streams, "{domain:?}");
        }
    }

    /// A route whose body is produced over time, like an SSE answer.
    fn slow_stream_router() -> Router {
        Router::new().route(
            "/v1/models",
            get(|| async {
                let chunks = futures::stream::iter(["first ", "second"]).then(|chunk| async move {
                    tokio::time::sleep(Duration::from_millis(100)).await;
                    Ok::<_, std::convert::Infallible>(chunk)
                });
                Body::from_stream(chunks)
            }),
        )
    }

    fn lambda_event(file: &str) -> LambdaEvent<LambdaRequest> {
        LambdaEvent::new(event(file), InvocationContext::default())
    }

    fn handler(
        router: Router,
    ) -> ByResponseMode<
        lambda_http::Adapter<'static, axum::response::Response, Router>,
        StreamAdapter<'static, Router, Body>,
    > {
        ByResponseMode::new(lambda_http::Adapter::from(router.clone()), StreamAdapter::from(router))
    }

    /// The slow route's body, which `event` must get as a stream, chunk by chunk.
    async fn assert_streamed(event: LambdaRequest) {
        let response = handler(slow_stream_router())
            .call(LambdaEvent::new(event, InvocationContext::default()))
            .await
            .unwrap();
        let FunctionResponse::StreamingResponse(response) = response else {
            panic!("this invocation must be answered as a stream");
        };
        assert_eq!(response.metadata_prelude.status_code, 200);
        let chunks: Vec<_> = response.stream.map(|chunk| chunk.unwrap()).collect().await;
        assert_eq!(chunks, [&b"first "[..], &b"second"[..]]);
    }

    #[tokio::test(start_paused = true)]
    async fn a_function_url_invocation_gets_the_body_chunk_by_chunk() {
        assert_streamed(event(FUNCTION_URL)).await;
    }

    #[tokio::test(start_paused = true)]
    async fn a_rest_api_invocation_gets_the_body_chunk_by_chunk() {
        let mut event = event(REST_API);
        if let LambdaRequest::ApiGatewayV1(request) = &mut event {
            request.path = Some("/v1/models".into());
            request.http_method = axum::http::Method::GET;
            // The deployed functions drop the stage from the path (AWS_LAMBDA_HTTP_IGNORE_STAGE_IN_PATH).
            request.request_context.stage = None;
        }
        assert_streamed(event).await;
    }

    #[tokio::test(start_paused = true)]
    async fn an_http_api_invocation_gets_one_proxy_response() {
        let response = handler(slow_stream_router())
            .call(lambda_event(HTTP_API))
            .await
            .unwrap();
        let FunctionResponse::BufferedResponse(response) = response else {
            panic!("an HTTP API invocation must be answered whole");
        };
        let response = serde_json::to_value(response).unwrap();
        assert_eq!(response["statusCode"], 200);
        assert_eq!(response["body"], "first second");
    }
}
