//! Wiring: adapters + configuration → the shared router. Lambda `main`s and the local server call
//! these and nothing else.

pub mod arming_state;
#[cfg(feature = "aws")]
pub mod aws;
#[cfg(feature = "aws")]
pub mod config_source;
#[cfg(feature = "embedded")]
pub mod embedded;
#[cfg(feature = "aws")]
mod http_api_deadline;
mod init_error;
#[cfg(feature = "aws")]
pub mod lambda;
#[cfg(feature = "aws")]
pub(crate) mod lambda_host;
pub(crate) mod limits;
mod loaded_config;
#[cfg(feature = "aws")]
pub(crate) mod table_access;
pub mod webhooks;

pub(crate) use init_error::InitError;
#[cfg(feature = "aws")]
pub(crate) use loaded_config::load_config;
pub use loaded_config::{load_bundled_config, load_local_config, LoadedConfig};

use crate::adapters::records::{
    RecordRetention, StateFeedbackStore, StateInferenceStore, StateModelCache, DEFAULT_RECORD_RETENTION_DAYS,
};
use crate::adapters::DeferredTasks;
use crate::async_requests::{
    AsyncApi, AsyncDeps, AsyncDueWork, AsyncJobs, AsyncRequests, AsyncSettings, EndpointCalls, SubmissionCheck,
};
use crate::auth::{ApiKeyService, AuthMode, Authenticator, KeyTags, UntaggedKeys};
use crate::batches::{batch_api, BatchDeps, BatchEngine, BatchModels, BatchSettings};
use crate::config::Config;
use crate::files::sweep::FilesSweep;
use crate::files::FilesService;
use crate::http::{AppState, BatchesState, FilesState, HostState, HttpSettings, InferenceState};
use crate::inference::InferenceService;
use crate::jobs::{JobDispatcher, JobFamily};
use crate::lmi_api::LmiApi;
use crate::ports::{
    AfterResponse, BlobStore, CachedProviderSecrets, Clock, CredentialSealer, FeedbackStore, IdSource, InferenceStore,
    JobQueue, MetricsSink, ModelCache, NoCredentialSealer, NoMetrics, NoProviderSecrets, ProviderSecrets, StateStore,
    SystemClock, UuidV7Ids, WebhookTransport,
};
use crate::providers::router::ModelRouter;
use crate::scheduler::{Scheduler, DEFAULT_DUE_INDEX_SHARDS};
use crate::tensorzero::dicl::{DiclBuilder, ExampleStore, LoadedSets};
use crate::tensorzero::experiments::{ExperimentFeedback, ExperimentStore, ExperimentUpdates, Experiments};
use crate::tensorzero::feedback::FeedbackService;
use crate::tensorzero::function_calls::{FunctionChecks, FunctionService, InferencePersistence};
use crate::webhooks::UrlPolicy;
use std::sync::Arc;
use std::time::Duration;

/// One set of adapters behind the ports.
#[derive(Clone)]
pub struct Adapters {
    pub state: Arc<dyn StateStore>,
    pub blobs: Arc<dyn BlobStore>,
    pub queue: Arc<dyn JobQueue>,
    pub clock: Arc<dyn Clock>,
    pub ids: Arc<dyn IdSource>,
    /// Where handlers defer work past the response. A host that must wait for that work (on
    /// shutdown, after a Lambda invocation) puts its own [`DeferredTasks`] here.
    pub after_response: Arc<dyn AfterResponse>,
    /// Which webhook URLs are accepted and connected to (no plain-HTTP loopback unless a host
    /// says so: [`Adapters::with_webhook_urls`]).
    pub webhook_urls: UrlPolicy,
    /// Sends webhooks, under `webhook_urls`.
    pub webhooks: Arc<dyn WebhookTransport>,
    /// Seals credentials kept at rest (a provider-native batch's per-request API keys). The
    /// embedded and AWS stacks set theirs ([`Adapters::with_sealer`]); without one, sealing fails.
    pub sealer: Arc<dyn CredentialSealer>,
    /// Where measurements go (EMF lines in Lambda, an in-memory registry locally).
    pub metrics: Arc<dyn MetricsSink>,
    /// The API key tag secret, read once per process, and what untagged keys get.
    pub key_tags: Arc<KeyTags>,
    /// Reads providers' `ssm::` keys (SSM on AWS, files under the data directory locally), each
    /// once per process ([`Adapters::with_provider_secrets`]); without one, such keys fail.
    pub provider_secrets: Arc<dyn ProviderSecrets>,
    /// Days inference and feedback records are kept, 0 = forever ([`Adapters::record_retention`]).
    pub record_retention_days: u32,
    /// Shards of each due-work lane ([`crate::scheduler::DueIndex::with_shards`]).
    pub due_index_shards: u32,
}

impl Adapters {
    pub fn new(state: Arc<dyn StateStore>, blobs: Arc<dyn BlobStore>, queue: Arc<dyn JobQueue>) -> Self {
        let key_tags = Arc::new(KeyTags::new(Arc::clone(&state), UntaggedKeys::default()));
        Self {
            state,
            blobs,
            queue,
            clock: Arc::new(SystemClock),
            ids: Arc::new(UuidV7Ids),
            after_response: Arc::new(DeferredTasks::new()),
            webhook_urls: UrlPolicy::default(),
            webhooks: webhooks::webhook_transport(UrlPolicy::default()),
            sealer: Arc::new(NoCredentialSealer),
            metrics: Arc::new(NoMetrics),
            key_tags,
            provider_secrets: Arc::new(NoProviderSecrets),
            record_retention_days: DEFAULT_RECORD_RETENTION_DAYS,
            due_index_shards: DEFAULT_DUE_INDEX_SHARDS,
        }
    }

    /// Send and receive jobs through `queue`.
    #[cfg(feature = "aws")]
    pub(crate) fn with_queue(mut self, queue: Arc<dyn JobQueue>) -> Self {
        self.queue = queue;
        self
    }

    /// Verify keys minted before keys carried a tag as `untagged` says.
    pub fn with_untagged_keys(mut self, untagged: UntaggedKeys) -> Self {
        self.key_tags = Arc::new(KeyTags::new(Arc::clone(&self.state), untagged));
        self
    }

    /// Read providers' `ssm::` keys from `store`, each once per process (kept after the first
    /// successful read; a failed read is tried again on the next use).
    pub fn with_provider_secrets(mut self, store: Arc<dyn ProviderSecrets>) -> Self {
        self.provider_secrets = Arc::new(CachedProviderSecrets::new(store));
        self
    }

    /// Send measurements to `metrics` (webhook posts included).
    pub fn with_metrics(mut self, metrics: Arc<dyn MetricsSink>) -> Self {
        self.metrics = metrics;
        let policy = self.webhook_urls;
        self.with_webhook_urls(policy)
    }

    /// Seal credentials kept at rest with `sealer`.
    pub(crate) fn with_sealer(mut self, sealer: Arc<dyn CredentialSealer>) -> Self {
        self.sealer = sealer;
        self
    }

    /// Accept and send webhooks under `policy` (the local server allows plain-HTTP loopback URLs).
    pub fn with_webhook_urls(mut self, policy: UrlPolicy) -> Self {
        self.webhook_urls = policy;
        self.webhooks = webhooks::metered_transport(webhooks::webhook_transport(policy), Arc::clone(&self.metrics));
        self
    }

    pub fn api_keys(&self) -> ApiKeyService {
        ApiKeyService::new(Arc::clone(&self.state), Arc::clone(&self.clock), Arc::clone(&self.ids))
            .with_tags(Arc::clone(&self.key_tags))
    }
}

/// How long an authentication result is reused before storage is asked again.
#[derive(Debug, Clone, Copy)]
pub struct AuthSettings {
    pub mode: AuthMode,
    pub cache_ttl: Duration,
}

impl Adapters {
    pub fn files(&self) -> FilesService {
        FilesService::new(
            Arc::clone(&self.state),
            Arc::clone(&self.blobs),
            Arc::clone(&self.clock),
            Arc::clone(&self.ids),
        )
    }
}

/// The records ports over the state and blob stores (`adapters::records`).
impl Adapters {
    pub fn inference_records(&self) -> Arc<dyn InferenceStore> {
        Arc::new(StateInferenceStore::new(
            Arc::clone(&self.state),
            Arc::clone(&self.blobs),
            self.record_retention(),
        ))
    }

    pub(crate) fn model_cache(&self) -> Arc<dyn ModelCache> {
        Arc::new(StateModelCache::new(
            Arc::clone(&self.state),
            Arc::clone(&self.blobs),
            Arc::clone(&self.clock),
        ))
    }

    pub fn feedback_store(&self) -> Arc<dyn FeedbackStore> {
        Arc::new(StateFeedbackStore::new(
            Arc::clone(&self.state),
            Arc::clone(&self.blobs),
            self.record_retention(),
        ))
    }

    /// How long inference and feedback records are kept ([`Adapters::with_record_retention_days`]).
    /// Adaptive experiments' records; episode bindings and counted values kept as long as the
    /// inference and feedback records.
    pub fn experiment_store(&self) -> ExperimentStore {
        let keep_for = (self.record_retention_days > 0)
            .then(|| Duration::from_secs(u64::from(self.record_retention_days) * 24 * 3600));
        ExperimentStore::new(Arc::clone(&self.state), keep_for)
    }

    pub(crate) fn record_retention(&self) -> RecordRetention {
        RecordRetention::new(self.record_retention_days, Arc::clone(&self.clock))
    }

    /// Keep inference and feedback records `days` (0 = forever).
    pub(crate) fn with_record_retention_days(mut self, days: u32) -> Self {
        self.record_retention_days = days;
        self
    }

    /// Spread each due-work lane over `shards` owners.
    pub(crate) fn with_due_index_shards(mut self, shards: u32) -> Self {
        self.due_index_shards = shards;
        self
    }
}

/// `POST /feedback` checked against the configured metrics and the inferences in `records`.
pub(crate) fn feedback_service(
    loaded: &LoadedConfig,
    adapters: &Adapters,
    records: Arc<dyn InferenceStore>,
) -> Arc<FeedbackService> {
    let service = FeedbackService::new(
        loaded.config.metrics.clone(),
        records,
        adapters.feedback_store(),
        Arc::clone(&adapters.clock),
        Arc::clone(&adapters.ids),
    );
    let experiments = loaded.functions.experiments();
    if experiments.is_empty() {
        return Arc::new(service);
    }
    let counting = ExperimentFeedback::new(adapters.experiment_store(), experiments);
    Arc::new(service.with_experiments(Arc::new(counting)))
}

/// The inference path's side of adaptive experiments: episodes bound to variants.
pub fn experiments(loaded: &LoadedConfig, adapters: &Adapters) -> Arc<Experiments> {
    Arc::new(Experiments::new(
        adapters.experiment_store(),
        Arc::clone(&adapters.clock),
        &loaded.functions,
    ))
}

/// The ports the batch engine is built over; `/batch_inference` items' records go to `records`,
/// ended batches are told to the batch event webhooks.
fn batch_deps(adapters: &Adapters, records: Arc<dyn InferenceStore>) -> BatchDeps {
    BatchDeps {
        state: Arc::clone(&adapters.state),
        blobs: Arc::clone(&adapters.blobs),
        queue: Arc::clone(&adapters.queue),
        clock: Arc::clone(&adapters.clock),
        ids: Arc::clone(&adapters.ids),
        files: adapters.files(),
        records,
        events: webhooks::batch_webhooks(adapters),
        sealer: Arc::clone(&adapters.sealer),
        metrics: Arc::clone(&adapters.metrics),
    }
}

/// The batch engine over `adapters`, calling models through `layers` (`/v1/batches` lines through
/// the inference layer, `/batch_inference` items through the function layer, their inferences
/// stored in its records); ended batches are told to the batch event webhooks.
pub fn batch_engine(adapters: &Adapters, layers: &ModelLayers, settings: BatchSettings) -> BatchEngine {
    let models = BatchModels {
        inference: Arc::clone(&layers.inference),
        functions: Arc::clone(&layers.functions),
    };
    BatchEngine::new(batch_deps(adapters, Arc::clone(&layers.records)), models, settings)
}

/// The function layer's checks over a validated configuration: what the APIs that call no model
/// (`/batch_inference`, `/async_predict`) check submissions with.
pub(crate) fn function_checks(loaded: &LoadedConfig, adapters: &Adapters) -> FunctionChecks {
    FunctionChecks::new(
        Arc::clone(&loaded.functions),
        Arc::clone(&adapters.clock),
        Arc::clone(&adapters.ids),
    )
}

/// The inference layer for a validated configuration.
pub fn inference_service(config: &Config, adapters: &Adapters) -> Result<Arc<InferenceService>, InitError> {
    let sagemaker = Arc::new(crate::adapters::sagemaker_runtime::SageMakerRuntime::default());
    let router = ModelRouter::from_config(config, sagemaker, Arc::clone(&adapters.provider_secrets))?
        .with_metrics(Arc::clone(&adapters.metrics));
    Ok(Arc::new(InferenceService::new(
        router,
        Arc::clone(&adapters.clock),
        Arc::clone(&adapters.ids),
    )))
}

/// The function layer (`/inference`) over the inference layer, writing records and cache entries
/// through `records` and the adapters' cache after each response.
pub fn function_service(
    loaded: &LoadedConfig,
    adapters: &Adapters,
    inference: Arc<InferenceService>,
    records: Arc<dyn InferenceStore>,
) -> Arc<FunctionService> {
    let persistence = InferencePersistence {
        records,
        cache: adapters.model_cache(),
        cache_config: loaded.config.gateway.cache.clone(),
        after_response: Arc::clone(&adapters.after_response),
        clock: Arc::clone(&adapters.clock),
        metrics: Arc::clone(&adapters.metrics),
    };
    let dicl_sets = LoadedSets::new(
        ExampleStore::new(Arc::clone(&adapters.blobs)),
        Arc::clone(&adapters.clock),
    );
    let service = FunctionService::new(
        Arc::clone(&loaded.functions),
        inference,
        persistence,
        Arc::clone(&adapters.ids),
        Arc::new(dicl_sets),
    );
    if loaded.functions.experiments().is_empty() {
        return Arc::new(service);
    }
    Arc::new(service.with_experiments(experiments(loaded, adapters)))
}

/// `POST /dicl/build`: DICL examples from the function layer's records and the feedback on them,
/// published where the function layer reads them.
pub(crate) fn dicl_builder(loaded: &LoadedConfig, adapters: &Adapters, layers: &ModelLayers) -> Arc<DiclBuilder> {
    Arc::new(DiclBuilder {
        functions: Arc::clone(&loaded.functions),
        inference: Arc::clone(&layers.inference),
        records: Arc::clone(&layers.records),
        feedback: adapters.feedback_store(),
        sets: layers.functions.dicl_sets(),
        clock: Arc::clone(&adapters.clock),
        ids: Arc::clone(&adapters.ids),
    })
}

/// Async requests' records, due entries and slots over `adapters` (what the API, the runner and
/// the due work share); webhook URLs are accepted under the adapters' policy (loopback only
/// locally).
pub fn async_requests(loaded: &LoadedConfig, adapters: &Adapters) -> Arc<AsyncRequests> {
    let deps = AsyncDeps {
        state: Arc::clone(&adapters.state),
        blobs: Arc::clone(&adapters.blobs),
        queue: Arc::clone(&adapters.queue),
        clock: Arc::clone(&adapters.clock),
        ids: Arc::clone(&adapters.ids),
    };
    Arc::new(
        AsyncRequests::new(deps, AsyncSettings::from_config(&loaded.config, adapters.webhook_urls))
            .with_metrics(Arc::clone(&adapters.metrics))
            .with_due_index_shards(adapters.due_index_shards),
    )
}

/// The async API (`/async_predict`): submissions checked against the configuration alone.
pub fn async_api(loaded: &LoadedConfig, adapters: &Adapters) -> Arc<AsyncApi> {
    let check = SubmissionCheck::new(&loaded.config, function_checks(loaded, adapters));
    Arc::new(AsyncApi::new(async_requests(loaded, adapters), check))
}

/// The state every host's routes share: authentication and request metrics.
pub(crate) fn host_state(adapters: &Adapters, auth: AuthSettings) -> HostState {
    HostState {
        auth: Arc::new(Authenticator::new(adapters.api_keys(), auth.mode, auth.cache_ttl)),
        metrics: Arc::clone(&adapters.metrics),
    }
}

/// The inference layer, the function layer over it, and the store of the function layer's
/// records: what the inference and batches functions build their handlers' state on.
#[derive(Clone)]
pub struct ModelLayers {
    pub inference: Arc<InferenceService>,
    pub functions: Arc<FunctionService>,
    pub records: Arc<dyn InferenceStore>,
}

impl ModelLayers {
    pub fn new(loaded: &LoadedConfig, adapters: &Adapters) -> Result<Self, InitError> {
        Ok(Self::over(
            loaded,
            adapters,
            inference_service(&loaded.config, adapters)?,
        ))
    }

    /// The function layer and its records over an inference layer already built.
    pub fn over(loaded: &LoadedConfig, adapters: &Adapters, inference: Arc<InferenceService>) -> Self {
        let records = adapters.inference_records();
        let functions = function_service(loaded, adapters, Arc::clone(&inference), Arc::clone(&records));
        Self {
            inference,
            functions,
            records,
        }
    }
}

/// The inference function's handlers' state.
pub(crate) fn inference_state(loaded: &LoadedConfig, adapters: &Adapters, layers: &ModelLayers) -> InferenceState {
    InferenceState {
        feedback: feedback_service(loaded, adapters, Arc::clone(&layers.records)),
        experiments: experiments(loaded, adapters),
        lmi_api: Arc::new(LmiApi::new(
            Arc::clone(&layers.inference),
            loaded.config.lmi_api.clone(),
        )),
        records: Arc::clone(&layers.records),
        functions: Arc::clone(&layers.functions),
        inference: Arc::clone(&layers.inference),
        dicl: dicl_builder(loaded, adapters, layers),
    }
}

/// The files function's handlers' state.
pub(crate) fn files_state(adapters: &Adapters, http: HttpSettings) -> FilesState {
    FilesState {
        files: Arc::new(adapters.files()),
        settings: http,
    }
}

/// The batches function's handlers' state: the batch API and the async API. Neither calls a
/// model (they check submissions against the configuration and queue them), so no model layer
/// is built.
pub(crate) fn batches_state(
    loaded: &LoadedConfig,
    adapters: &Adapters,
    http: HttpSettings,
    batches: BatchSettings,
) -> BatchesState {
    let deps = batch_deps(adapters, adapters.inference_records());
    BatchesState {
        async_requests: async_api(loaded, adapters),
        batches: Arc::new(batch_api(&deps, function_checks(loaded, adapters), batches)),
        webhook_secrets: webhooks::webhook_secrets(adapters),
        webhook_endpoints: webhooks::webhook_endpoints(adapters),
        batch_webhooks: webhooks::batch_webhooks(adapters),
        settings: http,
    }
}

/// Every function's handlers' state from a validated configuration and adapters: what the local
/// server serves.
pub fn app_state(
    loaded: &LoadedConfig,
    adapters: &Adapters,
    auth: AuthSettings,
    http: HttpSettings,
    batches: BatchSettings,
) -> Result<AppState, InitError> {
    let layers = ModelLayers::new(loaded, adapters)?;
    Ok(AppState {
        host: host_state(adapters, auth),
        inference: inference_state(loaded, adapters, &layers),
        files: files_state(adapters, http.clone()),
        batches: batches_state(loaded, adapters, http, batches),
    })
}

/// What the background work — the queue's jobs and the scheduled tasks — is built from: the same
/// in the worker and poller Lambdas as in the local server.
#[derive(Clone)]
pub struct WorkerParts {
    pub adapters: Adapters,
    /// What async requests run through.
    pub layers: ModelLayers,
    pub batches: BatchEngine,
    pub async_requests: Arc<AsyncRequests>,
    /// The longest a job runs when its host gives no deadline of its own.
    pub max_run: Duration,
}

impl WorkerParts {
    /// The parts for a validated configuration over `adapters`, calling models through `inference`.
    pub fn new(
        loaded: &LoadedConfig,
        adapters: &Adapters,
        inference: Arc<InferenceService>,
        batch_settings: BatchSettings,
    ) -> Self {
        let max_run = batch_settings.max_run;
        let layers = ModelLayers::over(loaded, adapters, inference);
        Self {
            async_requests: async_requests(loaded, adapters),
            batches: batch_engine(adapters, &layers, batch_settings),
            layers,
            adapters: adapters.clone(),
            max_run,
        }
    }
}

/// The one place job runners are registered: every family of queued work and who runs it.
pub fn job_dispatcher(parts: &WorkerParts) -> JobDispatcher {
    JobDispatcher::new(Arc::clone(&parts.adapters.queue), parts.max_run)
        .with_metrics(Arc::clone(&parts.adapters.metrics))
        .with_runner(JobFamily::Batch, Arc::new(parts.batches.worker()))
        .with_runner(JobFamily::Webhook, webhooks::batch_webhooks(&parts.adapters))
        .with_runner(
            JobFamily::AsyncRequest,
            Arc::new(AsyncJobs::new(
                Arc::clone(&parts.async_requests),
                EndpointCalls {
                    inference: Arc::clone(&parts.layers.inference),
                    functions: Arc::clone(&parts.layers.functions),
                },
                Arc::clone(&parts.adapters.webhooks),
                webhooks::webhook_secrets(&parts.adapters),
            )),
        )
}

/// The one place scheduled tasks are registered: everything the poller (a timer locally) runs.
pub fn scheduler(parts: &WorkerParts) -> Scheduler {
    Scheduler::new(Arc::clone(&parts.adapters.clock))
        .with_task(Arc::new(FilesSweep::new(parts.adapters.files())))
        .with_task(Arc::new(parts.batches.recovery()))
        .with_task(Arc::new(AsyncDueWork::new(Arc::clone(&parts.async_requests))))
        .with_task(webhooks::batch_webhooks(&parts.adapters))
        .with_task(Arc::new(ExperimentUpdates::new(
            parts.adapters.experiment_store(),
            parts.layers.functions.functions().experiments().to_vec(),
        )))
}

#[cfg(all(test, feature = "embedded"))]
mod arming_tests;
