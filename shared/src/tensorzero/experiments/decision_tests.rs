use super::*;
use crate::config::experimentation::{AdaptiveAlgorithm, AdaptiveExperimentation};

fn config(candidates: &[&str], min_samples: u64) -> AdaptiveExperimentation {
    AdaptiveExperimentation {
        metric: "m".into(),
        candidate_variants: candidates.iter().map(|c| (*c).to_owned()).collect(),
        fallback_variants: Vec::new(),
        min_samples_per_variant: min_samples,
        delta: 0.05,
        epsilon: 0.0,
        update_period_s: 1,
        min_prob: 0.0,
        max_samples_per_variant: 10_000,
        algorithm: AdaptiveAlgorithm::TrackAndStop,
        namespaces: None,
    }
}

fn stats(variant: &str, count: u64, mean: f64, variance: f64) -> VariantStats {
    VariantStats {
        variant: variant.to_owned(),
        count,
        mean,
        variance,
    }
}

fn names(list: &[&str]) -> Vec<String> {
    list.iter().map(|n| (*n).to_owned()).collect()
}

#[test]
fn one_candidate_wins_at_once_and_few_samples_keep_everyone_in_the_nursery() {
    assert_eq!(
        Decision::compute(&config(&["a"], 10), true, &[]),
        Decision::Stopped { winner: "a".into() }
    );
    let few = [stats("a", 12, 0.9, 0.1), stats("b", 3, 0.1, 0.1)];
    assert_eq!(
        Decision::compute(&config(&["a", "b"], 10), true, &few),
        Decision::Nursery {
            nursery: names(&["a", "b"])
        }
    );
    // A variant that is no candidate is ignored; a candidate without rows counts 0.
    let other = [stats("z", 100, 0.9, 0.1), stats("a", 100, 0.5, 0.1)];
    assert_eq!(
        Decision::compute(&config(&["a", "b"], 10), true, &other),
        Decision::Nursery {
            nursery: names(&["a", "b"])
        }
    );
}

#[test]
fn graduated_variants_get_probabilities_until_one_wins() {
    let close = [stats("a", 30, 0.55, 0.2475), stats("b", 30, 0.5, 0.25)];
    let Decision::Bandits { probabilities } = Decision::compute(&config(&["a", "b"], 10), true, &close) else {
        panic!("expected bandits");
    };
    assert!((probabilities.values().sum::<f64>() - 1.0).abs() < 1e-9);
    let clear = [stats("a", 200, 0.9, 0.09), stats("b", 200, 0.2, 0.16)];
    assert_eq!(
        Decision::compute(&config(&["a", "b"], 10), true, &clear),
        Decision::Stopped { winner: "a".into() }
    );
    // Minimising: the lower mean wins.
    assert_eq!(
        Decision::compute(&config(&["a", "b"], 10), false, &clear),
        Decision::Stopped { winner: "b".into() }
    );
}

#[test]
fn the_nursery_keeps_its_share_beside_bandits_or_a_winner() {
    let mixed = [
        stats("a", 30, 0.55, 0.2475),
        stats("b", 30, 0.5, 0.25),
        stats("c", 2, 0.0, 0.0),
    ];
    let decision = Decision::compute(&config(&["a", "b", "c"], 10), true, &mixed);
    let Decision::NurseryAndBandits { nursery, probabilities } = &decision else {
        panic!("expected nursery and bandits: {decision:?}");
    };
    assert_eq!(nursery, &names(&["c"]));
    assert_eq!(probabilities.len(), 2);
    let shares = decision.display_probabilities(|_| true);
    assert!((shares["c"] - 1.0 / 3.0).abs() < 1e-12, "{shares:?}");
    assert!((shares.values().sum::<f64>() - 1.0).abs() < 1e-9);

    let won = [
        stats("a", 200, 0.9, 0.09),
        stats("b", 200, 0.2, 0.16),
        stats("c", 2, 0.0, 0.0),
    ];
    let decision = Decision::compute(&config(&["a", "b", "c"], 10), true, &won);
    assert_eq!(
        decision,
        Decision::NurseryAndStopped {
            nursery: names(&["c"]),
            winner: "a".into()
        }
    );
    assert_eq!(decision.winner(), Some("a"));
    assert_eq!(
        decision.display_probabilities(|_| true),
        BTreeMap::from([("a".to_owned(), 0.5), ("c".to_owned(), 0.5)])
    );
}

#[test]
fn the_nursery_is_served_round_robin_over_active_variants() {
    let nursery = Decision::Nursery {
        nursery: names(&["a", "b", "c"]),
    };
    let turn = AtomicU64::new(0);
    let served: Vec<&str> = (0..6).map(|_| nursery.sample(0.99, &turn, |_| true).unwrap()).collect();
    assert_eq!(served, ["a", "b", "c", "a", "b", "c"]);
    let turn = AtomicU64::new(0);
    let served: Vec<&str> = (0..4)
        .map(|_| nursery.sample(0.0, &turn, |n| n != "b").unwrap())
        .collect();
    assert_eq!(served, ["a", "c", "c", "a"]);
    assert_eq!(nursery.sample(0.5, &turn, |_| false), None);
}

#[test]
fn draws_follow_the_probabilities_and_the_winner_takes_all() {
    let bandits = Decision::Bandits {
        probabilities: BTreeMap::from([("a".to_owned(), 0.25), ("b".to_owned(), 0.75)]),
    };
    let turn = AtomicU64::new(0);
    assert_eq!(bandits.sample(0.1, &turn, |_| true), Some("a"));
    assert_eq!(bandits.sample(0.25, &turn, |_| true), Some("b"));
    assert_eq!(bandits.sample(0.99, &turn, |_| true), Some("b"));
    assert_eq!(bandits.sample(0.1, &turn, |n| n != "a"), Some("b"));
    let stopped = Decision::Stopped { winner: "b".into() };
    assert_eq!(stopped.sample(0.0, &turn, |_| true), Some("b"));
    assert_eq!(stopped.sample(0.0, &turn, |n| n != "b"), None);
    let both = Decision::NurseryAndStopped {
        nursery: names(&["c"]),
        winner: "b".into(),
    };
    assert_eq!(both.sample(0.4, &turn, |_| true), Some("c"));
    assert_eq!(both.sample(0.6, &turn, |_| true), Some("b"));
    let mixed = Decision::NurseryAndBandits {
        nursery: names(&["c"]),
        probabilities: BTreeMap::from([("a".to_owned(), 0.5), ("b".to_owned(), 0.5)]),
    };
    assert_eq!(mixed.sample(0.2, &turn, |_| true), Some("c"));
    assert_eq!(mixed.sample(0.5, &turn, |_| true), Some("a"));
    assert_eq!(mixed.sample(0.9, &turn, |_| true), Some("b"));
}
