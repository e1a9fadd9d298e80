use super::*;

fn stats(variant: &str, count: u64, mean: f64, variance: f64) -> VariantStats {
    VariantStats {
        variant: variant.to_owned(),
        count,
        mean,
        variance,
    }
}

#[test]
fn statistics_are_count_mean_and_sample_variance() {
    let s = VariantStats::from_values("a", &[1.0, 0.0, 1.0, 1.0]);
    assert_eq!((s.count, s.mean), (4, 0.75));
    assert!((s.variance - 0.25).abs() < 1e-12, "{s:?}");
    assert_eq!(VariantStats::from_values("a", &[1.0]).variance, 0.0);
    assert_eq!(VariantStats::from_values("a", &[]), stats("a", 0, 0.0, 0.0));
}

#[test]
fn the_leader_has_the_best_mean_ties_to_the_smaller_variance_per_sample() {
    let arms = Arms::new(
        &[
            stats("a", 10, 0.5, 0.2),
            stats("b", 10, 0.7, 0.3),
            stats("c", 20, 0.7, 0.3),
        ],
        true,
    );
    assert_eq!(arms.leader(), Some(2));
    let minimise = Arms::new(&[stats("a", 10, 0.5, 0.2), stats("b", 10, 0.7, 0.3)], false);
    assert_eq!(minimise.leader(), Some(0));
    let same = Arms::new(&[stats("a", 10, 0.5, 0.2), stats("b", 10, 0.5, 0.2)], true);
    assert_eq!(same.leader(), Some(0));
}

#[test]
fn glr_is_the_squared_gap_over_twice_the_pooled_variance() {
    let arms = Arms::new(&[stats("a", 100, 0.8, 0.16), stats("b", 50, 0.5, 0.25)], true);
    let expected = (0.3f64 + 0.1).powi(2) / (2.0 * (0.16 / 100.0 + 0.25 / 50.0));
    assert!((arms.glr(0, 1, 0.1) - expected).abs() < 1e-12);
    assert_eq!(arms.glr(1, 0, 0.0), 0.0, "no positive gap");
    let empty = Arms::new(&[stats("a", 0, 0.8, 0.16), stats("b", 50, 0.5, 0.25)], true);
    assert_eq!(empty.glr(0, 1, 0.0), 0.0, "no samples");
    // Variances are floored: equal constant arms are not a division by zero.
    let constant = Arms::new(&[stats("a", 10, 1.0, 0.0), stats("b", 10, 0.0, 0.0)], true);
    assert!(constant.glr(0, 1, 0.0).is_finite() && constant.glr(0, 1, 0.0) > 1e9);
}

#[test]
fn it_stops_when_the_smallest_glr_exceeds_ln_of_one_plus_ln_n_over_delta() {
    let arms = Arms::new(&[stats("a", 100, 0.8, 0.16), stats("b", 100, 0.5, 0.25)], true);
    let threshold = ((1.0 + 200f64.ln()) / 0.05).ln();
    assert!((arms.threshold(0.05) - threshold).abs() < 1e-12);
    assert!(arms.glr(0, 1, 0.0) > threshold);
    assert_eq!(arms.winner(10, 0.0, 0.05), Some(0));
    // Below min_samples nobody wins; a close race does not stop.
    assert_eq!(arms.winner(101, 0.0, 0.05), None);
    let close = Arms::new(&[stats("a", 100, 0.52, 0.25), stats("b", 100, 0.5, 0.25)], true);
    assert!(close.glr(0, 1, 0.0) < close.threshold(0.05));
    assert_eq!(close.winner(10, 0.0, 0.05), None);
    // ε widens the gap: the same race stops when 0.2 worse is good enough.
    assert_eq!(close.winner(10, 0.2, 0.05), Some(0));
    // The smallest GLR decides: a third arm close to the leader keeps it going.
    let three = Arms::new(
        &[
            stats("a", 100, 0.8, 0.16),
            stats("b", 100, 0.5, 0.25),
            stats("c", 100, 0.79, 0.16),
        ],
        true,
    );
    assert_eq!(three.winner(10, 0.0, 0.05), None);
}
