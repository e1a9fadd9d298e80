use super::*;

fn arms(means: &[f64], variances: &[f64], counts: &[u64]) -> Arms {
    Arms {
        means: means.to_vec(),
        variances: variances.to_vec(),
        counts: counts.to_vec(),
    }
}

/// The cone program's solutions (Clarabel), from `allocation_reference.py`.
#[test]
fn matches_the_cone_program_within_tolerance() {
    type Case<'a> = (&'a [f64], &'a [f64], &'a [u64], f64, f64, &'a [f64]);
    let cases: [Case<'_>; 6] = [
        (&[0.8, 0.5], &[0.16, 0.25], &[40, 40], 0.0, 0.0, &[0.444458, 0.555542]),
        (
            &[0.8, 0.5, 0.45],
            &[0.16, 0.25, 0.2475],
            &[30, 30, 30],
            0.0,
            0.0,
            &[0.367962, 0.391075, 0.240963],
        ),
        (
            &[0.6, 0.55, 0.3],
            &[0.24, 0.2475, 0.21],
            &[100, 80, 60],
            0.0,
            0.0,
            &[0.493181, 0.500789, 0.00603],
        ),
        (
            &[0.6, 0.55, 0.3],
            &[0.24, 0.2475, 0.21],
            &[100, 80, 60],
            0.05,
            0.1,
            &[0.446534, 0.453466, 0.1],
        ),
        (
            &[2.0, 1.0, 1.5, 0.5],
            &[1.0, 4.0, 0.5, 2.0],
            &[20, 20, 20, 20],
            0.0,
            0.05,
            &[0.405883, 0.26993, 0.269274, 0.054912],
        ),
        (
            &[0.3, 0.9],
            &[0.21, 0.09],
            &[500, 500],
            0.01,
            0.0,
            &[0.604367, 0.395633],
        ),
    ];
    for (means, variances, counts, epsilon, min_prob, expected) in cases {
        let got = optimal_allocation(&arms(means, variances, counts), epsilon, min_prob);
        assert!((got.iter().sum::<f64>() - 1.0).abs() < 1e-9, "{got:?}");
        for (g, e) in got.iter().zip(expected) {
            assert!(
                (g - e).abs() < 1e-4,
                "means {means:?}: got {got:?}, the cone program {expected:?}"
            );
        }
    }
}

#[test]
fn equal_arms_get_uniform_and_the_floor_holds() {
    let equal = optimal_allocation(&arms(&[0.5, 0.5, 0.5], &[0.25, 0.25, 0.25], &[10, 10, 10]), 0.0, 0.0);
    assert_eq!(equal, vec![1.0 / 3.0; 3]);
    let floored = optimal_allocation(&arms(&[0.9, 0.1, 0.85], &[0.09, 0.09, 0.1275], &[50, 50, 50]), 0.0, 0.2);
    assert!(floored.iter().all(|p| *p >= 0.2 - 1e-9), "{floored:?}");
    // A clearly worse arm gets little; the two close ones share the rest.
    assert!(floored[1] < floored[0] && floored[1] < floored[2], "{floored:?}");
}

#[test]
fn two_arms_are_shared_in_proportion_to_their_deviations() {
    // With two arms the optimal allocation is w ∝ σ (plus the small pull toward uniform).
    let got = optimal_allocation(&arms(&[1.0, 0.0], &[1.0, 4.0], &[10_000, 10_000]), 0.0, 0.0);
    assert!((got[0] - 1.0 / 3.0).abs() < 2e-3, "{got:?}");
}
