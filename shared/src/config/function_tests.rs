//! Validation of `[functions.*]`, `[tools.*]` and `[metrics.*]`: every error names its key.

use super::*;

const BASE: &str = r#"
[models.dummy]
routing = ["dummy"]
[models.dummy.providers.dummy]
type = "dummy"

[tools.get_weather]
description = "Weather"
parameters = "tools/get_weather.json"
"#;

const CHAT: &str = r#"
[functions.chat]
type = "chat"
[functions.chat.variants.a]
type = "chat_completion"
model = "dummy"
"#;

fn parse(extra: &str) -> Result<Config, ConfigError> {
    Config::from_toml(&format!("{BASE}\n{extra}"))
}

/// The error for `extra`, checked to name `key`.
fn error_at(extra: &str, key: &str) -> String {
    match parse(extra) {
        Ok(_) => panic!("config should be rejected:\n{extra}"),
        Err(err) => {
            let text = err.to_string();
            assert!(text.contains(&format!("`{key}`")), "expected key `{key}` in: {text}");
            text
        }
    }
}

#[test]
fn a_full_function_parses() {
    let config = parse(
        r#"
[functions.f]
type = "json"
description = "d"
system_schema = "s.json"
schemas.doc.path = "doc.json"
output_schema = "out.json"

[functions.f.variants.v]
type = "chat_completion"
model = "dummy"
system_template = "s.minijinja"
templates.doc.path = "doc.minijinja"
temperature = 0.5
top_p = 0.9
max_tokens = 100
presence_penalty = 0.1
frequency_penalty = -0.1
seed = 3
stop_sequences = ["END"]
json_mode = "tool"
retries = { num_retries = 2, max_delay_s = 1.5 }
extra_body = [{ pointer = "/a/b", value = { c = 1 } }, { pointer = "/x", delete = true }]
extra_headers = [{ name = "x-a", value = "1" }, { name = "x-b", delete = true }]
timeouts = { non_streaming = { total_ms = 1000 }, streaming = { ttft_ms = 10, total_ms = 100 } }

[metrics.good]
type = "boolean"
level = "episode"
optimize = "min"
"#,
    )
    .unwrap();
    let function = &config.functions["f"];
    assert_eq!(function.kind, FunctionKind::Json);
    let variant = function.variants["v"].prompt();
    assert_eq!(variant.json_mode, Some(functions::JsonMode::Tool));
    assert_eq!(variant.retries.num_retries, 2);
    assert_eq!(variant.extra_body[0].value, Some(serde_json::json!({"c": 1})));
    assert_eq!(variant.template_paths().len(), 2);
    assert_eq!(function.schema_paths().len(), 2);
    assert_eq!(config.metrics["good"].optimize, MetricOptimize::Min);
    let files: Vec<String> = config.referenced_files().into_iter().map(|(k, _)| k).collect();
    assert!(
        files.contains(&"functions.f.variants.v.templates.doc.path".to_owned()),
        "{files:?}"
    );
    assert!(files.contains(&"tools.get_weather.parameters".to_owned()), "{files:?}");
}

#[test]
fn unknown_keys_are_rejected_with_their_path() {
    let text = error_at(&format!("{CHAT}\ntemprature = 1"), "functions.chat.variants.a");
    // Inside a `type`-tagged table the path stops at the table; the message names the field.
    assert!(text.contains("unknown field `temprature`"), "{text}");
    error_at("[functions.f]\ntype = \"chat\"\ncolour = 1", "functions.f.colour");
    error_at(
        "[tools.t]\ndescription = \"d\"\nparameters = \"p\"\nextra = 1",
        "tools.t.extra",
    );
    error_at(
        "[metrics.m]\ntype = \"float\"\nlevel = \"episode\"\noptimize = \"max\"\nx = 1",
        "metrics.m.x",
    );
}

#[test]
fn bad_enum_values_name_their_key() {
    error_at("[functions.f]\ntype = \"completion\"", "functions.f.type");
    error_at(
        "[metrics.m]\ntype = \"integer\"\nlevel = \"episode\"\noptimize = \"max\"",
        "metrics.m.type",
    );
    error_at(
        "[metrics.m]\ntype = \"float\"\nlevel = \"session\"\noptimize = \"max\"",
        "metrics.m.level",
    );
    error_at(
        &format!("{CHAT}\n[functions.chat.variants.b]\ntype = \"best_of_n\"\nmodel = \"dummy\""),
        "functions.chat.variants.b.type",
    );
}

#[test]
fn variant_models_must_exist_or_be_a_known_shorthand() {
    let text = error_at(
        &CHAT.replace("\"dummy\"", "\"nope\""),
        "functions.chat.variants.a.model",
    );
    assert!(text.contains("shorthand"), "{text}");
    let text = error_at(
        &CHAT.replace("\"dummy\"", "\"anthropic::claude\""),
        "functions.chat.variants.a.model",
    );
    assert!(text.contains("unknown provider"), "{text}");
    error_at(
        &CHAT.replace("\"dummy\"", "\"openai::\""),
        "functions.chat.variants.a.model",
    );
    parse(&CHAT.replace("\"dummy\"", "\"openai::gpt-4o-mini\"")).unwrap();
    parse(&CHAT.replace("\"dummy\"", "\"dummy::anything\"")).unwrap();
}

#[test]
fn functions_need_variants_and_valid_names() {
    error_at("[functions.f]\ntype = \"chat\"", "functions.f.variants");
    error_at(
        &CHAT.replace("functions.chat", "functions.\"tensorzero::x\""),
        "functions.tensorzero::x",
    );
}

#[test]
fn tools_must_exist_and_tool_choice_must_fit() {
    error_at(
        &CHAT.replace("type = \"chat\"", "type = \"chat\"\ntools = [\"nope\"]"),
        "functions.chat.tools[0]",
    );
    error_at(
        &CHAT.replace(
            "type = \"chat\"",
            "type = \"chat\"\ntools = [\"get_weather\", \"get_weather\"]",
        ),
        "functions.chat.tools[1]",
    );
    error_at(
        &CHAT.replace(
            "type = \"chat\"",
            "type = \"chat\"\ntools = [\"get_weather\"]\ntool_choice = { specific = \"other\" }",
        ),
        "functions.chat.tool_choice.specific",
    );
    error_at(
        &CHAT.replace("type = \"chat\"", "type = \"chat\"\ntool_choice = \"required\""),
        "functions.chat.tool_choice",
    );
    let json = CHAT.replace("type = \"chat\"", "type = \"json\"");
    error_at(
        &json.replace("type = \"json\"", "type = \"json\"\ntools = [\"get_weather\"]"),
        "functions.chat.tools",
    );
    error_at(
        &json.replace("type = \"json\"", "type = \"json\"\nparallel_tool_calls = true"),
        "functions.chat.parallel_tool_calls",
    );
    let config = parse(&CHAT.replace(
        "type = \"chat\"",
        "type = \"chat\"\ntools = [\"get_weather\"]\ntool_choice = { specific = \"get_weather\" }",
    ))
    .unwrap();
    assert_eq!(
        config.functions["chat"].tool_choice,
        Some(functions::ToolChoice::Specific("get_weather".into()))
    );
}

#[test]
fn json_mode_and_output_schema_belong_to_json_functions() {
    error_at(
        &format!("{CHAT}json_mode = \"on\""),
        "functions.chat.variants.a.json_mode",
    );
    error_at(
        &CHAT.replace("type = \"chat\"", "type = \"chat\"\noutput_schema = \"o.json\""),
        "functions.chat.output_schema",
    );
    let json = CHAT.replace("type = \"chat\"", "type = \"json\"");
    parse(&format!("{json}json_mode = \"on\"")).unwrap();
}

#[test]
fn schemas_need_templates_in_every_variant_and_no_duplicates() {
    let with_schema = CHAT.replace("type = \"chat\"", "type = \"chat\"\nuser_schema = \"u.json\"");
    error_at(&with_schema, "functions.chat.variants.a.templates.user");
    parse(&format!("{with_schema}user_template = \"u.minijinja\"")).unwrap();
    parse(&format!("{with_schema}templates.user.path = \"u.minijinja\"")).unwrap();
    error_at(
        &with_schema.replace(
            "user_schema = \"u.json\"",
            "user_schema = \"u.json\"\nschemas.user.path = \"v.json\"",
        ),
        "functions.chat.schemas.user",
    );
    error_at(
        &format!("{CHAT}system_template = \"a\"\ntemplates.system.path = \"b\""),
        "functions.chat.variants.a.templates.system",
    );
    error_at(
        &format!("{CHAT}system_template = \" \""),
        "functions.chat.variants.a.system_template",
    );
}

#[test]
fn parameters_are_range_checked() {
    for (line, key) in [
        ("temperature = 3.0", "temperature"),
        ("top_p = 1.5", "top_p"),
        ("presence_penalty = -3.0", "presence_penalty"),
        ("frequency_penalty = 2.5", "frequency_penalty"),
        ("max_tokens = 0", "max_tokens"),
        ("stop_sequences = [\"\"]", "stop_sequences"),
        (
            "retries = { num_retries = 1, max_delay_s = -1.0 }",
            "retries.max_delay_s",
        ),
        (
            "timeouts = { streaming = { ttft_ms = 0 } }",
            "timeouts.streaming.ttft_ms",
        ),
        ("extra_body = [{ pointer = \"a\", value = 1 }]", "extra_body[0].pointer"),
        ("extra_body = [{ pointer = \"/a\" }]", "extra_body[0]"),
        (
            "extra_body = [{ pointer = \"/a\", value = 1, delete = true }]",
            "extra_body[0]",
        ),
        (
            "extra_headers = [{ name = \"bad header\", value = \"1\" }]",
            "extra_headers[0].name",
        ),
        (
            "extra_headers = [{ name = \"x\", value = \"a\\nb\" }]",
            "extra_headers[0].value",
        ),
        ("extra_headers = [{ name = \"x\", delete = false }]", "extra_headers[0]"),
        ("weight = -1.0", "weight"),
    ] {
        error_at(&format!("{CHAT}{line}"), &format!("functions.chat.variants.a.{key}"));
    }
}

#[test]
fn experimentation_is_checked() {
    let two = format!("{CHAT}\n[functions.chat.variants.b]\ntype = \"chat_completion\"\nmodel = \"dummy\"\n");
    let with = |body: &str| format!("{two}\n[functions.chat.experimentation]\ntype = \"static\"\n{body}");
    parse(&with("candidate_variants = [\"a\"]\nfallback_variants = [\"b\"]")).unwrap();
    parse(&with("candidate_variants = { a = 2.0, b = 0.0 }")).unwrap();
    error_at(
        &with("candidate_variants = [\"c\"]"),
        "functions.chat.experimentation.candidate_variants[0]",
    );
    error_at(
        &with("candidate_variants = { c = 1.0 }"),
        "functions.chat.experimentation.candidate_variants.c",
    );
    error_at(
        &with("candidate_variants = { a = -1.0 }"),
        "functions.chat.experimentation.candidate_variants.a",
    );
    error_at(
        &with("candidate_variants = { a = 0.0 }"),
        "functions.chat.experimentation.candidate_variants",
    );
    error_at(
        &with("candidate_variants = [\"a\"]\nfallback_variants = [\"a\"]"),
        "functions.chat.experimentation.fallback_variants[0]",
    );
    error_at(&with("fallback_variants = []"), "functions.chat.experimentation");
    error_at(&with("type2 = 1"), "functions.chat.experimentation");
    let weighted = two.replace(
        "model = \"dummy\"\n\n[functions.chat.variants.b]",
        "model = \"dummy\"\nweight = 1.0\n\n[functions.chat.variants.b]",
    );
    let text = error_at(
        &format!("{weighted}\n[functions.chat.experimentation]\ntype = \"static\"\ncandidate_variants = [\"a\"]"),
        "functions.chat.variants.a.weight",
    );
    assert!(text.contains("experimentation"), "{text}");
}

#[test]
fn tools_and_metrics_are_checked() {
    error_at(
        "[tools.t]\ndescription = \"d\"\nparameters = \"p\"\nname = \"has space\"",
        "tools.t.name",
    );
    error_at("[tools.\"a b\"]\ndescription = \"d\"\nparameters = \"p\"", "tools.a b");
    error_at(
        "[tools.t]\ndescription = \"d\"\nparameters = \"\"",
        "tools.t.parameters",
    );
    error_at("[tools.t]\nparameters = \"p\"", "tools.t");
    error_at(
        "[metrics.comment]\ntype = \"float\"\nlevel = \"episode\"\noptimize = \"max\"",
        "metrics.comment",
    );
    error_at("[metrics.m]\ntype = \"float\"\nlevel = \"episode\"", "metrics.m");
}

#[test]
fn shorthand_lookup_prefers_configured_models() {
    let config = parse(
        r#"
[models."openai::gpt-4o-mini"]
routing = ["d"]
[models."openai::gpt-4o-mini".providers.d]
type = "dummy"
"#,
    )
    .unwrap();
    let configured = config.resolve_model("openai::gpt-4o-mini").unwrap();
    assert!(matches!(configured.providers["d"], ProviderConfig::Dummy(_)));
    let shorthand = config.resolve_model("openai::gpt-4.1").unwrap();
    assert_eq!(shorthand.routing, vec!["openai"]);
    match &shorthand.providers["openai"] {
        ProviderConfig::Openai(p) => {
            assert_eq!(p.model_name, "gpt-4.1");
            assert_eq!(p.api_base, "https://api.openai.com/v1");
        }
        other => panic!("unexpected {other:?}"),
    }
    let dummy = config.resolve_model("dummy::echo").unwrap();
    dummy.validate("dummy::echo").unwrap();
    assert_eq!(
        config.resolve_model("nope"),
        Err(ModelLookupError::UnknownModel("nope".into()))
    );
    let long = format!("{}::m", "x".repeat(500));
    let err = config.resolve_model(&long).unwrap_err();
    assert!(matches!(err, ModelLookupError::UnknownShorthandProvider(_)));
    assert!(
        err.to_string().len() < 200,
        "client text must be quoted through excerpt"
    );
}
