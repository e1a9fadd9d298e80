use super::*;

const VALID: &str = r#"
[gateway.retries]
max_retries = 1

[models.chat]
routing = ["primary", "backup"]

[models.chat.providers.primary]
type = "openai"
model_name = "gpt-4o-mini"
api_key_location = "dynamic::customer_key"
extra_headers = { "x-team" = "ml" }

[models.chat.providers.backup]
type = "dummy"
latency_ms = 5
"#;

fn expect_error(text: &str) -> String {
    match Config::from_toml(text) {
        Ok(_) => panic!("config should be rejected:\n{text}"),
        Err(err) => err.to_string(),
    }
}

#[test]
fn parses_a_valid_config() {
    let config = Config::from_toml(VALID).unwrap();
    assert_eq!(config.gateway.retries.max_retries, 1);
    let model = &config.models["chat"];
    assert_eq!(model.routing, vec!["primary", "backup"]);
    match &model.providers["primary"] {
        ProviderConfig::Openai(p) => {
            assert_eq!(p.api_key_location, CredentialLocation::Dynamic("customer_key".into()));
            assert_eq!(p.api_base, "https://api.openai.com/v1");
        }
        other => panic!("unexpected provider {other:?}"),
    }
}

#[test]
fn the_shipped_default_config_is_valid() {
    let text = include_str!("../../../infra/config/nimbus.toml");
    let config = Config::from_toml(text).unwrap();
    for model in ["dummy", "dummy-embedding", "dummy-error", "dummy-slow", "gpt-4o-mini"] {
        assert!(config.models.contains_key(model), "default config lacks {model}");
    }
}

#[test]
fn unknown_keys_are_named() {
    let err = expect_error("[gateway]\nretrys = 1\n");
    assert!(err.contains("retrys"), "{err}");
    let err = expect_error("[models.m]\nrouting=[\"p\"]\n[models.m.providers.p]\ntype=\"dummy\"\nlatency=3\n");
    assert!(err.contains("latency"), "{err}");
    let err = expect_error("[functionz.f]\n");
    assert!(err.contains("functionz"), "{err}");
}

#[test]
fn unknown_provider_types_are_named() {
    let err = expect_error("[models.m]\nrouting=[\"p\"]\n[models.m.providers.p]\ntype=\"nope\"\n");
    assert!(err.contains("nope"), "{err}");
}

#[test]
fn bad_references_are_named() {
    let err = expect_error("[models.m]\nrouting=[\"missing\"]\n[models.m.providers.p]\ntype=\"dummy\"\n");
    assert!(err.contains("models.m.routing[0]") && err.contains("missing"), "{err}");
    let err = expect_error(
        "[models.m]\nrouting=[\"p\"]\n[models.m.providers.p]\ntype=\"dummy\"\n[models.m.providers.q]\ntype=\"dummy\"\n",
    );
    assert!(err.contains("models.m.providers.q"), "{err}");
    let err = expect_error("[models.m]\nrouting=[]\nproviders={}\n");
    assert!(err.contains("models.m.routing"), "{err}");
}

#[test]
fn bad_values_are_named() {
    let err = expect_error(
        "[models.m]\nrouting=[\"p\"]\n[models.m.providers.p]\ntype=\"openai\"\nmodel_name=\"x\"\napi_key_location=\"vault::k\"\n",
    );
    assert!(err.contains("vault::k"), "{err}");
    let err = expect_error(
        "[models.m]\nrouting=[\"p\"]\n[models.m.providers.p]\ntype=\"openai\"\nmodel_name=\"x\"\napi_base=\"ftp://x\"\n",
    );
    assert!(err.contains("models.m.providers.p.api_base"), "{err}");
    let err =
        expect_error("[models.m]\nrouting=[\"p\"]\n[models.m.providers.p]\ntype=\"dummy\"\nfail_with_status=200\n");
    assert!(err.contains("fail_with_status"), "{err}");
}

#[test]
fn credential_locations_round_trip() {
    for text in [
        "env::OPENAI_API_KEY",
        "ssm::/nimbus/openai-api-key",
        "ssm::/Prod/team_a/v1.2/key",
        "dynamic::k",
        "none",
    ] {
        assert_eq!(CredentialLocation::parse(text).unwrap().to_string(), text);
    }
    assert!(CredentialLocation::parse("env::").is_err());
    assert_eq!(
        CredentialLocation::parse("ssm::/nimbus/openai-api-key").unwrap(),
        CredentialLocation::Ssm("/nimbus/openai-api-key".into())
    );
}

/// `ssm::` names as SSM takes them, each refusal saying what is wrong and naming the field.
#[test]
fn ssm_parameter_names_are_checked_at_load() {
    let deep = format!("ssm::{}", "/a".repeat(16));
    let long = format!("ssm::/{}", "k".repeat(1011));
    let cases = [
        ("ssm::nimbus/key", "must start with `/`"),
        ("ssm::", "must start with `/`"),
        ("ssm::/", "empty segment"),
        ("ssm::/nimbus//key", "empty segment"),
        ("ssm::/nimbus/key/", "empty segment"),
        ("ssm::/nimbus/../key", "`..` segment"),
        ("ssm::/nimbus/my key", "holds ` `"),
        ("ssm::/nimbus/key*", "holds `*`"),
        ("ssm::/aws/reference/secretsmanager/x", "reserved by AWS"),
        ("ssm::/SSM-things/key", "reserved by AWS"),
        (deep.as_str(), "more than 15 levels"),
        (long.as_str(), "longer than 1011"),
    ];
    for (location, problem) in cases {
        let text = format!(
            "[models.m]\nrouting=[\"p\"]\n[models.m.providers.p]\ntype=\"openai\"\nmodel_name=\"x\"\napi_key_location=\"{location}\"\n"
        );
        let err = expect_error(&text);
        assert!(err.contains("models.m.providers.p"), "{location}: {err}");
        assert!(
            err.contains("api_key_location: invalid credential location"),
            "{location}: {err}"
        );
        assert!(err.contains(problem), "{location}: {err}");
    }
    // The same form on an LMI provider.
    let err = expect_error(
        "[models.m]\nrouting=[\"p\"]\n[models.m.providers.p]\ntype=\"lmi\"\nendpoint_url=\"http://x/invocations\"\napi_key_location=\"ssm::key\"\n",
    );
    assert!(
        err.contains("api_key_location: invalid credential location `ssm::key`"),
        "{err}"
    );
}

/// A deployed function may read parameters under its prefix only: one outside is named at start-up.
#[test]
fn key_parameters_outside_the_stacks_prefix_are_refused_naming_the_field() {
    let config = Config::from_toml(
        r#"
[models.m]
routing = ["a", "b", "c", "d"]
[models.m.providers.a]
type = "openai"
model_name = "x"
api_key_location = "ssm::/nimbus/openai-api-key"
[models.m.providers.b]
type = "lmi"
endpoint_url = "http://lmi.internal/invocations"
api_key_location = "ssm::/other/lmi-key"
[models.m.providers.c]
type = "openai"
model_name = "x"
api_key_location = "env::OPENAI_API_KEY"
[models.m.providers.d]
type = "dummy"
"#,
    )
    .unwrap();
    assert_eq!(
        config.key_parameters(),
        vec![
            (
                "models.m.providers.a.api_key_location".to_owned(),
                "/nimbus/openai-api-key"
            ),
            ("models.m.providers.b.api_key_location".to_owned(), "/other/lmi-key"),
        ]
    );
    let err = config.check_key_parameter_prefix("/nimbus/").unwrap_err().to_string();
    assert!(err.contains("models.m.providers.b.api_key_location"), "{err}");
    assert!(err.contains("`/other/lmi-key` is outside `/nimbus/`"), "{err}");
    assert!(config.check_key_parameter_prefix("/").is_ok());
}

fn header(name: &str, value: Option<&str>) -> ExtraHeaderEntry {
    ExtraHeaderEntry {
        name: name.into(),
        value: value.map(str::to_owned),
        delete: value.is_none().then_some(true),
    }
}

/// `extra_headers` as Nimbus's table or TensorZero's array, and `extra_body`, on both provider
/// types (a config written for TensorZero loads with dummy providers too).
#[test]
fn provider_extras_parse_in_both_header_forms() {
    let config = Config::from_toml(
        r#"
[models.m]
routing = ["table", "array", "dummy"]

[models.m.providers.table]
type = "openai"
model_name = "x"
extra_headers = { "x-b" = "2", "x-a" = "1" }

[models.m.providers.array]
type = "openai"
model_name = "x"
extra_body = [{ pointer = "/a/b", value = { c = 1 } }, { pointer = "/gone", delete = true }]
extra_headers = [{ name = "x-a", value = "1" }, { name = "x-b", delete = true }]

[models.m.providers.dummy]
type = "dummy"
extra_body = [{ pointer = "/a", value = 1 }]
extra_headers = [{ name = "x-a", value = "1" }]
"#,
    )
    .unwrap();
    let providers = &config.models["m"].providers;
    let ProviderConfig::Openai(table) = &providers["table"] else {
        panic!("{providers:?}")
    };
    assert_eq!(
        table.extra_headers,
        vec![header("x-a", Some("1")), header("x-b", Some("2"))]
    );
    assert!(table.extra_body.is_empty());
    let ProviderConfig::Openai(array) = &providers["array"] else {
        panic!("{providers:?}")
    };
    assert_eq!(array.extra_headers, vec![header("x-a", Some("1")), header("x-b", None)]);
    assert_eq!(array.extra_body[0].value, Some(serde_json::json!({"c": 1})));
    assert_eq!(array.extra_body[1].delete, Some(true));
    let ProviderConfig::Dummy(dummy) = &providers["dummy"] else {
        panic!("{providers:?}")
    };
    assert_eq!(dummy.extra_body.len(), 1);
    assert_eq!(dummy.extra_headers, vec![header("x-a", Some("1"))]);
}

#[test]
fn bad_provider_extras_are_named() {
    let provider = |extra: &str| {
        format!("[models.m]\nrouting=[\"p\"]\n[models.m.providers.p]\ntype=\"openai\"\nmodel_name=\"x\"\n{extra}\n")
    };
    for (extra, key) in [
        (
            "extra_headers = { \"bad name\" = \"1\" }",
            "models.m.providers.p.extra_headers[0].name",
        ),
        (
            "extra_headers = [{ name = \"x\", value = \"a\\nb\" }]",
            "models.m.providers.p.extra_headers[0].value",
        ),
        (
            "extra_headers = [{ name = \"x\", delete = false }]",
            "models.m.providers.p.extra_headers[0]",
        ),
        (
            "extra_headers = [{ name = \"x\", valu = \"1\" }]",
            "extra_headers[0]: unknown field `valu`",
        ),
        ("extra_headers = \"x-a: 1\"", "expected `extra_headers` as a table"),
        ("extra_headers = { x = 1 }", "extra_headers.x: invalid type"),
        ("extra_body = { a = 1 }", "expected `extra_body` as an array"),
        (
            "extra_body = [{ pointer = \"a\", value = 1 }]",
            "models.m.providers.p.extra_body[0].pointer",
        ),
        (
            "extra_body = [{ pointer = \"/a\" }]",
            "models.m.providers.p.extra_body[0]",
        ),
    ] {
        let err = expect_error(&provider(extra));
        assert!(err.contains(key), "{extra}: expected `{key}` in: {err}");
        assert!(err.contains("models.m.providers.p"), "{err}");
    }
    let dummy = "[models.m]\nrouting=[\"p\"]\n[models.m.providers.p]\ntype=\"dummy\"\nextra_body=[{ pointer = \"x\", value = 1 }]\n";
    assert!(expect_error(dummy).contains("models.m.providers.p.extra_body[0].pointer"));
}

#[test]
fn only_openai_providers_take_a_batch_mode() {
    let openai = |batch: &str| {
        format!("[models.m]\nrouting=[\"p\"]\n[models.m.providers.p]\ntype=\"openai\"\nmodel_name=\"x\"\n{batch}")
    };
    let batch_mode = |text: &str| match &Config::from_toml(text).unwrap().models["m"].providers["p"] {
        ProviderConfig::Openai(p) => p.batch,
        other => panic!("unexpected provider {other:?}"),
    };
    assert_eq!(batch_mode(&openai("")), BatchMode::Workers);
    assert_eq!(batch_mode(&openai("batch = \"workers\"\n")), BatchMode::Workers);
    assert_eq!(batch_mode(&openai("batch = \"native\"\n")), BatchMode::Native);
    let err = expect_error(&openai("batch = \"upstream\"\n"));
    assert!(
        err.contains("unknown variant `upstream`") && err.contains("native"),
        "{err}"
    );
    let err = expect_error("[models.m]\nrouting=[\"p\"]\n[models.m.providers.p]\ntype=\"dummy\"\nbatch=\"native\"\n");
    assert!(err.contains("unknown field `batch`"), "{err}");
}
