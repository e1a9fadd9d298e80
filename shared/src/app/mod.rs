//! Wiring: adapters + configuration → the shared router. Lambda `main`s and the local server call
//! these and nothing else.

pub mod aws;
pub mod config_source;
#[cfg(feature = "embedded")]
pub mod embedded;
pub mod lambda;
pub mod lambda_host;

use crate::adapters::DeferredTasks;
use crate::auth::{ApiKeyService, AuthMode, Authenticator};
use crate::batches::{BatchDeps, BatchService, BatchSettings};
use crate::config::Config;
use crate::files::FilesService;
use crate::http::{AppState, HttpSettings};
use crate::inference::InferenceService;
use crate::ports::{AfterResponse, BlobStore, Clock, IdSource, JobQueue, StateStore, SystemClock, UuidV7Ids};
use crate::providers::router::ModelRouter;
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
}

impl Adapters {
    pub fn new(state: Arc<dyn StateStore>, blobs: Arc<dyn BlobStore>, queue: Arc<dyn JobQueue>) -> Self {
        Self {
            state,
            blobs,
            queue,
            clock: Arc::new(SystemClock),
            ids: Arc::new(UuidV7Ids),
            after_response: Arc::new(DeferredTasks::new()),
        }
    }

    pub fn api_keys(&self) -> ApiKeyService {
        ApiKeyService::new(Arc::clone(&self.state), Arc::clone(&self.clock), Arc::clone(&self.ids))
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

/// The batch engine over `adapters`, calling models through `inference`.
pub fn batch_service(
    adapters: &Adapters,
    inference: Arc<InferenceService>,
    settings: BatchSettings,
) -> Arc<BatchService> {
    Arc::new(BatchService::new(
        BatchDeps {
            state: Arc::clone(&adapters.state),
            blobs: Arc::clone(&adapters.blobs),
            queue: Arc::clone(&adapters.queue),
            clock: Arc::clone(&adapters.clock),
            ids: Arc::clone(&adapters.ids),
            files: adapters.files(),
            inference,
        },
        settings,
    ))
}

/// The inference layer for a validated configuration.
pub fn inference_service(config: &Config, adapters: &Adapters) -> Result<Arc<InferenceService>, String> {
    let router = ModelRouter::from_config(config)?;
    Ok(Arc::new(InferenceService::new(
        router,
        Arc::clone(&adapters.clock),
        Arc::clone(&adapters.ids),
    )))
}

/// Build the handler state from a validated configuration and adapters.
pub fn app_state(
    config: &Config,
    adapters: &Adapters,
    auth: AuthSettings,
    http: HttpSettings,
    batches: BatchSettings,
) -> Result<AppState, String> {
    let inference = inference_service(config, adapters)?;
    Ok(AppState {
        batches: batch_service(adapters, Arc::clone(&inference), batches),
        inference,
        files: Arc::new(adapters.files()),
        auth: Arc::new(Authenticator::new(adapters.api_keys(), auth.mode, auth.cache_ttl)),
        settings: http,
        after_response: Arc::clone(&adapters.after_response),
    })
}
