//! Per-variant feedback statistics and the track-and-stop stopping rule: the leader (highest
//! mean; ties to the smaller variance per sample, then the first), a GLR statistic against each
//! challenger, and a stop once the smallest exceeds ln((1 + ln N) / δ).

use serde::{Deserialize, Serialize};

/// The floor under every variance (a variant whose values are all equal still has some).
pub(crate) const VARIANCE_FLOOR: f64 = 1e-12;

/// What one variant's feedback rows add up to.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct VariantStats {
    pub variant: String,
    /// Rows counted (the latest `max_samples_per_variant`).
    pub count: u64,
    pub mean: f64,
    /// The sample variance (n − 1); 0 below two rows.
    pub variance: f64,
}

impl VariantStats {
    pub(crate) fn from_values(variant: &str, values: &[f64]) -> Self {
        let count = values.len() as u64;
        let n = values.len() as f64;
        let mean = if values.is_empty() {
            0.0
        } else {
            values.iter().sum::<f64>() / n
        };
        let variance = if values.len() < 2 {
            0.0
        } else {
            values.iter().map(|v| (v - mean).powi(2)).sum::<f64>() / (n - 1.0)
        };
        Self {
            variant: variant.to_owned(),
            count,
            mean,
            variance,
        }
    }
}

/// Arms as the algorithms see them: means oriented so that higher is better, variances floored.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Arms {
    pub means: Vec<f64>,
    pub variances: Vec<f64>,
    pub counts: Vec<u64>,
}

impl Arms {
    /// `stats` for a metric to maximise (`maximise`) or minimise (means negated).
    pub(crate) fn new(stats: &[VariantStats], maximise: bool) -> Self {
        let sign = if maximise { 1.0 } else { -1.0 };
        Self {
            means: stats.iter().map(|s| sign * s.mean).collect(),
            variances: stats.iter().map(|s| s.variance.max(VARIANCE_FLOOR)).collect(),
            counts: stats.iter().map(|s| s.count).collect(),
        }
    }

    /// The leader: the highest mean (within 1e-10), ties to the smallest variance per sample,
    /// then the first. `None` without arms.
    pub(crate) fn leader(&self) -> Option<usize> {
        let best = self.means.iter().copied().fold(f64::NEG_INFINITY, f64::max);
        let per_sample = |i: usize| self.variances[i] / self.counts[i].max(1) as f64;
        (0..self.means.len())
            .filter(|&i| (self.means[i] - best).abs() < 1e-10)
            .min_by(|&a, &b| per_sample(a).total_cmp(&per_sample(b)).then(a.cmp(&b)))
    }

    /// The GLR statistic of the leader `l` against challenger `c`:
    /// (Δmean + ε)² / (2(σ²_l/n_l + σ²_c/n_c)), 0 without samples or a positive gap.
    pub(crate) fn glr(&self, l: usize, c: usize, epsilon: f64) -> f64 {
        if self.counts[l] == 0 || self.counts[c] == 0 {
            return 0.0;
        }
        let gap = self.means[l] - self.means[c] + epsilon;
        if gap <= 0.0 {
            return 0.0;
        }
        let pooled = self.variances[l] / self.counts[l] as f64 + self.variances[c] / self.counts[c] as f64;
        if pooled <= 0.0 {
            return 0.0;
        }
        gap * gap / (2.0 * pooled)
    }

    /// The stopping threshold ln((1 + ln N) / δ), N the samples of every arm.
    pub(crate) fn threshold(&self, delta: f64) -> f64 {
        let total: u64 = self.counts.iter().sum();
        ((1.0 + (total as f64).ln()) / delta).ln()
    }

    /// The winner, if the experiment stops: every arm has `min_samples` and the smallest GLR of
    /// the leader against a challenger exceeds the threshold.
    pub(crate) fn winner(&self, min_samples: u64, epsilon: f64, delta: f64) -> Option<usize> {
        if self.counts.len() < 2 || self.counts.iter().any(|&n| n < min_samples) {
            return None;
        }
        let leader = self.leader()?;
        let smallest = (0..self.counts.len())
            .filter(|&c| c != leader)
            .map(|c| self.glr(leader, c, epsilon))
            .fold(f64::INFINITY, f64::min);
        (smallest > self.threshold(delta)).then_some(leader)
    }
}

#[cfg(test)]
#[path = "stopping_tests.rs"]
mod tests;
