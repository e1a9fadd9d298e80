//! Track-and-stop's state for one experiment: which candidates are still in the nursery (fewer
//! than `min_samples_per_variant` rows; served round-robin, with n_nursery/n_total of the
//! traffic), the graduated ones' sampling probabilities, or the winner once the stopping rule
//! names one. Computed from the variants' statistics by the poller task, read by the inference
//! path to draw an episode's variant.

use super::allocation::optimal_allocation;
use super::stopping::{Arms, VariantStats};
use crate::config::experimentation::AdaptiveExperimentation;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering};

/// Where the experiment stands.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(tag = "phase", rename_all = "snake_case")]
pub enum Decision {
    /// Not enough feedback yet: every candidate round-robin.
    Nursery { nursery: Vec<String> },
    /// Every candidate graduated: drawn by `probabilities`.
    Bandits { probabilities: BTreeMap<String, f64> },
    /// Some graduated (drawn by `probabilities`), some still in the nursery.
    NurseryAndBandits {
        nursery: Vec<String>,
        probabilities: BTreeMap<String, f64>,
    },
    /// The stopping rule named `winner`: it gets all the traffic.
    Stopped { winner: String },
    /// A winner among the graduated, with candidates still in the nursery.
    NurseryAndStopped { nursery: Vec<String>, winner: String },
}

impl Decision {
    /// Before any feedback was read: every candidate in the nursery (one candidate wins at once).
    pub(crate) fn initial(candidates: &[String]) -> Self {
        match candidates {
            [only] => Self::Stopped { winner: only.clone() },
            _ => Self::Nursery {
                nursery: candidates.to_vec(),
            },
        }
    }

    /// The decision `stats` lead to (rows of non-candidates are ignored; a candidate without
    /// rows counts 0).
    pub(crate) fn compute(config: &AdaptiveExperimentation, maximise: bool, stats: &[VariantStats]) -> Self {
        let candidates = &config.candidate_variants;
        if candidates.len() == 1 {
            return Self::initial(candidates);
        }
        let per_candidate: Vec<VariantStats> = candidates
            .iter()
            .map(|name| {
                stats
                    .iter()
                    .find(|s| &s.variant == name)
                    .cloned()
                    .unwrap_or_else(|| VariantStats::from_values(name, &[]))
            })
            .collect();
        let (graduated, nursery): (Vec<VariantStats>, Vec<VariantStats>) = per_candidate
            .into_iter()
            .partition(|s| s.count >= config.min_samples_per_variant);
        if graduated.len() < 2 {
            return Self::initial(candidates);
        }
        let arms = Arms::new(&graduated, maximise);
        let nursery: Vec<String> = nursery.into_iter().map(|s| s.variant).collect();
        if let Some(winner) = arms.winner(config.min_samples_per_variant, config.epsilon, config.delta) {
            let winner = graduated[winner].variant.clone();
            return if nursery.is_empty() {
                Self::Stopped { winner }
            } else {
                Self::NurseryAndStopped { nursery, winner }
            };
        }
        let shares = optimal_allocation(&arms, config.epsilon, config.min_prob);
        let probabilities = graduated.into_iter().map(|s| s.variant).zip(shares).collect();
        if nursery.is_empty() {
            Self::Bandits { probabilities }
        } else {
            Self::NurseryAndBandits { nursery, probabilities }
        }
    }

    /// The winner, once there is one.
    pub fn winner(&self) -> Option<&str> {
        match self {
            Self::Stopped { winner } | Self::NurseryAndStopped { winner, .. } => Some(winner),
            _ => None,
        }
    }

    /// The share of traffic each active variant gets now (`active` says which are).
    pub fn display_probabilities(&self, active: impl Fn(&str) -> bool) -> BTreeMap<String, f64> {
        let mut out = BTreeMap::new();
        let (nursery, bandits): (&[String], BTreeMap<&str, f64>) = match self {
            Self::Nursery { nursery } => (nursery, BTreeMap::new()),
            Self::Bandits { probabilities } => (&[], borrowed(probabilities)),
            Self::NurseryAndBandits { nursery, probabilities } => (nursery, borrowed(probabilities)),
            Self::Stopped { winner } => (&[], BTreeMap::from([(winner.as_str(), 1.0)])),
            Self::NurseryAndStopped { nursery, winner } => (nursery, BTreeMap::from([(winner.as_str(), 1.0)])),
        };
        let nursery: Vec<&String> = nursery.iter().filter(|n| active(n)).collect();
        let bandits: BTreeMap<&str, f64> = bandits.into_iter().filter(|(n, _)| active(n)).collect();
        let nursery_mass = if nursery.is_empty() {
            0.0
        } else {
            nursery.len() as f64 / (nursery.len() + bandits.len()) as f64
        };
        for name in &nursery {
            out.insert((*name).clone(), nursery_mass / nursery.len() as f64);
        }
        let total: f64 = bandits.values().sum();
        if total > 0.0 {
            for (name, p) in bandits {
                out.insert(name.to_owned(), p / total * (1.0 - nursery_mass));
            }
        }
        out
    }

    /// The variant for a new episode from a uniform draw `u` in [0, 1): the nursery's share
    /// round-robin (`turn` counts the turns taken), the rest by the probabilities, or the winner.
    /// Only variants `active` says are may be returned; `None` when none fits.
    pub(crate) fn sample<'a>(&'a self, u: f64, turn: &AtomicU64, active: impl Fn(&str) -> bool) -> Option<&'a str> {
        let round_robin = |nursery: &'a [String]| -> Option<&'a str> {
            if nursery.is_empty() {
                return None;
            }
            let start = turn.fetch_add(1, Ordering::Relaxed) as usize;
            (0..nursery.len())
                .map(|step| nursery[(start + step) % nursery.len()].as_str())
                .find(|name| active(name))
        };
        let weighted = |probabilities: &'a BTreeMap<String, f64>, u: f64| -> Option<&'a str> {
            let total: f64 = probabilities.iter().filter(|(n, _)| active(n)).map(|(_, p)| p).sum();
            if total <= 0.0 {
                return None;
            }
            let target = u * total;
            let mut cumulative = 0.0;
            let mut last = None;
            for (name, p) in probabilities.iter().filter(|(n, _)| active(n)) {
                cumulative += p;
                last = Some(name.as_str());
                if cumulative > target {
                    return last;
                }
            }
            last
        };
        let winner = |winner: &'a str| active(winner).then_some(winner);
        match self {
            Self::Nursery { nursery } => round_robin(nursery),
            Self::Bandits { probabilities } => weighted(probabilities, u),
            Self::Stopped { winner: name } => winner(name),
            Self::NurseryAndBandits { nursery, probabilities } => {
                let nursery_mass = nursery.len() as f64 / (nursery.len() + probabilities.len()) as f64;
                let bandit_mass = 1.0 - nursery_mass;
                if bandit_mass <= f64::EPSILON || u < nursery_mass {
                    round_robin(nursery)
                } else {
                    weighted(probabilities, (u - nursery_mass) / bandit_mass)
                }
            }
            Self::NurseryAndStopped { nursery, winner: name } => {
                let nursery_mass = nursery.len() as f64 / (nursery.len() + 1) as f64;
                if u < nursery_mass {
                    round_robin(nursery)
                } else {
                    winner(name)
                }
            }
        }
    }
}

fn borrowed(probabilities: &BTreeMap<String, f64>) -> BTreeMap<&str, f64> {
    probabilities.iter().map(|(n, p)| (n.as_str(), *p)).collect()
}

#[cfg(test)]
#[path = "decision_tests.rs"]
mod tests;
