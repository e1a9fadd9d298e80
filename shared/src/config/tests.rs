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
    for text in ["env::OPENAI_API_KEY", "dynamic::k", "none"] {
        assert_eq!(CredentialLocation::parse(text).unwrap().to_string(), text);
    }
    assert!(CredentialLocation::parse("env::").is_err());
}
