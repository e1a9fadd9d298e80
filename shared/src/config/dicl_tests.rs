//! `experimental_dynamic_in_context_learning` variants: the keys TensorZero has, checked.

use crate::config::functions::{FunctionKind, JsonMode, VariantConfig};
use crate::config::{Config, ConfigError};

fn parse(variant: &str) -> Result<Config, ConfigError> {
    Config::from_toml(&format!(
        r#"
[functions.f]
type = "json"
schemas.user.path = "user.json"
[functions.f.variants.base]
type = "chat_completion"
model = "dummy::gen"
templates.user.path = "user.minijinja"
[functions.f.variants.dicl]
type = "experimental_dynamic_in_context_learning"
{variant}
"#
    ))
}

fn rejected_at(variant: &str, key: &str) {
    let error = parse(variant).expect_err("should be rejected").to_string();
    assert!(error.contains(key), "expected `{key}` in: {error}");
}

#[test]
fn every_tensorzero_key_parses_and_templates_are_not_needed() {
    let config = parse(
        r#"embedding_model = "dummy::embed"
k = 3
model = "dummy::gen"
system_instructions = "dicl/system.txt"
max_distance = 0.4
temperature = 0.2
top_p = 0.9
max_tokens = 50
seed = 7
stop_sequences = ["END"]
presence_penalty = 0.1
frequency_penalty = 0.1
reasoning_effort = "low"
thinking_budget_tokens = 100
verbosity = "low"
json_mode = "on"
retries = { num_retries = 1, max_delay_s = 1 }
extra_body = [{ pointer = "/x", value = 1 }]
extra_headers = [{ name = "X-A", value = "b" }]
weight = 1
timeouts = { non_streaming = { total_ms = 5000 } }"#,
    )
    .unwrap();
    let function = &config.functions["f"];
    assert_eq!(function.kind, FunctionKind::Json);
    let VariantConfig::DynamicInContextLearning(dicl) = &function.variants["dicl"] else {
        panic!("not a DICL variant")
    };
    assert_eq!((dicl.k, dicl.max_distance), (3, Some(0.4)));
    let generation = &dicl.generation;
    assert_eq!(generation.model, "dummy::gen");
    assert_eq!(generation.json_mode, Some(JsonMode::On));
    assert_eq!(generation.retries.num_retries, 1);
    assert!(generation.templates.is_empty());
    assert_eq!(function.variants["dicl"].weight(), Some(1.0));
    // The instructions file is read with the config.
    let files: Vec<String> = config.referenced_files().into_iter().map(|(key, _)| key).collect();
    assert!(
        files.contains(&"functions.f.variants.dicl.system_instructions".to_owned()),
        "{files:?}"
    );
}

#[test]
fn bad_values_name_their_key() {
    let base = r#"embedding_model = "dummy::embed"
model = "dummy::gen""#;
    rejected_at(&format!("{base}\nk = 0"), "functions.f.variants.dicl.k");
    rejected_at(
        &format!("{base}\nk = 2\nmax_distance = -1"),
        "functions.f.variants.dicl.max_distance",
    );
    rejected_at(&format!("{base}\nk = 2\nservice_tier = \"auto\""), "service_tier");
    rejected_at(
        &format!("{base}\nk = 2\ntemperature = 9"),
        "functions.f.variants.dicl.temperature",
    );
    rejected_at(
        "embedding_model = \"nowhere\"\nmodel = \"dummy::gen\"\nk = 2",
        "functions.f.variants.dicl.embedding_model",
    );
    rejected_at(
        "embedding_model = \"dummy::e\"\nmodel = \"nowhere\"\nk = 2",
        "functions.f.variants.dicl.model",
    );
    rejected_at(
        &format!("{base}\nk = 2\nsystem_instructions = \" \""),
        "system_instructions",
    );
    rejected_at("model = \"dummy::gen\"\nk = 2", "embedding_model");
}
