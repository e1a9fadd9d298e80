//! A configuration directory read from an S3 prefix (`s3://bucket/prefix/nimbus.toml`): the TOML
//! and the templates and schemas it references, against a moto server on a free loopback port.

use bytes::Bytes;
use nimbus_integration_tests::moto::{create_bucket, MotoServer};
use nimbus_shared::adapters::aws::S3BlobStore;
use nimbus_shared::app::config_source::ConfigSource;
use nimbus_shared::ports::BlobStore;
use std::path::{Path, PathBuf};

fn config_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../infra/config")
}

/// Every file under `dir`, as paths relative to it with `/` separators.
fn files_under(dir: &Path, relative: &str, out: &mut Vec<String>) {
    for entry in std::fs::read_dir(dir.join(relative)).unwrap() {
        let entry = entry.unwrap();
        let name = entry.file_name().to_string_lossy().into_owned();
        let path = if relative.is_empty() {
            name
        } else {
            format!("{relative}/{name}")
        };
        if entry.file_type().unwrap().is_dir() {
            files_under(dir, &path, out);
        } else {
            out.push(path);
        }
    }
}

#[tokio::test]
async fn the_config_directory_loads_from_an_s3_prefix() {
    let moto = MotoServer::start().unwrap();
    let sdk_config = moto.sdk_config().await;
    create_bucket(&sdk_config, "nimbus-config").await.unwrap();
    let blobs = S3BlobStore::new(&sdk_config, "nimbus-config");
    let mut files = Vec::new();
    files_under(&config_dir(), "", &mut files);
    assert!(files.iter().any(|f| f.ends_with(".minijinja")), "{files:?}");
    for file in &files {
        let body = std::fs::read(config_dir().join(file)).unwrap();
        blobs
            .put(&format!("deploy/v1/{file}"), Bytes::from(body))
            .await
            .unwrap();
    }

    let from_s3 = ConfigSource::parse("s3://nimbus-config/deploy/v1/nimbus.toml")
        .unwrap()
        .load(&sdk_config)
        .await
        .unwrap();
    let bundled = ConfigSource::Bundled.load(&sdk_config).await.unwrap();
    assert_eq!(from_s3.config, bundled.config);
    let names: Vec<&str> = from_s3.functions.functions().map(|f| f.name.as_str()).collect();
    assert_eq!(names, ["draft_email", "extract_contact", "weather_assistant"]);
    let rendered = from_s3
        .functions
        .render(
            "draft_email",
            "casual",
            "user",
            nimbus_shared::tensorzero::TemplateInput::Arguments(&serde_json::json!({
                "recipient": "Ada", "topic": "the launch"
            })),
        )
        .unwrap();
    assert!(
        rendered.contains("Ada") && rendered.contains("the launch"),
        "{rendered}"
    );

    // A referenced file missing from the prefix stops the load, naming the key and the object.
    blobs
        .delete("deploy/v1/functions/extract_contact/document.minijinja")
        .await
        .unwrap();
    let err = ConfigSource::parse("s3://nimbus-config/deploy/v1/nimbus.toml")
        .unwrap()
        .load(&sdk_config)
        .await
        .unwrap_err()
        .to_string();
    assert!(
        err.contains("`functions.extract_contact.variants.strict.templates.document.path`"),
        "{err}"
    );
    assert!(
        err.contains("s3://nimbus-config/deploy/v1/functions/extract_contact/document.minijinja"),
        "{err}"
    );
}
