use super::*;
use crate::config::{Config, ConfigError};

/// A model, a boolean metric `good` and a chat function `f` with variants `a`, `b` and `c`.
pub(crate) const BASE: &str = r#"
[models.m]
routing = ["d"]
[models.m.providers.d]
type = "dummy"
[metrics.good]
type = "boolean"
level = "inference"
optimize = "max"
[functions.f]
type = "chat"
[functions.f.variants.a]
type = "chat_completion"
model = "m"
[functions.f.variants.b]
type = "chat_completion"
model = "m"
[functions.f.variants.c]
type = "chat_completion"
model = "m"
"#;

fn parse(experimentation: &str) -> Result<ExperimentationConfig, ConfigError> {
    let config = Config::from_toml(&format!("{BASE}\n[functions.f.experimentation]\n{experimentation}"))?;
    Ok(config.functions["f"].experimentation.clone().unwrap())
}

fn adaptive(extra: &str) -> Result<AdaptiveExperimentation, ConfigError> {
    let text = format!("type = \"adaptive\"\nmetric = \"good\"\ncandidate_variants = [\"a\", \"b\"]\n{extra}");
    Ok(parse(&text)?.adaptive().unwrap().clone())
}

fn error_at(experimentation: &str, key: &str) -> String {
    let text = parse(experimentation).unwrap_err().to_string();
    assert!(text.contains(&format!("`{key}`")), "expected `{key}` in: {text}");
    text
}

#[test]
fn adaptive_keys_take_the_documented_defaults() {
    let config = adaptive("").unwrap();
    assert_eq!(config.metric, "good");
    assert_eq!(config.candidate_variants, ["a", "b"]);
    assert!(config.fallback_variants.is_empty());
    assert_eq!(config.min_samples_per_variant, 10);
    assert_eq!(config.delta, 0.05);
    assert_eq!(config.epsilon, 0.0);
    assert_eq!(config.update_period_s, 300);
    assert_eq!(config.min_prob, 0.0);
    assert_eq!(config.max_samples_per_variant, 10_000);
    assert_eq!(config.algorithm, AdaptiveAlgorithm::TrackAndStop);
}

#[test]
fn every_adaptive_key_is_read() {
    let config = adaptive(
        "fallback_variants = [\"c\"]\nmin_samples_per_variant = 3\ndelta = 0.1\nepsilon = 0.02\nupdate_period_s = 5\nmin_prob = 0.1\nmax_samples_per_variant = 50\nalgorithm = \"track_and_stop\"",
    )
    .unwrap();
    assert_eq!(config.fallback_variants, ["c"]);
    assert_eq!(
        (config.min_samples_per_variant, config.delta, config.epsilon),
        (3, 0.1, 0.02)
    );
    assert_eq!(
        (config.update_period_s, config.min_prob, config.max_samples_per_variant),
        (5, 0.1, 50)
    );
    let allowed: Vec<&String> = config.allowed_variants().collect();
    assert_eq!(allowed, ["a", "b", "c"]);
}

#[test]
fn adaptive_values_are_checked_and_name_their_key() {
    let key = "functions.f.experimentation";
    for (extra, field) in [
        ("min_samples_per_variant = 0", "min_samples_per_variant"),
        ("delta = 0.0", "delta"),
        ("delta = 1.0", "delta"),
        ("epsilon = -0.1", "epsilon"),
        ("update_period_s = 0", "update_period_s"),
        ("min_prob = -0.1", "min_prob"),
        ("min_prob = 0.6", "min_prob"),
        (
            "min_samples_per_variant = 20\nmax_samples_per_variant = 10",
            "max_samples_per_variant",
        ),
    ] {
        let text = format!("type = \"adaptive\"\nmetric = \"good\"\ncandidate_variants = [\"a\", \"b\"]\n{extra}");
        error_at(&text, &format!("{key}.{field}"));
    }
    // min_prob × candidates may reach 1 exactly.
    assert_eq!(adaptive("min_prob = 0.5").unwrap().min_prob, 0.5);
}

#[test]
fn adaptive_names_must_exist_and_be_unique() {
    let key = "functions.f.experimentation";
    error_at(
        "type = \"adaptive\"\nmetric = \"nope\"\ncandidate_variants = [\"a\"]",
        &format!("{key}.metric"),
    );
    error_at(
        "type = \"adaptive\"\nmetric = \"good\"\ncandidate_variants = []",
        &format!("{key}.candidate_variants"),
    );
    error_at(
        "type = \"adaptive\"\nmetric = \"good\"\ncandidate_variants = [\"a\", \"z\"]",
        &format!("{key}.candidate_variants[1]"),
    );
    error_at(
        "type = \"adaptive\"\nmetric = \"good\"\ncandidate_variants = [\"a\", \"a\"]",
        &format!("{key}.candidate_variants[1]"),
    );
    error_at(
        "type = \"adaptive\"\nmetric = \"good\"\ncandidate_variants = [\"a\"]\nfallback_variants = [\"a\"]",
        &format!("{key}.fallback_variants[0]"),
    );
    assert!(parse("type = \"adaptive\"\ncandidate_variants = [\"a\"]").is_err());
    assert!(
        parse("type = \"adaptive\"\nmetric = \"good\"\ncandidate_variants = [\"a\"]\nalgorithm = \"ucb\"").is_err()
    );
    assert!(parse("type = \"adaptive\"\nmetric = \"good\"\ncandidate_variants = [\"a\"]\nwhat = 1").is_err());
}

#[test]
fn legacy_types_convert() {
    assert_eq!(
        parse("type = \"uniform\"").unwrap(),
        ExperimentationConfig::Static(StaticExperimentation {
            every_variant: true,
            ..StaticExperimentation::default()
        })
    );
    assert_eq!(
        parse("type = \"uniform\"\ncandidate_variants = [\"a\"]\nfallback_variants = [\"c\"]").unwrap(),
        ExperimentationConfig::Static(StaticExperimentation {
            candidate_variants: CandidateVariants::List(vec!["a".into()]),
            fallback_variants: vec!["c".into()],
            every_variant: false,
        })
    );
    assert_eq!(
        parse("type = \"static_weights\"\ncandidate_variants = { a = 2.0, b = 1.0 }").unwrap(),
        ExperimentationConfig::Static(StaticExperimentation {
            candidate_variants: CandidateVariants::Weights(BTreeMap::from([("a".into(), 2.0), ("b".into(), 1.0)])),
            fallback_variants: Vec::new(),
            every_variant: false,
        })
    );
    let legacy =
        parse("type = \"track_and_stop\"\nmetric = \"good\"\ncandidate_variants = [\"a\", \"b\"]\ndelta = 0.2")
            .unwrap();
    assert_eq!(
        legacy,
        ExperimentationConfig::Adaptive(AdaptiveExperimentation {
            delta: 0.2,
            ..adaptive("").unwrap()
        })
    );
    // The legacy track_and_stop has no `algorithm`; its values are checked like adaptive ones.
    assert!(parse(
        "type = \"track_and_stop\"\nmetric = \"good\"\ncandidate_variants = [\"a\"]\nalgorithm = \"track_and_stop\""
    )
    .is_err());
    error_at(
        "type = \"track_and_stop\"\nmetric = \"good\"\ncandidate_variants = [\"a\"]\ndelta = 2.0",
        "functions.f.experimentation.delta",
    );
    error_at(
        "type = \"static_weights\"\ncandidate_variants = { z = 1.0 }",
        "functions.f.experimentation.candidate_variants.z",
    );
}

#[test]
fn weight_beside_experimentation_and_namespaces_are_refused() {
    let weighted = BASE.replace(
        "[functions.f.variants.a]\ntype = \"chat_completion\"",
        "[functions.f.variants.a]\ntype = \"chat_completion\"\nweight = 1.0",
    );
    let text = Config::from_toml(&format!(
        "{weighted}\n[functions.f.experimentation]\ntype = \"adaptive\"\nmetric = \"good\"\ncandidate_variants = [\"a\"]"
    ))
    .unwrap_err()
    .to_string();
    assert!(text.contains("functions.f.variants.a.weight"), "{text}");
    for kind in [
        "\"static\"\ncandidate_variants = [\"a\"]",
        "\"adaptive\"\nmetric = \"good\"\ncandidate_variants = [\"a\"]",
    ] {
        let text = parse(&format!(
            "type = {kind}\n[functions.f.experimentation.namespaces.x]\ntype = \"static\""
        ))
        .unwrap_err()
        .to_string();
        assert!(text.contains("namespaces"), "{text}");
    }
}

#[test]
fn unknown_types_are_refused() {
    assert!(parse("type = \"thompson\"").is_err());
}
