//! A moto server for the test run: started on a free loopback port, stopped on drop.

use anyhow::{bail, Context};
use std::net::TcpListener;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

pub struct MotoServer {
    child: Child,
    pub endpoint: String,
}

impl MotoServer {
    /// Start `moto_server` (from `NIMBUS_MOTO_SERVER`, else `PATH`) and wait until it answers.
    pub fn start() -> anyhow::Result<Self> {
        let program = std::env::var("NIMBUS_MOTO_SERVER").unwrap_or_else(|_| "moto_server".to_owned());
        let port = TcpListener::bind("127.0.0.1:0")?.local_addr()?.port();
        let child = Command::new(&program)
            .args(["-H", "127.0.0.1", "-p", &port.to_string()])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .with_context(|| format!("starting {program}: install the pinned test tools with `make test-deps`"))?;
        let server = Self {
            child,
            endpoint: format!("http://127.0.0.1:{port}"),
        };
        let deadline = Instant::now() + Duration::from_secs(30);
        while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
            if Instant::now() > deadline {
                bail!("moto server did not start on port {port}");
            }
            std::thread::sleep(Duration::from_millis(100));
        }
        Ok(server)
    }

    /// SDK configuration pointing every service at this server, with dummy credentials.
    pub async fn sdk_config(&self) -> aws_config::SdkConfig {
        aws_config::defaults(aws_config::BehaviorVersion::latest())
            .region(aws_config::Region::new("us-east-1"))
            .endpoint_url(&self.endpoint)
            .http_client(nimbus_shared::adapters::aws::https_client())
            .credentials_provider(aws_sdk_s3::config::Credentials::new(
                "testing", "testing", None, None, "moto",
            ))
            .load()
            .await
    }
}

impl Drop for MotoServer {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Create the table exactly as template.yaml declares it.
pub async fn create_state_table(config: &aws_config::SdkConfig, table: &str) -> anyhow::Result<()> {
    use aws_sdk_dynamodb::types::{
        AttributeDefinition, BillingMode, GlobalSecondaryIndex, KeySchemaElement, KeyType, Projection, ProjectionType,
        ScalarAttributeType,
    };
    let client = aws_sdk_dynamodb::Client::new(config);
    let attribute = |name: &str| {
        AttributeDefinition::builder()
            .attribute_name(name)
            .attribute_type(ScalarAttributeType::S)
            .build()
    };
    let key = |name: &str, kind: KeyType| KeySchemaElement::builder().attribute_name(name).key_type(kind).build();
    client
        .create_table()
        .table_name(table)
        .billing_mode(BillingMode::PayPerRequest)
        .attribute_definitions(attribute("pk")?)
        .attribute_definitions(attribute("owner_key")?)
        .attribute_definitions(attribute("sort_key")?)
        .key_schema(key("pk", KeyType::Hash)?)
        .global_secondary_indexes(
            GlobalSecondaryIndex::builder()
                .index_name("by_owner")
                .key_schema(key("owner_key", KeyType::Hash)?)
                .key_schema(key("sort_key", KeyType::Range)?)
                .projection(
                    Projection::builder()
                        .projection_type(ProjectionType::Include)
                        .set_non_key_attributes(Some(
                            nimbus_shared::adapters::aws::OWNER_INDEX_ATTRIBUTES
                                .iter()
                                .map(|name| (*name).to_owned())
                                .collect(),
                        ))
                        .build(),
                )
                .build()?,
        )
        .send()
        .await?;
    Ok(())
}

pub async fn create_bucket(config: &aws_config::SdkConfig, bucket: &str) -> anyhow::Result<()> {
    let client =
        aws_sdk_s3::Client::from_conf(aws_sdk_s3::config::Builder::from(config).force_path_style(true).build());
    client.create_bucket().bucket(bucket).send().await?;
    Ok(())
}

/// A standard queue; returns its URL.
pub async fn create_queue(config: &aws_config::SdkConfig, name: &str) -> anyhow::Result<String> {
    let client = aws_sdk_sqs::Client::new(config);
    let output = client.create_queue().queue_name(name).send().await?;
    output.queue_url().map(str::to_owned).context("no queue url")
}

/// A scheduled rule as the poller's every-minute one (enabled, as deployed); returns its name.
pub async fn create_schedule_rule(config: &aws_config::SdkConfig, name: &str) -> anyhow::Result<String> {
    let client = aws_sdk_eventbridge::Client::new(config);
    client
        .put_rule()
        .name(name)
        .schedule_expression("rate(1 minute)")
        .state(aws_sdk_eventbridge::types::RuleState::Enabled)
        .send()
        .await?;
    Ok(name.to_owned())
}

/// Whether the rule named `name` is enabled.
pub async fn rule_enabled(config: &aws_config::SdkConfig, name: &str) -> anyhow::Result<bool> {
    let client = aws_sdk_eventbridge::Client::new(config);
    let rule = client.describe_rule().name(name).send().await?;
    Ok(rule.state() == Some(&aws_sdk_eventbridge::types::RuleState::Enabled))
}

/// A symmetric encryption key, as template.yaml declares the sealing key; returns its id.
pub async fn create_sealing_key(config: &aws_config::SdkConfig) -> anyhow::Result<String> {
    let client = aws_sdk_kms::Client::new(config);
    let output = client.create_key().description("nimbus sealing key").send().await?;
    output
        .key_metadata()
        .map(|metadata| metadata.key_id().to_owned())
        .context("no key metadata")
}
