//! What adaptive experiments keep in the state store, as typed records:
//!
//! | kind | id | owner | body |
//! |---|---|---|---|
//! | `experiment_episode` | `{project}/{episode_id}/{function}` | `{project}/{function}` | the variant an episode was bound to: the first write wins |
//! | `experiment_observation` | `{function}/{feedback_id}` | `["{function}","{metric}","{variant}"]` (JSON) | one feedback value counted for a variant |
//! | `experiment_state` | `{function}` | `experiments` | the last computed [`StoredExperiment`] |
//!
//! Observations are listed newest first per owner: the latest `max_samples_per_variant` rows of a
//! variant are one query. Episode bindings and observations expire with the record retention.

use super::decision::Decision;
use super::stopping::VariantStats;
use crate::ports::{ListOrder, ListQuery, ProjectId, StateStore, StorageError};
use crate::records::{decode, new_record, next_version, put, PutDecision};
use serde::{Deserialize, Serialize};
use std::sync::Arc;
use std::time::Duration;
use uuid::Uuid;

pub(crate) const EPISODE_KIND: &str = "experiment_episode";
pub(crate) const OBSERVATION_KIND: &str = "experiment_observation";
pub(crate) const STATE_KIND: &str = "experiment_state";
const STATE_OWNER: &str = "experiments";
/// Rows read per listing page.
const PAGE: usize = 1000;

/// The experiment as last computed by the poller task.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct StoredExperiment {
    pub metric: String,
    pub decision: Decision,
    /// Every candidate's statistics, in the configured order.
    pub variants: Vec<VariantStats>,
    /// When it was computed (ms since the epoch).
    pub computed_at_ms: i64,
}

#[derive(Serialize, Deserialize)]
struct EpisodeBinding {
    variant: String,
}

#[derive(Serialize, Deserialize)]
struct Observation {
    value: f64,
    project: String,
    feedback_id: Uuid,
}

/// The experiment records over a state store; episode bindings and observations are kept for
/// `keep_for` (`None`: for ever).
#[derive(Clone)]
pub struct ExperimentStore {
    state: Arc<dyn StateStore>,
    keep_for: Option<Duration>,
}

fn observation_owner(function: &str, metric: &str, variant: &str) -> String {
    serde_json::json!([function, metric, variant]).to_string()
}

impl ExperimentStore {
    pub fn new(state: Arc<dyn StateStore>, keep_for: Option<Duration>) -> Self {
        Self { state, keep_for }
    }

    fn expires_at(&self, now_ms: i64) -> Option<i64> {
        self.keep_for
            .map(|keep| now_ms.div_euclid(1000).saturating_add(keep.as_secs() as i64))
    }

    /// Bind the episode to `variant` unless it is bound already; the variant it is bound to.
    pub async fn bind_episode(
        &self,
        project: &ProjectId,
        function: &str,
        episode_id: Uuid,
        variant: &str,
        now_ms: i64,
    ) -> Result<String, StorageError> {
        let id = format!("{project}/{episode_id}/{function}");
        let record = new_record(
            EPISODE_KIND,
            id.clone(),
            format!("{project}/{function}"),
            now_ms,
            self.expires_at(now_ms),
            &EpisodeBinding {
                variant: variant.to_owned(),
            },
        )?;
        match self.state.create(&record).await {
            Ok(()) => Ok(variant.to_owned()),
            Err(StorageError::Conflict) => match self.state.get(EPISODE_KIND, &id).await? {
                Some(stored) => Ok(decode::<EpisodeBinding>(&stored)?.variant),
                // Deleted (expired) in between: this call's variant stands for it.
                None => Ok(variant.to_owned()),
            },
            Err(err) => Err(err),
        }
    }

    /// Count one feedback value for `variant` of `function`'s experiment on `metric`.
    pub async fn observe(
        &self,
        project: &ProjectId,
        (function, metric, variant): (&str, &str, &str),
        feedback_id: Uuid,
        value: f64,
        now_ms: i64,
    ) -> Result<(), StorageError> {
        let record = new_record(
            OBSERVATION_KIND,
            format!("{function}/{feedback_id}"),
            observation_owner(function, metric, variant),
            now_ms,
            self.expires_at(now_ms),
            &Observation {
                value,
                project: project.to_string(),
                feedback_id,
            },
        )?;
        match self.state.create(&record).await {
            Ok(()) | Err(StorageError::Conflict) => Ok(()),
            Err(err) => Err(err),
        }
    }

    /// The latest `limit` values counted for `variant` (newest first), live ones only.
    pub async fn latest_values(
        &self,
        (function, metric, variant): (&str, &str, &str),
        limit: u64,
        now_ms: i64,
    ) -> Result<Vec<f64>, StorageError> {
        let limit = usize::try_from(limit).unwrap_or(usize::MAX);
        let now_s = now_ms.div_euclid(1000);
        let mut values = Vec::new();
        let mut after = None;
        while values.len() < limit {
            let page = self
                .state
                .list_by_owner(&ListQuery {
                    kind: OBSERVATION_KIND.into(),
                    owner: observation_owner(function, metric, variant),
                    after: after.take(),
                    limit: PAGE.min(limit - values.len()),
                    order: ListOrder::Desc,
                })
                .await?;
            after = page.records.last().map(|r| r.cursor());
            for record in &page.records {
                if record.expires_at.is_some_and(|at| at <= now_s) {
                    continue;
                }
                values.push(decode::<Observation>(record)?.value);
            }
            if !page.has_more {
                break;
            }
        }
        values.truncate(limit);
        Ok(values)
    }

    /// The experiment of `function` as last computed, if it was.
    pub async fn load(&self, function: &str) -> Result<Option<StoredExperiment>, StorageError> {
        match self.state.get(STATE_KIND, function).await? {
            Some(record) => decode(&record).map(Some),
            None => Ok(None),
        }
    }

    /// Store `experiment` as `function`'s (replacing what was).
    pub async fn save(&self, function: &str, experiment: &StoredExperiment) -> Result<(), StorageError> {
        put(self.state.as_ref(), STATE_KIND, function, 5, |current| {
            let record = match current {
                Some(current) => next_version(current, experiment)?,
                None => new_record(
                    STATE_KIND,
                    function,
                    STATE_OWNER,
                    experiment.computed_at_ms,
                    None,
                    experiment,
                )?,
            };
            Ok(PutDecision::Write(record))
        })
        .await
        .map(|_| ())
    }
}
