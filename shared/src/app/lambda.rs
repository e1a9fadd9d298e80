//! Wiring for the Lambda functions: AWS adapters, configuration from `NIMBUS_CONFIG_SOURCE`,
//! keys always required, the public URL from `NIMBUS_PUBLIC_URL` or API Gateway's request context.

use super::arming_state::ArmingState;
use super::aws;
use super::config_source::ConfigSource;
use super::http_api_deadline::{http_api_answer_deadline_from_env, with_http_api_deadline};
use super::table_access::{LambdaFunction, ScopedState};
use super::{
    batches_state, files_state, host_state, inference_service, inference_state, lambda_host, Adapters, AuthSettings,
    InitError, ModelLayers, WorkerParts,
};
use crate::adapters::aws::{load_sdk_config, EventBridgeSwitch, SsmParameters, POLLER_RULE_ENV};
use crate::adapters::DeferredTasks;
use crate::app::LoadedConfig;
use crate::auth::{AuthMode, UntaggedKeys};
use crate::batches::BatchSettings;
use crate::config::Config;
use crate::http::{HostState, HttpSettings, PublicBaseUrl};
use crate::jobs::JobDispatcher;
use crate::ports::ScheduleSwitch;
use crate::scheduler::Arming;
use crate::scheduler::Scheduler;
use axum::extract::Request;
use axum::middleware::Next;
use axum::response::Response;
use axum::Router;
use lambda_http::request::RequestContext;
use std::sync::Arc;
use std::time::Duration;

/// Start a function binary: logging (JSON in Lambda), and a clear exit when run outside Lambda
/// (`lambda_http::run` would panic there).
pub fn prepare_function(binary: &str) {
    crate::telemetry::init(crate::telemetry::LogFormat::from_env());
    if std::env::var_os("AWS_LAMBDA_RUNTIME_API").is_none() {
        eprintln!("{binary} runs inside AWS Lambda (or the runtime interface emulator); for local use run `make run`");
        std::process::exit(2);
    }
}

/// How long a verified key is trusted before its record is read again (a revocation is seen at
/// once regardless: every request reads the project's revocation version).
pub(crate) const LAMBDA_AUTH_CACHE_TTL: Duration = Duration::from_secs(30);

/// File content above this is served by a redirect to a presigned S3 URL: a Lambda response
/// behind API Gateway must stay under 6 MB.
pub(crate) const LAMBDA_INLINE_CONTENT_LIMIT: u64 = 4 * 1024 * 1024;

/// A chunk or validation not picked up this long after it was enqueued is enqueued again: longer
/// than the queue's visibility timeout (6 × the worker's 300 s), so SQS redelivery comes first.
pub(crate) const LAMBDA_REQUEUE_AFTER: Duration = Duration::from_secs(35 * 60);

fn lambda_batch_settings(config: &Config) -> BatchSettings {
    BatchSettings {
        requeue_after: LAMBDA_REQUEUE_AFTER,
        ..BatchSettings::from_config(config)
    }
}

/// The environment variable holding the SSM path prefix (e.g. `/nimbus/`) a function's role may
/// read provider keys under; set on the functions that call providers.
pub(crate) const PROVIDER_KEY_PREFIX_ENV: &str = "NIMBUS_PROVIDER_KEY_PREFIX";

/// Adds to a function's adapters the clients its role reaches beyond the state table and the
/// bucket (`template.yaml`). Each function names its own, so it links only those.
type Reach = fn(Adapters, &aws_config::SdkConfig) -> Result<Adapters, InitError>;

/// The inference function's: provider keys.
fn calling_providers(adapters: Adapters, sdk_config: &aws_config::SdkConfig) -> Result<Adapters, InitError> {
    Ok(adapters.with_provider_secrets(Arc::new(SsmParameters::new(sdk_config))))
}

/// The files function's: the poller's schedule, armed after due work is written.
fn writing_due_work(adapters: Adapters, sdk_config: &aws_config::SdkConfig) -> Result<Adapters, InitError> {
    Ok(match poller_switch(sdk_config) {
        Some(switch) => {
            let arming = Arming::new(Arc::clone(&adapters.state), switch);
            let state = Arc::new(ArmingState::new(
                Arc::clone(&adapters.state),
                arming,
                Arc::clone(&adapters.clock),
            ));
            Adapters { state, ..adapters }
        }
        None => adapters,
    })
}

/// The job queues and the sealing key (its data key kept in `parameters` unless a KMS key is
/// named): what every function that queues work or seals credentials reaches.
fn queueing_jobs(
    adapters: Adapters,
    sdk_config: &aws_config::SdkConfig,
    parameters: &SsmParameters,
) -> Result<Adapters, InitError> {
    Ok(adapters
        .with_queue(Arc::new(aws::job_queues(sdk_config)?))
        .with_sealer(aws::sealer_of(sdk_config, parameters)))
}

/// The poller's: [`queueing_jobs`] and provider keys (one SSM client for both).
fn running_jobs(adapters: Adapters, sdk_config: &aws_config::SdkConfig) -> Result<Adapters, InitError> {
    let parameters = SsmParameters::new(sdk_config);
    Ok(queueing_jobs(adapters, sdk_config, &parameters)?.with_provider_secrets(Arc::new(parameters)))
}

/// The batches function's: [`queueing_jobs`] (it calls no provider, so it reads no provider key),
/// and it writes due work.
fn queueing_jobs_writing_due_work(
    adapters: Adapters,
    sdk_config: &aws_config::SdkConfig,
) -> Result<Adapters, InitError> {
    let adapters = queueing_jobs(adapters, sdk_config, &SsmParameters::new(sdk_config))?;
    writing_due_work(adapters, sdk_config)
}

/// The worker's: [`running_jobs`], and it writes due work.
fn running_jobs_writing_due_work(
    adapters: Adapters,
    sdk_config: &aws_config::SdkConfig,
) -> Result<Adapters, InitError> {
    writing_due_work(running_jobs(adapters, sdk_config)?, sdk_config)
}

/// The AWS adapters of `function`: its state store reaches only the records its role allows, and
/// `reach` adds the clients its role reaches. The SDK configuration they were built from is
/// returned for the clients a function adds (the poller's schedule switch) and the configuration's
/// source, so that it is loaded once.
async fn lambda_adapters(
    function: LambdaFunction,
    reach: Reach,
) -> Result<(Adapters, aws_config::SdkConfig), InitError> {
    let sdk_config = load_sdk_config().await;
    let mut adapters = aws::adapters(&sdk_config).await?;
    // Scoped first: everything built on the store after this (the key tags too) goes through it.
    adapters.state = Arc::new(ScopedState::new(adapters.state, function));
    let adapters = reach(adapters, &sdk_config)?.with_untagged_keys(UntaggedKeys::from_env()?);
    Ok((adapters, sdk_config))
}

/// The configuration `NIMBUS_CONFIG_SOURCE` names, its provider keys checked against the prefix
/// the function's role may read ([`PROVIDER_KEY_PREFIX_ENV`]).
async fn lambda_config(sdk_config: &aws_config::SdkConfig) -> Result<LoadedConfig, InitError> {
    let loaded = ConfigSource::from_env()?.load(sdk_config).await?;
    if let Some(prefix) = std::env::var(PROVIDER_KEY_PREFIX_ENV).ok().filter(|p| !p.is_empty()) {
        loaded.config.check_key_parameter_prefix(&prefix)?;
    }
    Ok(loaded)
}

/// `NIMBUS_PUBLIC_URL` when set (e.g. a custom domain in front of API Gateway), checked.
pub(crate) fn public_url_from_env() -> Result<Option<PublicBaseUrl>, InitError> {
    match std::env::var("NIMBUS_PUBLIC_URL") {
        Ok(url) if !url.trim().is_empty() => Ok(Some(PublicBaseUrl::parse(url.trim())?)),
        _ => Ok(None),
    }
}

/// The URL the request came in on, from the request context API Gateway wrote (its domain and
/// stage; never a client header).
fn public_url_of(context: &RequestContext) -> Option<PublicBaseUrl> {
    match context {
        RequestContext::ApiGatewayV2(context) => {
            PublicBaseUrl::for_api_gateway(context.domain_name.as_deref()?, context.stage.as_deref())
        }
        RequestContext::ApiGatewayV1(context) => {
            PublicBaseUrl::for_api_gateway(context.domain_name.as_deref()?, context.stage.as_deref())
        }
        _ => None,
    }
}

/// Hand handlers the request's public URL (see [`public_url_of`]) as an extension.
async fn add_request_public_url(mut request: Request, next: Next) -> Response {
    let url = request.extensions().get::<RequestContext>().and_then(public_url_of);
    if let Some(url) = url {
        request.extensions_mut().insert(url);
    }
    next.run(request).await
}

/// A function's router with the request-context public URL layer.
fn with_request_public_url(router: Router) -> Router {
    router.layer(axum::middleware::from_fn(add_request_public_url))
}

/// What the worker and the poller are built from (see [`super::job_dispatcher`] and
/// [`super::scheduler`], shared with the local server).
async fn lambda_worker_parts(
    function: LambdaFunction,
    reach: Reach,
) -> Result<(WorkerParts, aws_config::SdkConfig), InitError> {
    let (adapters, sdk_config) = lambda_adapters(function, reach).await?;
    let loaded = lambda_config(&sdk_config).await?;
    let inference = inference_service(&loaded.config, &adapters)?;
    let parts = WorkerParts::new(&loaded, &adapters, inference, lambda_batch_settings(&loaded.config));
    Ok((parts, sdk_config))
}

/// An HTTP function ready to run: its router and the work its handlers defer.
pub struct HttpFunction {
    router: Router,
    deferred: Arc<DeferredTasks>,
}

impl HttpFunction {
    /// Serve invocations until the execution environment shuts down (see [`lambda_host`]).
    pub async fn run(self) -> Result<(), lambda_http::Error> {
        lambda_host::serve(self.router, self.deferred).await
    }
}

/// What an HTTP function's router is built on: its adapters, the state every route shares, the
/// host's settings, and where its handlers defer work (the Lambda host finishes it after each
/// invocation).
struct HttpStack {
    adapters: Adapters,
    sdk_config: aws_config::SdkConfig,
    host: HostState,
    http: HttpSettings,
    deferred: Arc<DeferredTasks>,
}

impl HttpStack {
    async fn new(function: LambdaFunction, reach: Reach) -> Result<Self, InitError> {
        let (mut adapters, sdk_config) = lambda_adapters(function, reach).await?;
        let deferred = Arc::new(DeferredTasks::new());
        adapters.after_response = Arc::clone(&deferred) as _;
        let auth = AuthSettings {
            mode: AuthMode::Required,
            cache_ttl: LAMBDA_AUTH_CACHE_TTL,
        };
        Ok(Self {
            host: host_state(&adapters, auth),
            http: HttpSettings {
                inline_content_limit: LAMBDA_INLINE_CONTENT_LIMIT,
                public_url: public_url_from_env()?,
            },
            adapters,
            sdk_config,
            deferred,
        })
    }

    /// The function serving `router`.
    fn serve(self, router: Router) -> Result<HttpFunction, InitError> {
        Ok(HttpFunction {
            router: with_http_api_deadline(router, http_api_answer_deadline_from_env()?),
            deferred: self.deferred,
        })
    }
}

/// The inference function (behind the HTTP API, and streaming behind the streaming REST API):
/// the model and function layers, no batch engine, files or webhooks.
pub async fn inference_function() -> Result<HttpFunction, InitError> {
    let stack = HttpStack::new(LambdaFunction::Inference, calling_providers).await?;
    let loaded = lambda_config(&stack.sdk_config).await?;
    let layers = ModelLayers::new(&loaded, &stack.adapters)?;
    let state = inference_state(&loaded, &stack.adapters, &layers);
    let router = crate::http::inference_router(stack.host.clone(), state);
    stack.serve(router)
}

/// The files function (the only one that builds absolute URLs: direct uploads): files alone, no
/// configuration (it calls no model).
pub async fn files_function() -> Result<HttpFunction, InitError> {
    let stack = HttpStack::new(LambdaFunction::Files, writing_due_work).await?;
    let state = files_state(&stack.adapters, stack.http.clone());
    let router = with_request_public_url(crate::http::files_router(stack.host.clone(), state));
    stack.serve(router)
}

/// The batches function: the batch API, the async API and webhooks, checking submissions against
/// the configuration alone (no model layer: it calls no model).
pub async fn batches_function() -> Result<HttpFunction, InitError> {
    let stack = HttpStack::new(LambdaFunction::Batches, queueing_jobs_writing_due_work).await?;
    let loaded = lambda_config(&stack.sdk_config).await?;
    let settings = lambda_batch_settings(&loaded.config);
    let state = batches_state(&loaded, &stack.adapters, stack.http.clone(), settings);
    let router = crate::http::batches_router(stack.host.clone(), state);
    stack.serve(router)
}

/// The SQS-triggered worker: every job family's runner (see [`super::job_dispatcher`]).
pub async fn worker() -> Result<JobDispatcher, InitError> {
    let (parts, _) = lambda_worker_parts(LambdaFunction::Worker, running_jobs_writing_due_work).await?;
    Ok(super::job_dispatcher(&parts))
}

/// The scheduled poller: every scheduled task (see [`super::scheduler`]), each pass ending by
/// arming or disarming its every-minute schedule when the stack names it ([`POLLER_RULE_ENV`]).
pub async fn scheduler() -> Result<Scheduler, InitError> {
    let (parts, sdk_config) = lambda_worker_parts(LambdaFunction::Poller, running_jobs).await?;
    let scheduler = super::scheduler(&parts);
    Ok(match poller_switch(&sdk_config) {
        Some(switch) => scheduler.with_arming(Arming::new(Arc::clone(&parts.adapters.state), switch)),
        None => scheduler,
    })
}

/// The switch of the poller's every-minute rule named by [`POLLER_RULE_ENV`]; `None` when unset
/// (the schedule then simply stays on).
fn poller_switch(sdk_config: &aws_config::SdkConfig) -> Option<Arc<dyn ScheduleSwitch>> {
    let rule = std::env::var(POLLER_RULE_ENV)
        .ok()
        .filter(|rule| !rule.trim().is_empty())?;
    Some(Arc::new(EventBridgeSwitch::new(sdk_config, rule.trim())))
}

/// The poller starts new rounds of due work for at most this long: less than the schedule's
/// minute, so passes do not pile up.
pub(crate) const POLLER_PASS_WINDOW: Duration = Duration::from_secs(45);

/// Time kept, before the invocation's deadline, for the round under way and the tasks after it.
pub(crate) const POLLER_RESERVE: Duration = Duration::from_secs(60);

/// When a poller pass invoked with `invocation_deadline` stops starting rounds (see
/// [`Scheduler::run_once_until`]): within [`POLLER_PASS_WINDOW`] and [`POLLER_RESERVE`] before
/// the invocation ends.
pub fn poller_pass_deadline(invocation_deadline: std::time::SystemTime) -> tokio::time::Instant {
    let left = invocation_deadline
        .duration_since(std::time::SystemTime::now())
        .unwrap_or_default()
        .saturating_sub(POLLER_RESERVE);
    tokio::time::Instant::now() + left.min(POLLER_PASS_WINDOW)
}

/// The receipt of an SQS event record, for [`JobDispatcher::handle_delivery`]: qualified with the
/// queue it came from (the worker consumes the jobs queue and the priority queues).
pub fn sqs_record_receipt(event_source_arn: Option<&str>, receipt_handle: &str) -> String {
    crate::adapters::aws::delivered_receipt(event_source_arn, receipt_handle)
}

#[cfg(test)]
mod tests {
    use super::*;
    use axum::body::Body;
    use axum::routing::get;
    use axum::Extension;
    use lambda_http::aws_lambda_events::apigw::{ApiGatewayProxyRequestContext, ApiGatewayV2httpRequestContext};
    use tower::ServiceExt;

    async fn seen_url(context: Option<RequestContext>) -> String {
        let router = with_request_public_url(Router::new().route(
            "/",
            get(|url: Option<Extension<PublicBaseUrl>>| async move {
                url.map(|Extension(url)| url.as_str().to_owned()).unwrap_or_default()
            }),
        ));
        let mut request = axum::http::Request::get("/")
            .header("host", "evil.example")
            .body(Body::empty())
            .unwrap();
        if let Some(context) = context {
            request.extensions_mut().insert(context);
        }
        let response = router.oneshot(request).await.unwrap();
        let bytes = axum::body::to_bytes(response.into_body(), 1024).await.unwrap();
        String::from_utf8(bytes.to_vec()).unwrap()
    }

    /// An HTTP API (v2) context, as API Gateway fills it.
    fn http_api(domain: &str, stage: Option<&str>) -> RequestContext {
        let mut context = ApiGatewayV2httpRequestContext::default();
        context.domain_name = Some(domain.into());
        context.stage = stage.map(Into::into);
        RequestContext::ApiGatewayV2(context)
    }

    /// A REST API (v1) context, as API Gateway fills it.
    fn rest_api(domain: &str, stage: &str) -> RequestContext {
        let mut context = ApiGatewayProxyRequestContext::default();
        context.domain_name = Some(domain.into());
        context.stage = Some(stage.into());
        RequestContext::ApiGatewayV1(context)
    }

    #[tokio::test]
    async fn the_public_url_comes_from_the_request_context_never_the_host_header() {
        let cases = [
            (
                Some(http_api("abc.execute-api.eu-west-1.amazonaws.com", Some("$default"))),
                "https://abc.execute-api.eu-west-1.amazonaws.com",
            ),
            (
                Some(rest_api("def.execute-api.eu-west-1.amazonaws.com", "prod")),
                "https://def.execute-api.eu-west-1.amazonaws.com/prod",
            ),
            (Some(http_api("evil.example/steal?x=", None)), ""),
            (None, ""),
        ];
        for (context, expected) in cases {
            assert_eq!(seen_url(context).await, expected);
        }
    }
}
