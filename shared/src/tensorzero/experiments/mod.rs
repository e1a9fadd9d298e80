//! Adaptive experiments (`[functions.F.experimentation] type = "adaptive"`): track-and-stop over a
//! metric's feedback. Three parts meet in the state store ([`store`]):
//! - feedback on an inference or an episode of an experiment's function is counted for the
//!   variant that served it ([`ExperimentFeedback`], called by `POST /feedback`);
//! - the poller task ([`ExperimentUpdates`]) recomputes each experiment's [`Decision`] every
//!   `update_period_s` from the latest `max_samples_per_variant` counted values per variant;
//! - the inference path ([`Experiments`]) reads the decision (cached per instance, refreshed),
//!   draws a variant for a new episode and binds the episode to it: the first binding wins, so
//!   an episode keeps its variant.

mod allocation;
mod decision;
mod stopping;
mod store;
mod task;

pub use decision::Decision;
pub use stopping::VariantStats;
pub use store::{ExperimentStore, StoredExperiment};
#[cfg(feature = "aws")]
pub(crate) use store::{EPISODE_KIND, OBSERVATION_KIND, STATE_KIND};
pub use task::ExperimentUpdates;

use super::{Function, FunctionSet};
use crate::config::experimentation::AdaptiveExperimentation;
use crate::config::{MetricConfig, MetricOptimize};
use crate::ports::inference_records::{FeedbackTarget, InferenceRecord};
use crate::ports::{Clock, InferenceStore, ProjectId, StorageError};
use serde::Serialize;
use std::collections::{BTreeMap, BTreeSet};
use std::sync::atomic::AtomicU64;
use std::sync::{Arc, Mutex};
use uuid::Uuid;

/// The longest a cached decision is used before it is read again.
const MAX_CACHE_MS: i64 = 60_000;

/// One adaptive experiment: its function, its configuration and which way its metric goes.
#[derive(Debug, Clone)]
pub(crate) struct Experiment {
    pub function: String,
    pub config: AdaptiveExperimentation,
    pub maximise: bool,
}

/// Every adaptive experiment of compiled `functions` (see [`FunctionSet::experiments`]).
pub(super) fn experiments_of(functions: &FunctionSet, metrics: &BTreeMap<String, MetricConfig>) -> Vec<Experiment> {
    functions
        .functions()
        .filter_map(|function| {
            let config = function.config.experimentation.as_ref()?.adaptive()?;
            let maximise = metrics
                .get(&config.metric)
                .is_none_or(|metric| metric.optimize == MetricOptimize::Max);
            Some(Experiment {
                function: function.name.clone(),
                config: config.clone(),
                maximise,
            })
        })
        .collect()
}

struct Cached {
    decision: Arc<Decision>,
    read_at_ms: i64,
}

/// The inference path's side: an episode's variant under an adaptive experiment.
pub struct Experiments {
    store: ExperimentStore,
    clock: Arc<dyn Clock>,
    cache: Mutex<BTreeMap<String, Cached>>,
    /// Round-robin turns of each function's nursery, per instance.
    turns: BTreeMap<String, AtomicU64>,
}

impl Experiments {
    pub fn new(store: ExperimentStore, clock: Arc<dyn Clock>, functions: &FunctionSet) -> Self {
        let turns = functions
            .functions()
            .filter(|f| f.adaptive().is_some())
            .map(|f| (f.name.clone(), AtomicU64::new(0)))
            .collect();
        Self {
            store,
            clock,
            cache: Mutex::new(BTreeMap::new()),
            turns,
        }
    }

    /// The decision of `function`'s experiment: cached, read again once older than the update
    /// period (at most a minute); the initial one until the poller has computed one.
    async fn decision(&self, function: &Function, config: &AdaptiveExperimentation) -> Arc<Decision> {
        let now = self.clock.now_unix_ms();
        let max_age = (config.update_period_s as i64).saturating_mul(1000).min(MAX_CACHE_MS);
        let cached = self.cache.lock().ok().and_then(|cache| {
            cache
                .get(&function.name)
                .map(|c| (Arc::clone(&c.decision), now - c.read_at_ms < max_age))
        });
        if let Some((decision, true)) = &cached {
            return Arc::clone(decision);
        }
        let decision = match self.store.load(&function.name).await {
            Ok(Some(stored)) => Arc::new(stored.decision),
            Ok(None) => Arc::new(Decision::initial(&config.candidate_variants)),
            Err(err) => {
                tracing::warn!(function = %function.name, error = %err, "could not read the experiment's state; using the last one");
                return cached
                    .map(|(decision, _)| decision)
                    .unwrap_or_else(|| Arc::new(Decision::initial(&config.candidate_variants)));
            }
        };
        if let Ok(mut cache) = self.cache.lock() {
            cache.insert(
                function.name.clone(),
                Cached {
                    decision: Arc::clone(&decision),
                    read_at_ms: now,
                },
            );
        }
        decision
    }

    /// The variant `episode_id` of `project` is bound to under `function`'s adaptive experiment
    /// (bound now with a fresh draw when it was not): `None` for a function without one. When the
    /// draw or the bound variant yields no variant the function still serves, the first
    /// fallback; `None` without fallbacks.
    pub(crate) async fn episode_variant(
        &self,
        project: &ProjectId,
        function: &Function,
        episode_id: Uuid,
    ) -> Option<String> {
        let config = function.adaptive()?;
        let allowed: BTreeSet<&str> = config
            .allowed_variants()
            .map(String::as_str)
            .filter(|name| function.variant(name).is_ok())
            .collect();
        let first_fallback = || {
            config
                .fallback_variants
                .iter()
                .find(|name| allowed.contains(name.as_str()))
                .cloned()
        };
        let decision = self.decision(function, config).await;
        let turn = self.turns.get(&function.name)?;
        let Some(drawn) = decision.sample(rand::random::<f64>(), turn, |name| allowed.contains(name)) else {
            return first_fallback();
        };
        let now = self.clock.now_unix_ms();
        match self
            .store
            .bind_episode(project, &function.name, episode_id, drawn, now)
            .await
        {
            Ok(bound) if allowed.contains(bound.as_str()) => Some(bound),
            Ok(_) => first_fallback(),
            Err(err) => {
                tracing::warn!(function = %function.name, %episode_id, error = %err, "could not bind the episode's variant; serving the drawn one unbound");
                Some(drawn.to_owned())
            }
        }
    }

    /// What `GET /experiments/{function}` answers; `None` for a function without an adaptive
    /// experiment.
    pub async fn report(&self, function: &Function) -> Result<Option<ExperimentReport>, StorageError> {
        let Some(config) = function.adaptive() else {
            return Ok(None);
        };
        let stored = self.store.load(&function.name).await?;
        Ok(Some(ExperimentReport::new(function, config, stored)))
    }
}

/// An adaptive experiment as it stands: what the API and the CLI show.
#[derive(Debug, Clone, PartialEq, Serialize, utoipa::ToSchema)]
pub struct ExperimentReport {
    pub function_name: String,
    pub metric: String,
    pub candidate_variants: Vec<String>,
    pub fallback_variants: Vec<String>,
    /// Where the experiment stands (`nursery` until the poller first computed it).
    pub decision: Decision,
    /// The winner, once the stopping rule named one.
    pub winner: Option<String>,
    /// The share of new episodes each variant gets now.
    pub probabilities: BTreeMap<String, f64>,
    /// Each candidate's counted feedback (empty until first computed).
    pub variants: Vec<VariantStats>,
    /// When the decision was computed (RFC 3339), `null` before the first time.
    pub computed_at: Option<String>,
    pub update_period_s: u64,
}

impl ExperimentReport {
    pub(crate) fn new(function: &Function, config: &AdaptiveExperimentation, stored: Option<StoredExperiment>) -> Self {
        let (decision, variants, computed_at) = match stored {
            Some(stored) => (
                stored.decision,
                stored.variants,
                Some(crate::ports::inference_records::rfc3339(stored.computed_at_ms)),
            ),
            None => (Decision::initial(&config.candidate_variants), Vec::new(), None),
        };
        Self {
            function_name: function.name.clone(),
            metric: config.metric.clone(),
            candidate_variants: config.candidate_variants.clone(),
            fallback_variants: config.fallback_variants.clone(),
            winner: decision.winner().map(str::to_owned),
            probabilities: decision.display_probabilities(|name| function.variant(name).is_ok()),
            decision,
            variants,
            computed_at,
            update_period_s: config.update_period_s,
        }
    }
}

/// `POST /feedback`'s side: a metric value counted for the variant that earned it.
pub struct ExperimentFeedback {
    store: ExperimentStore,
    /// The experiments by metric: `(function, its experiment)`.
    by_metric: BTreeMap<String, Vec<String>>,
}

/// How many of an episode's inferences are read to find its variants.
const EPISODE_PAGE: usize = 100;

impl ExperimentFeedback {
    pub(crate) fn new(store: ExperimentStore, experiments: &[Experiment]) -> Self {
        let mut by_metric: BTreeMap<String, Vec<String>> = BTreeMap::new();
        for experiment in experiments {
            by_metric
                .entry(experiment.config.metric.clone())
                .or_default()
                .push(experiment.function.clone());
        }
        Self { store, by_metric }
    }

    /// Whether feedback on `metric` counts for some experiment.
    pub(crate) fn counts(&self, metric: &str) -> bool {
        self.by_metric.contains_key(metric)
    }

    /// Count `value` (a bool as 0/1, a number) of stored feedback `feedback_id` on `metric`: for
    /// an inference, for the variant that served it; for an episode, for each experiment function
    /// whose inferences in the episode all used one variant.
    #[allow(clippy::too_many_arguments)]
    pub(crate) async fn observe(
        &self,
        project: &ProjectId,
        metric: &str,
        target: (FeedbackTarget, Uuid),
        inference: Option<&InferenceRecord>,
        inferences: &dyn InferenceStore,
        feedback_id: Uuid,
        value: f64,
        now_ms: i64,
    ) -> Result<(), StorageError> {
        let Some(functions) = self.by_metric.get(metric) else {
            return Ok(());
        };
        let mut served: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
        match (target, inference) {
            ((FeedbackTarget::Inference, _), Some(record)) => {
                served
                    .entry(record.function_name.clone())
                    .or_default()
                    .insert(record.variant_name.clone());
            }
            ((FeedbackTarget::Inference, _), None) => return Ok(()),
            ((FeedbackTarget::Episode, episode_id), _) => {
                let mut after = None;
                loop {
                    let page = inferences
                        .list_episode(project, episode_id, after, EPISODE_PAGE)
                        .await?;
                    after = page.records.last().map(|r| r.inference_id);
                    for record in &page.records {
                        if functions.contains(&record.function_name) {
                            served
                                .entry(record.function_name.clone())
                                .or_default()
                                .insert(record.variant_name.clone());
                        }
                    }
                    if !page.has_more {
                        break;
                    }
                }
            }
        }
        for (function, variants) in served {
            if !functions.contains(&function) || variants.len() != 1 {
                continue;
            }
            if let Some(variant) = variants.first() {
                self.store
                    .observe(project, (&function, metric, variant), feedback_id, value, now_ms)
                    .await?;
            }
        }
        Ok(())
    }
}

#[cfg(test)]
#[path = "tests.rs"]
mod tests;
