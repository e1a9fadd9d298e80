use super::*;
use crate::config::Config;
use std::collections::BTreeMap;

fn episode(n: u128) -> Uuid {
    Uuid::from_u128(0x0190_0000_0000_7000_8000_0000_0000_0000 | n)
}

fn policy_of(toml_variants: &str, experimentation: &str) -> VariantPolicy {
    let text = format!(
        "[models.m]\nrouting = [\"d\"]\n[models.m.providers.d]\ntype = \"dummy\"\n[functions.f]\ntype = \"chat\"\n{toml_variants}\n{experimentation}"
    );
    let config = Config::from_toml(&text).unwrap();
    VariantPolicy::from_function(&config.functions["f"])
}

fn variant(name: &str, weight: Option<f64>) -> String {
    let weight = weight.map(|w| format!("weight = {w:?}\n")).unwrap_or_default();
    format!("[functions.f.variants.{name}]\ntype = \"chat_completion\"\nmodel = \"m\"\n{weight}")
}

#[test]
fn the_draw_is_the_first_four_bytes_of_the_hash_over_two_to_the_32() {
    let id = episode(42);
    let mut hasher = Sha256::new();
    hasher.update(b"my_function");
    hasher.update(id.as_bytes());
    let digest = hasher.finalize();
    let expected = f64::from(u32::from_be_bytes([digest[0], digest[1], digest[2], digest[3]])) / 2f64.powi(32);
    assert_eq!(episode_draw("my_function", id), expected);
    assert_eq!(episode_draw("my_function", id), episode_draw("my_function", id));
    assert_ne!(episode_draw("my_function", id), episode_draw("other", id));
    for n in 0..1000 {
        let draw = episode_draw("f", episode(n));
        assert!((0.0..1.0).contains(&draw));
    }
}

#[test]
fn legacy_weights_make_candidates_fallbacks_and_never() {
    let policy = policy_of(
        &[
            variant("a", Some(2.0)),
            variant("b", Some(1.0)),
            variant("z", Some(0.0)),
            variant("c", None),
            variant("d", None),
        ]
        .concat(),
        "",
    );
    assert_eq!(policy.candidates(), &[("a".to_owned(), 2.0), ("b".to_owned(), 1.0)]);
    assert_eq!(policy.fallbacks(), &["c".to_owned(), "d".to_owned()]);
    // Candidates first, then fallbacks in order; the 0-weight variant is never chosen.
    let id = episode(7);
    let mut failed = BTreeSet::new();
    let mut order = Vec::new();
    while let Some(name) = policy.choose("f", id, &failed, None) {
        order.push(name.to_owned());
        failed.insert(name.to_owned());
    }
    assert_eq!(order.len(), 4);
    assert_eq!(&order[2..], &["c", "d"]);
    assert!(order[..2].contains(&"a".to_owned()) && order[..2].contains(&"b".to_owned()));
}

#[test]
fn no_weights_means_uniform_over_every_variant() {
    let policy = policy_of(&[variant("a", None), variant("b", None)].concat(), "");
    assert_eq!(policy.candidates(), &[("a".to_owned(), 1.0), ("b".to_owned(), 1.0)]);
    assert!(policy.fallbacks().is_empty());
}

#[test]
fn experimentation_lists_are_uniform_and_tables_normalised() {
    let variants = [variant("a", None), variant("b", None), variant("c", None)].concat();
    let list = policy_of(
        &variants,
        "[functions.f.experimentation]\ntype = \"static\"\ncandidate_variants = [\"b\", \"a\"]\nfallback_variants = [\"c\"]",
    );
    assert_eq!(list.candidates(), &[("b".to_owned(), 1.0), ("a".to_owned(), 1.0)]);
    assert_eq!(list.fallbacks(), &["c".to_owned()]);
    let table = policy_of(
        &variants,
        "[functions.f.experimentation]\ntype = \"static\"\ncandidate_variants = { a = 3.0, b = 1.0 }",
    );
    let counts = count_choices(&table, 8000, &BTreeSet::new());
    // 3:1 → 6000:2000, well within statistical noise at this size.
    assert!((5700..=6300).contains(&counts["a"]), "{counts:?}");
    assert_eq!(counts["a"] + counts["b"], 8000);
    assert!(!counts.contains_key("c"));
}

fn count_choices(policy: &VariantPolicy, episodes: u128, failed: &BTreeSet<String>) -> BTreeMap<String, u32> {
    let mut counts = BTreeMap::new();
    for n in 0..episodes {
        if let Some(name) = policy.choose("f", episode(n), failed, None) {
            *counts.entry(name.to_owned()).or_insert(0) += 1;
        }
    }
    counts
}

#[test]
fn an_episode_keeps_its_variant_and_the_distribution_follows_the_weights() {
    let policy = VariantPolicy::new(vec![("x".into(), 0.7), ("y".into(), 0.3)], vec![]);
    for n in 0..100 {
        let first = policy.choose("f", episode(n), &BTreeSet::new(), None);
        assert_eq!(first, policy.choose("f", episode(n), &BTreeSet::new(), None));
    }
    let counts = count_choices(&policy, 10_000, &BTreeSet::new());
    assert!((6700..=7300).contains(&counts["x"]), "{counts:?}");
}

#[test]
fn failed_variants_are_removed_and_the_rest_renormalised() {
    let policy = VariantPolicy::new(
        vec![("x".into(), 1.0), ("y".into(), 1.0), ("z".into(), 2.0)],
        vec!["w".into()],
    );
    let failed = BTreeSet::from(["z".to_owned()]);
    let counts = count_choices(&policy, 4000, &failed);
    assert!(!counts.contains_key("z"));
    assert!((1800..=2200).contains(&counts["x"]), "{counts:?}");
    // The same episode with the same failures resamples to the same variant.
    for n in 0..200 {
        assert_eq!(
            policy.choose("f", episode(n), &failed, None),
            policy.choose("f", episode(n), &failed, None)
        );
    }
    let all = BTreeSet::from(["x".to_owned(), "y".to_owned(), "z".to_owned()]);
    assert_eq!(policy.choose("f", episode(1), &all, None), Some("w"));
    let everything = BTreeSet::from(["x".to_owned(), "y".to_owned(), "z".to_owned(), "w".to_owned()]);
    assert_eq!(policy.choose("f", episode(1), &everything, None), None);
}

#[test]
fn weighted_picks_cover_the_edges() {
    let a = ("a".to_owned(), 1.0);
    let b = ("b".to_owned(), 3.0);
    assert_eq!(pick_weighted(&[&a, &b], 0.0), Some("a"));
    assert_eq!(pick_weighted(&[&a, &b], 0.2499), Some("a"));
    assert_eq!(pick_weighted(&[&a, &b], 0.25), Some("b"));
    assert_eq!(pick_weighted(&[&a, &b], 0.999_999_999), Some("b"));
    assert_eq!(pick_weighted(&[], 0.5), None);
    assert!(VariantPolicy::new(vec![("z".into(), 0.0)], vec![])
        .candidates()
        .is_empty());
}

#[test]
fn a_bound_episode_keeps_its_variant_then_falls_back_in_order_then_draws_the_rest() {
    let variants = [
        variant("a", None),
        variant("b", None),
        variant("c", None),
        variant("d", None),
    ]
    .concat();
    let policy = policy_of(
        &variants,
        "[metrics.m]\ntype = \"boolean\"\nlevel = \"inference\"\noptimize = \"max\"\n[functions.f.experimentation]\ntype = \"adaptive\"\nmetric = \"m\"\ncandidate_variants = [\"a\", \"b\"]\nfallback_variants = [\"d\", \"c\"]",
    );
    let id = episode(3);
    let mut failed = BTreeSet::new();
    let mut order = Vec::new();
    while let Some(name) = policy.choose("f", id, &failed, Some("b")) {
        order.push(name.to_owned());
        failed.insert(name.to_owned());
    }
    assert_eq!(order, ["b", "d", "c", "a"]);
}

#[test]
fn legacy_uniform_without_lists_draws_every_variant() {
    let variants = [variant("a", None), variant("b", None)].concat();
    let policy = policy_of(&variants, "[functions.f.experimentation]\ntype = \"uniform\"");
    assert_eq!(policy.candidates(), &[("a".to_owned(), 1.0), ("b".to_owned(), 1.0)]);
    assert!(policy.fallbacks().is_empty());
}
