//! The router builds `type = "lmi"` and `type = "sagemaker"` models as LMI providers.

use super::fake::{ctx, user, FakeTransport};
use crate::config::Config;
use crate::model::ContentBlock;
use crate::ports::lmi_transport::{LmiTransport, SageMakerConnector, SageMakerEndpoint};
use crate::providers::router::{ModelRouter, RoutingError};
use std::sync::{Arc, Mutex};

#[derive(Debug)]
struct Connector {
    transport: Arc<FakeTransport>,
    connected: Mutex<Vec<(String, String)>>,
}

impl SageMakerConnector for Connector {
    fn connect(&self, provider: &str, endpoint: &SageMakerEndpoint) -> Arc<dyn LmiTransport> {
        self.connected
            .lock()
            .unwrap()
            .push((provider.to_owned(), endpoint.endpoint_name.clone()));
        self.transport.clone()
    }
}

const CONFIG: &str = r#"
[models.sm]
routing = ["endpoint"]
[models.sm.providers.endpoint]
type = "sagemaker"
endpoint_name = "tgi-compat-1"
schema = "tgi_compat"
chat_template = "llama3"

[models.vectors]
routing = ["container"]
[models.vectors.providers.container]
type = "lmi"
endpoint_url = "http://127.0.0.1:9/invocations"
schema = "embedding"
"#;

#[tokio::test]
async fn sagemaker_models_answer_through_the_connectors_transport() {
    let transport =
        FakeTransport::answering(r#"[{"generated_text": "Hi", "details": {"finish_reason": "eos_token"}}]"#);
    let connector = Arc::new(Connector {
        transport: transport.clone(),
        connected: Mutex::new(Vec::new()),
    });
    let config = Config::from_toml(CONFIG).unwrap();
    let router =
        ModelRouter::from_config(&config, connector.clone(), Arc::new(crate::ports::NoProviderSecrets)).unwrap();
    assert_eq!(
        *connector.connected.lock().unwrap(),
        vec![("endpoint".to_owned(), "tgi-compat-1".to_owned())]
    );
    let mut request = user("Hi");
    request.model = "sm".into();
    let answer = router.chat(&request, ctx()).await.unwrap();
    assert_eq!(answer.choices[0].content, vec![ContentBlock::text_block("Hi")]);
    assert_eq!(answer.provider_name, "endpoint");
    assert!(transport.last_body()["inputs"]
        .as_str()
        .unwrap()
        .starts_with("<|begin_of_text|>"));

    // An embedding model has no chat.
    request.model = "vectors".into();
    let err = router.chat(&request, ctx()).await.unwrap_err();
    assert!(matches!(err, RoutingError::Unsupported { .. }), "{err:?}");
}
