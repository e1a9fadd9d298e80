//! A transport that records bodies and answers canned bytes (streams split as told).

use crate::config::LmiSchema;
use crate::model::{ContentBlock, ExtraHeaderEntry, Message, ModelRequest, Role};
use crate::ports::lmi_transport::{LmiByteStream, LmiTransport};
use crate::providers::lmi::provider::BodySettings;
use crate::providers::lmi::LmiProvider;
use crate::providers::{CallContext, ProviderError};
use async_trait::async_trait;
use bytes::Bytes;
use futures::StreamExt;
use serde_json::Value;
use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

#[derive(Debug, Default)]
pub struct FakeTransport {
    /// The whole answer, or the stream's pieces.
    pub answer: Vec<Bytes>,
    pub sent: Mutex<Vec<Value>>,
}

impl FakeTransport {
    pub fn answering(answer: &str) -> Arc<Self> {
        Arc::new(Self {
            answer: vec![Bytes::from(answer.to_owned())],
            ..Self::default()
        })
    }

    pub fn streaming(pieces: &[&str]) -> Arc<Self> {
        Arc::new(Self {
            answer: pieces.iter().map(|p| Bytes::from((*p).to_owned())).collect(),
            ..Self::default()
        })
    }

    pub fn last_body(&self) -> Value {
        self.sent.lock().unwrap().last().cloned().unwrap()
    }

    fn record(&self, body: &Bytes) {
        self.sent.lock().unwrap().push(serde_json::from_slice(body).unwrap());
    }
}

#[async_trait]
impl LmiTransport for FakeTransport {
    async fn invoke(
        &self,
        body: Bytes,
        _headers: &[ExtraHeaderEntry],
        _ctx: CallContext<'_>,
    ) -> Result<Bytes, ProviderError> {
        self.record(&body);
        Ok(self.answer.concat().into())
    }

    async fn invoke_stream(
        &self,
        body: Bytes,
        _headers: &[ExtraHeaderEntry],
        _ctx: CallContext<'_>,
    ) -> Result<LmiByteStream, ProviderError> {
        self.record(&body);
        Ok(futures::stream::iter(self.answer.clone().into_iter().map(Ok)).boxed())
    }
}

pub fn provider(schema: LmiSchema, transport: Arc<FakeTransport>) -> LmiProvider {
    LmiProvider::with_transport(
        "lmi",
        schema,
        None,
        Duration::from_secs(5),
        BodySettings::default(),
        transport,
    )
    .unwrap()
}

pub fn user(text: &str) -> ModelRequest {
    ModelRequest {
        model: "m".into(),
        messages: vec![Message::new(Role::User, vec![ContentBlock::text_block(text)])],
        ..ModelRequest::default()
    }
}

pub fn no_credentials() -> &'static HashMap<String, String> {
    static EMPTY: std::sync::OnceLock<HashMap<String, String>> = std::sync::OnceLock::new();
    EMPTY.get_or_init(HashMap::new)
}

pub fn ctx() -> CallContext<'static> {
    CallContext {
        credentials: no_credentials(),
    }
}
