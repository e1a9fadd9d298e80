use super::*;
use crate::app::{load_config, load_local_config};
use crate::config::LocalConfigFiles;
use serde_json::json;
use std::path::Path;

const CONFIG: &str = r#"
[models.m]
routing = ["d"]
[models.m.providers.d]
type = "dummy"

[tools.lookup]
description = "Look something up"
parameters = "tools/lookup.json"
name = "lookup_v2"

[functions.greet]
type = "chat"
system_schema = "greet/system.json"
tools = ["lookup"]

[functions.greet.variants.v]
type = "chat_completion"
model = "m"
system_template = "greet/system.minijinja"
user_template = "greet/user.minijinja"
templates.farewell.path = "./greet/../greet/farewell.minijinja"

[functions.extract]
type = "json"
[functions.extract.variants.only]
type = "chat_completion"
model = "dummy::x"
[functions.extract.variants.tooly]
type = "chat_completion"
model = "m"
json_mode = "tool"
"#;

fn files(overrides: &[(&str, &str)]) -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    let mut all = vec![
        ("nimbus.toml", CONFIG),
        (
            "tools/lookup.json",
            r#"{"type":"object","properties":{"q":{"type":"string"}}}"#,
        ),
        ("greet/system.json", r#"{"type":"object","required":["name"]}"#),
        (
            "greet/system.minijinja",
            "Hello {{ name }}{% if title %}, {{ title }}{% endif %}!",
        ),
        ("greet/user.minijinja", "User said: {{ user_text }}"),
        ("greet/farewell.minijinja", "Bye {{ who | upper }}"),
    ];
    for (path, text) in overrides {
        all.retain(|(p, _)| p != path);
        all.push((path, text));
    }
    for (path, text) in all {
        let full = dir.path().join(path);
        std::fs::create_dir_all(full.parent().unwrap()).unwrap();
        std::fs::write(full, text).unwrap();
    }
    dir
}

async fn load(dir: &tempfile::TempDir) -> Result<crate::app::LoadedConfig, ConfigError> {
    load_config(&LocalConfigFiles::new(dir.path()), "nimbus.toml").await
}

async fn load_error(overrides: &[(&str, &str)], key: &str) -> String {
    let dir = files(overrides);
    let err = load(&dir).await.unwrap_err().to_string();
    assert!(err.contains(&format!("`{key}`")), "expected `{key}` in: {err}");
    err
}

#[tokio::test]
async fn compiles_functions_tools_and_templates() {
    let dir = files(&[]);
    let loaded = load(&dir).await.unwrap();
    let set = &loaded.functions;
    let greet = set.function("greet").unwrap();
    assert!(greet
        .schema("system")
        .unwrap()
        .validate(&json!({"name": "Ada"}))
        .is_ok());
    assert!(greet.schema("system").unwrap().validate(&json!({})).is_err());
    assert!(greet.output_schema().is_none());
    assert_eq!(greet.variant("v").unwrap().json_mode, None);
    let tool = set.tool("lookup").unwrap();
    assert_eq!(tool.config.provider_name(&tool.name), "lookup_v2");
    assert!(tool.parameters.validate(&json!({"q": 1})).is_err());
    let extract = set.function("extract").unwrap();
    assert_eq!(extract.variant("only").unwrap().json_mode, Some(JsonMode::Strict));
    assert_eq!(extract.variant("tooly").unwrap().json_mode, Some(JsonMode::Tool));
    assert!(extract
        .output_schema()
        .unwrap()
        .validate(&json!({"any": "thing"}))
        .is_ok());
    assert!(set.has_template("greet", "v", "farewell"));
    assert!(!set.has_template("extract", "only", "system"));
}

#[tokio::test]
async fn templates_render_arguments_and_legacy_text() {
    let dir = files(&[]);
    let set = load(&dir).await.unwrap().functions;
    let args = json!({"name": "Ada", "title": "PhD"});
    assert_eq!(
        set.render("greet", "v", "system", TemplateInput::Arguments(&args))
            .unwrap(),
        "Hello Ada, PhD!"
    );
    assert_eq!(
        set.render("greet", "v", "user", TemplateInput::Text("<b>hi</b>"))
            .unwrap(),
        "User said: <b>hi</b>",
        "prompts are not HTML-escaped"
    );
    let who = json!({"who": "bob"});
    assert_eq!(
        set.render("greet", "v", "farewell", TemplateInput::Arguments(&who))
            .unwrap(),
        "Bye BOB"
    );
    // A variable the input lacks is an error, not an empty string.
    let err = set
        .render("greet", "v", "farewell", TemplateInput::Arguments(&json!({})))
        .unwrap_err();
    assert!(matches!(err, TemplateError::Render { .. }), "{err}");
    assert_eq!(
        set.render("greet", "v", "system", TemplateInput::Arguments(&json!([1]))),
        Err(TemplateError::ArgumentsNotAnObject)
    );
    assert!(matches!(
        set.render("greet", "v", "nope", TemplateInput::Text("x")),
        Err(TemplateError::Missing { .. })
    ));
}

#[tokio::test]
async fn lookups_and_sampling_go_through_the_function() {
    let dir = files(&[]);
    let set = load(&dir).await.unwrap().functions;
    assert_eq!(
        set.function("nope").unwrap_err(),
        FunctionLookupError::UnknownFunction("nope".into())
    );
    let extract = set.function("extract").unwrap();
    assert!(matches!(
        extract.variant("gone"),
        Err(FunctionLookupError::UnknownVariant { .. })
    ));
    let episode = Uuid::now_v7();
    let first = extract.choose_variant(episode, &BTreeSet::new()).unwrap();
    assert_eq!(
        extract.choose_variant(episode, &BTreeSet::new()).unwrap().name,
        first.name
    );
    let failed = BTreeSet::from([first.name.clone()]);
    let second = extract.choose_variant(episode, &failed).unwrap();
    assert_ne!(second.name, first.name);
    let both = BTreeSet::from(["only".to_owned(), "tooly".to_owned()]);
    assert!(extract.choose_variant(episode, &both).is_none());
}

#[tokio::test]
async fn template_syntax_errors_name_the_key_and_line() {
    let err = load_error(
        &[("greet/farewell.minijinja", "line one\nBye {{ who ")],
        "functions.greet.variants.v.templates.farewell.path",
    )
    .await;
    assert!(err.contains("line 2"), "{err}");
    load_error(
        &[("greet/user.minijinja", "{% if %}")],
        "functions.greet.variants.v.user_template",
    )
    .await;
}

#[tokio::test]
async fn schema_errors_name_the_key() {
    let err = load_error(
        &[("greet/system.json", "{\"type\": 5}")],
        "functions.greet.system_schema",
    )
    .await;
    assert!(err.contains("not a valid JSON Schema"), "{err}");
    let err = load_error(&[("tools/lookup.json", "not json")], "tools.lookup.parameters").await;
    assert!(err.contains("not JSON"), "{err}");
}

#[tokio::test]
async fn missing_or_escaping_files_name_the_key() {
    let dir = files(&[]);
    std::fs::remove_file(dir.path().join("greet/farewell.minijinja")).unwrap();
    let err = load(&dir).await.unwrap_err().to_string();
    assert!(
        err.contains("`functions.greet.variants.v.templates.farewell.path`"),
        "{err}"
    );
    let escaping = CONFIG.replace("tools/lookup.json", "../lookup.json");
    load_error(&[("nimbus.toml", &escaping)], "tools.lookup.parameters").await;
    let absolute = CONFIG.replace("tools/lookup.json", "/etc/lookup.json");
    load_error(&[("nimbus.toml", &absolute)], "tools.lookup.parameters").await;
}

#[tokio::test]
async fn the_default_config_loads_with_every_example() {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("../infra/config/nimbus.toml");
    let loaded = load_local_config(&path).await.unwrap();
    let set = &loaded.functions;
    let email = set.function("draft_email").unwrap();
    assert_eq!(email.policy().fallbacks(), &["careful".to_owned()]);
    assert_eq!(email.policy().candidates().len(), 2);
    let system = set
        .render(
            "draft_email",
            "formal",
            "system",
            TemplateInput::Arguments(&json!({"sender_name": "Ada"})),
        )
        .unwrap();
    assert!(system.contains("Ada"), "{system}");
    let extract = set.function("extract_contact").unwrap();
    assert!(extract.schema("document").is_some());
    assert!(extract
        .output_schema()
        .unwrap()
        .validate(&json!({"name": "A", "email": null, "phone": null}))
        .is_ok());
    let weather = set.function("weather_assistant").unwrap();
    assert_eq!(weather.policy().fallbacks(), &["backup".to_owned()]);
    assert!(set.tool("get_weather").is_some());
    assert_eq!(loaded.config.metrics.len(), 2);
    // The bundled copy is the same directory.
    let bundled = load_config(&crate::config::BundledConfigFiles::default(), "nimbus.toml")
        .await
        .unwrap();
    assert_eq!(bundled.config, loaded.config);
}
