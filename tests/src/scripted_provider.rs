//! A scripted chat model for the batch tests: it answers `echo:<content>`, fails contents starting
//! with `fail-`, counts its calls per content, and can answer repeated calls differently.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use async_trait::async_trait;
use nimbus_shared::model::{ModelRequest, ModelResponse};
use nimbus_shared::openai::chat::ChatCompletion;
use nimbus_shared::openai::from_model::completion_to_model;
use nimbus_shared::providers::{CallContext, ChatProvider, ProviderError, ProviderHandle};
use serde_json::json;
use std::collections::HashMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// A chat model that answers `echo:<content>` after `latency`, fails (HTTP 500) for contents
/// starting with `fail-`, and records every call by the content of the first message.
#[derive(Debug)]
pub struct ScriptedProvider {
    latency: Duration,
    calls: Mutex<HashMap<String, u32>>,
    total_calls: AtomicUsize,
    in_flight: AtomicUsize,
    max_in_flight: AtomicUsize,
    on_repeat: Mutex<OnRepeat>,
}

/// How the scripted provider answers a content it was already called with.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum OnRepeat {
    /// As the first time.
    #[default]
    Same,
    /// With one more completion token per earlier call (a rerun answers differently).
    MoreTokens,
    /// With a failure (HTTP 500), whatever the content.
    Fail,
}

/// Counts a call out of flight when dropped (also when the call is abandoned mid-way).
struct InFlight<'a>(&'a AtomicUsize);

impl Drop for InFlight<'_> {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::SeqCst);
    }
}

impl ScriptedProvider {
    pub fn new(latency: Duration) -> Arc<Self> {
        Arc::new(Self {
            latency,
            calls: Mutex::new(HashMap::new()),
            total_calls: AtomicUsize::new(0),
            in_flight: AtomicUsize::new(0),
            max_in_flight: AtomicUsize::new(0),
            on_repeat: Mutex::new(OnRepeat::Same),
        })
    }

    /// Answer repeated calls as `how` from now on.
    pub fn on_repeat(&self, how: OnRepeat) {
        *self.on_repeat.lock().unwrap() = how;
    }

    /// Calls made with this content (started, whether or not they finished).
    pub fn calls_for(&self, content: &str) -> u32 {
        self.calls.lock().unwrap().get(content).copied().unwrap_or(0)
    }

    pub fn calls(&self) -> HashMap<String, u32> {
        self.calls.lock().unwrap().clone()
    }

    pub fn total_calls(&self) -> usize {
        self.total_calls.load(Ordering::SeqCst)
    }

    pub fn max_in_flight(&self) -> usize {
        self.max_in_flight.load(Ordering::SeqCst)
    }

    pub fn in_flight(&self) -> usize {
        self.in_flight.load(Ordering::SeqCst)
    }

    pub fn handle(self: &Arc<Self>, name: &str) -> ProviderHandle {
        ProviderHandle::chat_only(name, Arc::clone(self) as Arc<dyn ChatProvider>)
    }
}

/// Tokens the scripted provider reports for a content: `(prompt, completion)`.
pub fn tokens_for(content: &str) -> (u64, u64) {
    (content.len() as u64, 3)
}

#[async_trait]
impl ChatProvider for ScriptedProvider {
    async fn chat(&self, request: &ModelRequest, _ctx: CallContext<'_>) -> Result<ModelResponse, ProviderError> {
        // The first message's text (instructions included).
        let content = request
            .system
            .clone()
            .or_else(|| request.messages.first().map(|m| m.text()))
            .unwrap_or_default();
        let call = {
            let mut calls = self.calls.lock().unwrap();
            let count = calls.entry(content.clone()).or_default();
            *count += 1;
            *count
        };
        let on_repeat = if call > 1 {
            *self.on_repeat.lock().unwrap()
        } else {
            OnRepeat::Same
        };
        self.total_calls.fetch_add(1, Ordering::SeqCst);
        let now = self.in_flight.fetch_add(1, Ordering::SeqCst) + 1;
        self.max_in_flight.fetch_max(now, Ordering::SeqCst);
        let _guard = InFlight(&self.in_flight);
        tokio::time::sleep(self.latency).await;
        if content.starts_with("fail-") || on_repeat == OnRepeat::Fail {
            return Err(ProviderError::Http {
                status: 500,
                message: format!("scripted failure for {content}"),
                retry_after: None,
                body: None,
            });
        }
        let (prompt, mut completion) = tokens_for(&content);
        if on_repeat == OnRepeat::MoreTokens {
            completion += u64::from(call - 1);
        }
        let answer: ChatCompletion = serde_json::from_value(json!({
            "id": "upstream",
            "choices": [{"index": 0, "message": {"role": "assistant", "content": format!("echo:{content}")},
                         "finish_reason": "stop"}],
            "usage": {"prompt_tokens": prompt, "completion_tokens": completion, "total_tokens": prompt + completion},
        }))
        .unwrap();
        Ok(completion_to_model(answer, None))
    }
}
