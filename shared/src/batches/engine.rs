//! The batch engine's roles, wired from one set of ports. Each role holds only what it uses:
//!
//! | role | file | does |
//! |---|---|---|
//! | [`BatchApi`] | `api.rs`, `tensorzero_api.rs`, `tensorzero_poll.rs` | create, get, list, cancel; `/batch_inference` submit and poll |
//! | [`Planner`] | `validate_job.rs` | the `validate` job: checks the input, writes and enqueues chunks |
//! | [`ChunkRunner`] | `chunk_run.rs`, `progress.rs`, `slots.rs` | the `chunk` job: leases a chunk, runs its lines, saves segments |
//! | [`Finalizer`] | `finalize.rs`, `tensorzero_pages.rs` | ends a batch: result files or inference pages, clean-up, its event |
//! | [`NativeParts`] | `native/` | the `native` job and polls: lines on providers' own batch APIs |
//! | [`BatchRecovery`] | `recovery.rs`, `takeover.rs` | the scheduled pass: finalize, requeue, poll, expire |
//! | [`BatchJobs`] | `jobs.rs` | hands each queued batch job to its role |
//!
//! Two values are shared by roles: [`LineKinds`] (the formats' lines: the one way lines reach the
//! model layers) and [`Live`] (running chunks' unsaved counts).

use super::api::BatchApi;
use super::chunk_run::ChunkRunner;
use super::finalize::Finalizer;
use super::lines::LineKinds;
use super::live::Live;
use super::native::NativeParts;
use super::validate_job::Planner;
use super::{BatchJobs, BatchRecovery, BatchSettings};
use crate::auth::RevokedKeys;
use crate::files::FilesService;
use crate::idempotency::IdempotencyKeys;
use crate::inference::InferenceService;
use crate::ports::{
    BatchEventSink, BlobStore, Clock, CredentialSealer, IdSource, InferenceStore, JobQueue, MetricsSink, StateStore,
};
use crate::tensorzero::function_calls::{FunctionChecks, FunctionService};
use std::sync::Arc;

/// The ports and layers the batch engine is built over.
#[derive(Clone)]
pub struct BatchDeps {
    pub state: Arc<dyn StateStore>,
    pub blobs: Arc<dyn BlobStore>,
    pub queue: Arc<dyn JobQueue>,
    pub clock: Arc<dyn Clock>,
    pub ids: Arc<dyn IdSource>,
    pub files: FilesService,
    /// Where `/batch_inference` items' inference records go.
    pub records: Arc<dyn InferenceStore>,
    /// Told when a batch ends (batch event webhooks).
    pub events: Arc<dyn BatchEventSink>,
    /// Seals dynamic credentials kept while lines wait or provider batches poll.
    pub sealer: Arc<dyn CredentialSealer>,
    /// Lines and chunk runs are measured here.
    pub metrics: Arc<dyn MetricsSink>,
}

/// The model layers the engine's runs call.
#[derive(Clone)]
pub struct BatchModels {
    /// Runs `/v1/batches` lines, and provider batches.
    pub inference: Arc<InferenceService>,
    /// Runs `/batch_inference` items.
    pub functions: Arc<FunctionService>,
}

/// Builds the engine's roles over [`BatchDeps`] and the model layers: the API for the HTTP
/// handlers, the worker for the queue's batch jobs, recovery for the scheduler.
#[derive(Clone)]
pub struct BatchEngine {
    deps: BatchDeps,
    models: BatchModels,
    settings: Arc<BatchSettings>,
}

/// Create, get, list and cancel batches; submit and poll `/batch_inference`, whose submissions
/// are checked by `checks` (the configuration alone: the API calls no model, so a host that
/// serves only the API needs no model layer).
pub(crate) fn batch_api(deps: &BatchDeps, checks: FunctionChecks, settings: BatchSettings) -> BatchApi {
    api_over(deps, checks, Arc::new(settings))
}

fn api_over(deps: &BatchDeps, checks: FunctionChecks, settings: Arc<BatchSettings>) -> BatchApi {
    BatchApi {
        state: Arc::clone(&deps.state),
        blobs: Arc::clone(&deps.blobs),
        queue: Arc::clone(&deps.queue),
        clock: Arc::clone(&deps.clock),
        ids: Arc::clone(&deps.ids),
        files: deps.files.clone(),
        idempotency: IdempotencyKeys::new(Arc::clone(&deps.state), Arc::clone(&deps.clock)),
        functions: checks,
        sealer: Arc::clone(&deps.sealer),
        records: Arc::clone(&deps.records),
        live: live_over(deps, &settings),
        settings,
    }
}

fn live_over(deps: &BatchDeps, settings: &BatchSettings) -> Live {
    Live {
        state: Arc::clone(&deps.state),
        clock: Arc::clone(&deps.clock),
        always: settings.live_progress_always,
    }
}

impl BatchEngine {
    pub fn new(deps: BatchDeps, models: BatchModels, settings: BatchSettings) -> Self {
        Self {
            deps,
            models,
            settings: Arc::new(settings),
        }
    }

    /// [`batch_api`] with the function layer's own checks.
    pub fn api(&self) -> BatchApi {
        api_over(
            &self.deps,
            self.models.functions.checks().clone(),
            Arc::clone(&self.settings),
        )
    }

    /// The runner of the queue's batch jobs.
    pub fn worker(&self) -> BatchJobs {
        let finalizer = self.finalizer();
        // One revocation cache for the worker's roles: a revoked key is read once, not per role.
        let revoked_keys = self.revoked_keys();
        BatchJobs {
            planner: self.planner(Arc::clone(&finalizer)),
            chunks: self.chunk_runner(Arc::clone(&finalizer), Arc::clone(&revoked_keys)),
            native: Arc::new(self.native_parts(Arc::clone(&finalizer), revoked_keys)),
            finalizer,
        }
    }

    /// The scheduled pass over unfinished batches (and the local server's takeover).
    pub fn recovery(&self) -> BatchRecovery {
        let deps = &self.deps;
        let finalizer = self.finalizer();
        BatchRecovery {
            state: Arc::clone(&deps.state),
            queue: Arc::clone(&deps.queue),
            clock: Arc::clone(&deps.clock),
            settings: Arc::clone(&self.settings),
            native: Arc::new(self.native_parts(Arc::clone(&finalizer), self.revoked_keys())),
            finalizer,
        }
    }

    fn planner(&self, finalizer: Arc<Finalizer>) -> Planner {
        let deps = &self.deps;
        Planner {
            state: Arc::clone(&deps.state),
            blobs: Arc::clone(&deps.blobs),
            queue: Arc::clone(&deps.queue),
            clock: Arc::clone(&deps.clock),
            settings: Arc::clone(&self.settings),
            kinds: self.kinds(),
            finalizer,
        }
    }

    fn chunk_runner(&self, finalizer: Arc<Finalizer>, revoked_keys: Arc<RevokedKeys>) -> ChunkRunner {
        let deps = &self.deps;
        ChunkRunner {
            state: Arc::clone(&deps.state),
            blobs: Arc::clone(&deps.blobs),
            queue: Arc::clone(&deps.queue),
            clock: Arc::clone(&deps.clock),
            ids: Arc::clone(&deps.ids),
            settings: Arc::clone(&self.settings),
            metrics: Arc::clone(&deps.metrics),
            revoked_keys,
            sealer: Arc::clone(&deps.sealer),
            kinds: self.kinds(),
            live: self.live(),
            finalizer,
        }
    }

    fn native_parts(&self, finalizer: Arc<Finalizer>, revoked_keys: Arc<RevokedKeys>) -> NativeParts {
        let deps = &self.deps;
        NativeParts {
            state: Arc::clone(&deps.state),
            blobs: Arc::clone(&deps.blobs),
            queue: Arc::clone(&deps.queue),
            clock: Arc::clone(&deps.clock),
            ids: Arc::clone(&deps.ids),
            settings: Arc::clone(&self.settings),
            inference: Arc::clone(&self.models.inference),
            sealer: Arc::clone(&deps.sealer),
            revoked_keys,
            metrics: Arc::clone(&deps.metrics),
            kinds: self.kinds(),
            finalizer,
        }
    }

    fn finalizer(&self) -> Arc<Finalizer> {
        let deps = &self.deps;
        Arc::new(Finalizer {
            state: Arc::clone(&deps.state),
            blobs: Arc::clone(&deps.blobs),
            queue: Arc::clone(&deps.queue),
            clock: Arc::clone(&deps.clock),
            ids: Arc::clone(&deps.ids),
            files: deps.files.clone(),
            records: Arc::clone(&deps.records),
            events: Arc::clone(&deps.events),
            kinds: self.kinds(),
            live: self.live(),
        })
    }

    fn kinds(&self) -> LineKinds {
        let deps = &self.deps;
        LineKinds {
            inference: Arc::clone(&self.models.inference),
            functions: Arc::clone(&self.models.functions),
            ids: Arc::clone(&deps.ids),
            sealer: Arc::clone(&deps.sealer),
        }
    }

    fn live(&self) -> Live {
        live_over(&self.deps, &self.settings)
    }

    fn revoked_keys(&self) -> Arc<RevokedKeys> {
        let deps = &self.deps;
        Arc::new(RevokedKeys::new(
            Arc::clone(&deps.state),
            Arc::clone(&deps.clock),
            Arc::clone(&deps.ids),
        ))
    }
}
