//! The poller's task: every adaptive experiment recomputed once its `update_period_s` has passed
//! since the last time (at once when it never was), from the latest counted values per candidate.

use super::decision::Decision;
use super::stopping::VariantStats;
use super::store::{ExperimentStore, StoredExperiment};
use super::Experiment;
use crate::scheduler::{ScheduleError, ScheduledTask};
use async_trait::async_trait;
use serde_json::json;

/// Recomputes adaptive experiments (see the module doc).
pub struct ExperimentUpdates {
    store: ExperimentStore,
    experiments: Vec<Experiment>,
}

impl ExperimentUpdates {
    pub(crate) fn new(store: ExperimentStore, experiments: Vec<Experiment>) -> Self {
        Self { store, experiments }
    }

    /// When `experiment` is next due: its last computation plus the period, or now.
    async fn due_at(&self, experiment: &Experiment, now_ms: i64) -> Result<i64, ScheduleError> {
        let period_ms = (experiment.config.update_period_s as i64).saturating_mul(1000);
        Ok(match self.store.load(&experiment.function).await? {
            Some(stored) if stored.metric == experiment.config.metric => {
                stored.computed_at_ms.saturating_add(period_ms)
            }
            _ => now_ms,
        })
    }

    /// Compute and store `experiment`'s decision now.
    pub(crate) async fn update(&self, experiment: &Experiment, now_ms: i64) -> Result<StoredExperiment, ScheduleError> {
        let config = &experiment.config;
        let mut variants = Vec::with_capacity(config.candidate_variants.len());
        for variant in &config.candidate_variants {
            let values = self
                .store
                .latest_values(
                    (&experiment.function, &config.metric, variant),
                    config.max_samples_per_variant,
                    now_ms,
                )
                .await?;
            variants.push(VariantStats::from_values(variant, &values));
        }
        let decision = Decision::compute(config, experiment.maximise, &variants);
        let stored = StoredExperiment {
            metric: config.metric.clone(),
            decision,
            variants,
            computed_at_ms: now_ms,
        };
        self.store.save(&experiment.function, &stored).await?;
        Ok(stored)
    }
}

#[async_trait]
impl ScheduledTask for ExperimentUpdates {
    fn name(&self) -> &'static str {
        "experiments"
    }

    async fn run(&self, now_ms: i64) -> Result<serde_json::Value, ScheduleError> {
        let mut updated = 0_u64;
        for experiment in &self.experiments {
            if self.due_at(experiment, now_ms).await? > now_ms {
                continue;
            }
            let stored = self.update(experiment, now_ms).await?;
            tracing::info!(function = %experiment.function, decision = ?stored.decision, "experiment updated");
            updated += 1;
        }
        Ok(json!({ "updated": updated }))
    }

    async fn next_due(&self) -> Result<Option<i64>, ScheduleError> {
        let mut earliest: Option<i64> = None;
        for experiment in &self.experiments {
            let due = self.due_at(experiment, i64::MIN).await?;
            earliest = Some(earliest.map_or(due, |e| e.min(due)));
        }
        Ok(earliest)
    }
}
