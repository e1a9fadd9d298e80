//! The HTTP API's integration limit (30 s) in Lambda: a request that came through an API Gateway
//! HTTP API gets an [`AnswerDeadline`] (see `http::answer_deadline`), so a long completion that is
//! not streamed is answered with the function's own 504, advising to stream, rather than cut by API
//! Gateway. Function URL and REST API requests, and the local server, get none.

use super::lambda_host;
use super::limits::{number_from_env, LimitSettingError};
use crate::http::answer_deadline::{answer_deadline, AnswerDeadline};
use crate::ports::{Clock as _, SystemClock};
use axum::extract::{Request, State};
use axum::middleware::Next;
use axum::response::Response;
use axum::Router;
use lambda_http::request::RequestContext;
use std::time::Duration;

/// How long a response not streamed may take to start behind the HTTP API
/// (`NIMBUS_HTTP_API_ANSWER_DEADLINE_SECS`, 0 = none): API Gateway cuts the integration at 30 s
/// with a bare 504, so the function answers its own 504 a little before.
pub(crate) const DEFAULT_HTTP_API_ANSWER_DEADLINE: Duration = Duration::from_secs(28);

/// API Gateway's HTTP API integration limit, in milliseconds.
const HTTP_API_CUT_MS: u64 = 30_000;

/// [`DEFAULT_HTTP_API_ANSWER_DEADLINE`] or `NIMBUS_HTTP_API_ANSWER_DEADLINE_SECS` (at most 29).
pub(crate) fn http_api_answer_deadline_from_env() -> Result<Duration, LimitSettingError> {
    let default = u32::try_from(DEFAULT_HTTP_API_ANSWER_DEADLINE.as_secs()).unwrap_or(28);
    number_from_env("NIMBUS_HTTP_API_ANSWER_DEADLINE_SECS", 0..=29, default, "seconds")
        .map(|secs| Duration::from_secs(secs.into()))
}

/// The answer deadline of a request that came through an API Gateway HTTP API (payload 2.0, not
/// the function URL, whose events look alike), counted from when API Gateway received it.
pub(crate) fn http_api_deadline_of(context: &RequestContext, limit: Duration) -> Option<AnswerDeadline> {
    let RequestContext::ApiGatewayV2(context) = context else {
        return None;
    };
    if lambda_host::is_function_url_host(context.domain_name.as_deref()) {
        return None;
    }
    let now_ms = SystemClock.now_unix_ms();
    // API Gateway always sets `timeEpoch`, and a live request cannot be older than its 30 s cut:
    // anything else (a replayed or sample event, a clock ahead) counts from now.
    let elapsed = u64::try_from(now_ms.saturating_sub(context.time_epoch))
        .ok()
        .filter(|elapsed| context.time_epoch > 0 && *elapsed <= HTTP_API_CUT_MS)
        .unwrap_or(0);
    answer_deadline(limit, Duration::from_millis(elapsed), tokio::time::Instant::now())
}

/// Put the HTTP API's [`AnswerDeadline`] on the request (see [`http_api_deadline_of`]).
async fn add_http_api_deadline(State(limit): State<Duration>, mut request: Request, next: Next) -> Response {
    let deadline = request
        .extensions()
        .get::<RequestContext>()
        .and_then(|context| http_api_deadline_of(context, limit));
    if let Some(deadline) = deadline {
        request.extensions_mut().insert(deadline);
    }
    next.run(request).await
}

/// A function's router with the HTTP API's answer deadline (`limit`, see
/// [`http_api_answer_deadline_from_env`]).
pub(crate) fn with_http_api_deadline(router: Router, limit: Duration) -> Router {
    router.layer(axum::middleware::from_fn_with_state(limit, add_http_api_deadline))
}

#[cfg(test)]
#[path = "http_api_deadline_tests.rs"]
mod tests;
