//! Loading the variant types: keys, candidates, cycles, json mode, `timeout_s`.

use super::super::{Config, ConfigError};

const BASE: &str = r#"
[models.dummy]
routing = ["dummy"]
[models.dummy.providers.dummy]
type = "dummy"
"#;

fn parse(functions: &str) -> Result<Config, ConfigError> {
    Config::from_toml(&format!("{BASE}\n{functions}"))
}

fn rejected_at(functions: &str, key: &str) -> String {
    match parse(functions) {
        Ok(_) => panic!("config should be rejected:\n{functions}"),
        Err(err) => {
            let text = err.to_string();
            assert!(text.contains(&format!("`{key}`")), "expected key `{key}` in: {text}");
            text
        }
    }
}

fn chat(variants: &str) -> String {
    format!(
        r#"
[functions.f]
type = "chat"
[functions.f.variants.a]
type = "chat_completion"
model = "dummy"
[functions.f.variants.b]
type = "chat_completion"
model = "dummy"
{variants}"#
    )
}

#[test]
fn every_type_and_the_docs_spelling_load() {
    let config = parse(&chat(
        r#"
[functions.f.variants.bon]
type = "experimental_best_of_n_sampling"
candidates = ["a", "a", "b"]
weight = 1.0
timeouts = { non_streaming = { total_ms = 5000 } }
[functions.f.variants.bon.evaluator]
model = "dummy"
temperature = 0.2
json_mode = "tool"
[functions.f.variants.docs]
type = "experimental_best_of_n"
candidates = ["a", "b"]
evaluator = { model = "dummy" }
[functions.f.variants.mon]
type = "experimental_mixture_of_n"
candidates = ["a", "bon"]
fuser = { model = "dummy", max_tokens = 10 }
"#,
    ))
    .unwrap();
    let variants = &config.functions["f"].variants;
    assert_eq!(variants["bon"].type_name(), "experimental_best_of_n_sampling");
    assert_eq!(variants["docs"].type_name(), "experimental_best_of_n_sampling");
    assert_eq!(variants["bon"].candidates(), ["a", "a", "b"]);
    assert_eq!(variants["bon"].weight(), Some(1.0));
    assert_eq!(variants["bon"].prompt().temperature, Some(0.2));
    assert_eq!(variants["mon"].prompt().max_tokens, Some(10));
    assert_eq!(variants["mon"].type_name(), "experimental_mixture_of_n");
}

#[test]
fn evaluator_and_fuser_keys_are_chat_completion_keys() {
    let text = rejected_at(
        &chat("[functions.f.variants.bon]\ntype = \"experimental_best_of_n_sampling\"\ncandidates = [\"a\"]\nevaluator = { model = \"dummy\", type = \"chat_completion\" }"),
        "functions.f.variants.bon",
    );
    assert!(text.contains("type"), "{text}");
    rejected_at(
        &chat("[functions.f.variants.mon]\ntype = \"experimental_mixture_of_n\"\ncandidates = [\"a\"]"),
        "functions.f.variants.mon",
    );
    rejected_at(
        &chat("[functions.f.variants.bon]\ntype = \"experimental_best_of_n_sampling\"\ncandidates = [\"a\"]\nevaluator = { model = \"nope\" }"),
        "functions.f.variants.bon.evaluator.model",
    );
}

#[test]
fn candidates_must_exist_and_not_be_empty() {
    rejected_at(
        &chat("[functions.f.variants.bon]\ntype = \"experimental_best_of_n_sampling\"\ncandidates = [\"a\", \"zz\"]\nevaluator = { model = \"dummy\" }"),
        "functions.f.variants.bon.candidates[1]",
    );
    rejected_at(
        &chat("[functions.f.variants.bon]\ntype = \"experimental_best_of_n_sampling\"\ncandidates = []\nevaluator = { model = \"dummy\" }"),
        "functions.f.variants.bon.candidates",
    );
}

#[test]
fn cycles_are_refused_at_load() {
    let direct = rejected_at(
        &chat("[functions.f.variants.bon]\ntype = \"experimental_best_of_n_sampling\"\ncandidates = [\"a\", \"bon\"]\nevaluator = { model = \"dummy\" }"),
        "functions.f.variants.bon.candidates",
    );
    assert!(direct.contains("bon -> bon"), "{direct}");
    let indirect = rejected_at(
        &chat(
            r#"
[functions.f.variants.x]
type = "experimental_best_of_n_sampling"
candidates = ["a", "y"]
evaluator = { model = "dummy" }
[functions.f.variants.y]
type = "experimental_mixture_of_n"
candidates = ["b", "x"]
fuser = { model = "dummy" }
"#,
        ),
        "functions.f.variants.x.candidates",
    );
    assert!(indirect.contains("x -> y -> x"), "{indirect}");
}

#[test]
fn chain_of_thought_is_for_json_functions() {
    rejected_at(
        &chat("[functions.f.variants.cot]\ntype = \"experimental_chain_of_thought\"\nmodel = \"dummy\""),
        "functions.f.variants.cot.type",
    );
    parse(
        "[functions.j]\ntype = \"json\"\n[functions.j.variants.cot]\ntype = \"experimental_chain_of_thought\"\nmodel = \"dummy\"\njson_mode = \"strict\"",
    )
    .unwrap();
}

#[test]
fn json_mode_follows_the_function_type() {
    // A chat function's fuser answers as the function does: no json_mode.
    rejected_at(
        &chat("[functions.f.variants.mon]\ntype = \"experimental_mixture_of_n\"\ncandidates = [\"a\", \"b\"]\nfuser = { model = \"dummy\", json_mode = \"on\" }"),
        "functions.f.variants.mon.fuser.json_mode",
    );
    // The judge always answers in JSON.
    parse(&chat("[functions.f.variants.bon]\ntype = \"experimental_best_of_n_sampling\"\ncandidates = [\"a\", \"b\"]\nevaluator = { model = \"dummy\", json_mode = \"strict\" }")).unwrap();
}

#[test]
fn timeout_s_becomes_each_candidates_timeouts() {
    let config = parse(&chat(
        "[functions.f.variants.bon]\ntype = \"experimental_best_of_n_sampling\"\ncandidates = [\"a\", \"b\", \"a\"]\ntimeout_s = 1.5\nevaluator = { model = \"dummy\" }",
    ))
    .unwrap();
    for name in ["a", "b"] {
        let timeouts = config.functions["f"].variants[name].timeouts().unwrap();
        assert_eq!(timeouts.non_streaming.as_ref().unwrap().total_ms, Some(1500));
        assert_eq!(timeouts.streaming.as_ref().unwrap().ttft_ms, Some(1500));
    }
    let clash = chat(
        "[functions.f.variants.bon]\ntype = \"experimental_best_of_n_sampling\"\ncandidates = [\"a\", \"b\"]\ntimeout_s = 1\nevaluator = { model = \"dummy\" }",
    )
    .replace(
        "[functions.f.variants.b]\ntype = \"chat_completion\"\nmodel = \"dummy\"",
        "[functions.f.variants.b]\ntype = \"chat_completion\"\nmodel = \"dummy\"\ntimeouts = { non_streaming = { total_ms = 10 } }",
    );
    let text = rejected_at(&clash, "functions.f.variants.bon.timeout_s");
    assert!(text.contains("`b`"), "{text}");
    rejected_at(
        &chat("[functions.f.variants.bon]\ntype = \"experimental_best_of_n_sampling\"\ncandidates = [\"a\"]\ntimeout_s = -1\nevaluator = { model = \"dummy\" }"),
        "functions.f.variants.bon.timeout_s",
    );
}
