//! Routing: a model's providers tried in `routing` order, each with retries, then fallback.

use super::dummy::DummyProvider;
use super::openai::OpenAiProvider;
use super::retry::{RetryDecision, RetryPolicy};
use super::synthetic_stream::stream_from_response;
use super::{
    choices, CallContext, ChatProvider, ChoiceSupport, ChunkStream, Embeddings, ProviderError, ProviderHandle,
};
use crate::config::{Config, ProviderConfig};
use crate::model::{ModelRequest, ModelResponse};
use crate::openai::embeddings::EmbeddingRequest;
use futures::future::BoxFuture;
use futures::FutureExt;
use std::collections::BTreeMap;
use std::sync::Arc;

/// A model and its providers in fallback order.
#[derive(Debug, Clone)]
pub struct RoutedModel {
    pub name: String,
    pub providers: Vec<ProviderHandle>,
}

/// One provider's final failure for a request.
#[derive(Debug, Clone, PartialEq)]
pub struct ProviderFailure {
    pub provider: String,
    pub attempts: u32,
    pub error: ProviderError,
}

/// Why routing produced no answer.
#[derive(Debug, Clone, PartialEq)]
pub enum RoutingError {
    ModelNotFound(String),
    /// No provider of the model has the capability (e.g. embeddings).
    Unsupported {
        model: String,
        capability: &'static str,
    },
    /// Every provider failed, after its retries.
    AllFailed {
        model: String,
        failures: Vec<ProviderFailure>,
    },
}

/// Every configured model, ready to call.
#[derive(Debug, Clone)]
pub struct ModelRouter {
    models: BTreeMap<String, RoutedModel>,
    policy: RetryPolicy,
}

impl ModelRouter {
    pub fn new(models: Vec<RoutedModel>, policy: RetryPolicy) -> Self {
        Self {
            models: models.into_iter().map(|m| (m.name.clone(), m)).collect(),
            policy,
        }
    }

    /// Build every provider of every model in the (validated) configuration.
    pub fn from_config(config: &Config) -> Result<Self, String> {
        let mut models = Vec::new();
        for (name, model) in &config.models {
            let mut providers = Vec::new();
            for provider_name in &model.routing {
                let Some(provider) = model.providers.get(provider_name) else {
                    return Err(format!(
                        "models.{name}.routing names unknown provider `{provider_name}`"
                    ));
                };
                providers.push(match provider {
                    ProviderConfig::Openai(c) => OpenAiProvider::new(provider_name.clone(), c.clone())
                        .map_err(|e| format!("models.{name}.providers.{provider_name}: {e}"))?
                        .handle(),
                    ProviderConfig::Dummy(c) => DummyProvider::new(provider_name.clone(), c.clone()).handle(),
                });
            }
            models.push(RoutedModel {
                name: name.clone(),
                providers,
            });
        }
        Ok(Self::new(models, RetryPolicy::from(&config.gateway.retries)))
    }

    pub fn model_names(&self) -> impl Iterator<Item = &str> {
        self.models.keys().map(String::as_str)
    }

    pub fn contains(&self, model: &str) -> bool {
        self.models.contains_key(model)
    }

    fn model(&self, name: &str) -> Result<&RoutedModel, RoutingError> {
        self.models
            .get(name)
            .ok_or_else(|| RoutingError::ModelNotFound(name.to_owned()))
    }

    /// Non-streamed chat; `n` choices from one call, or from `n` calls to a provider that
    /// answers one choice per call.
    pub async fn chat(&self, request: &ModelRequest, ctx: CallContext<'_>) -> Result<ModelResponse, RoutingError> {
        let model = self.model(&request.model)?;
        self.with_fallback(model, "chat completions", |provider| {
            Some(complete(provider.chat.clone()?, provider.choices, request, ctx))
        })
        .await
    }

    /// Streamed chat. Fallback happens until a provider starts streaming; providers without
    /// native streaming are streamed from their complete answer. With `n > 1` every chunk's
    /// choice carries its `index`.
    pub async fn chat_stream(&self, request: &ModelRequest, ctx: CallContext<'_>) -> Result<ChunkStream, RoutingError> {
        let model = self.model(&request.model)?;
        let n = request.choice_count();
        self.with_fallback(model, "chat completions", |provider| {
            if let Some(streaming) = provider.chat_stream.clone() {
                if provider.choices.needs_one_call_per_choice(n) {
                    return Some(choices::stream_n_times(streaming, request, ctx, n).boxed());
                }
                return Some(async move { streaming.chat_stream(request, ctx).await }.boxed());
            }
            let completion = complete(provider.chat.clone()?, provider.choices, request, ctx);
            Some(async move { Ok(stream_from_response(&completion.await?, true)) }.boxed())
        })
        .await
    }

    pub async fn embed(&self, request: &EmbeddingRequest, ctx: CallContext<'_>) -> Result<Embeddings, RoutingError> {
        let model = self.model(&request.model)?;
        self.with_fallback(model, "embeddings", |provider| {
            let embeddings = provider.embeddings.clone()?;
            Some(async move { embeddings.embed(request, ctx).await }.boxed())
        })
        .await
    }

    async fn with_fallback<'a, T, F>(
        &self,
        model: &RoutedModel,
        capability: &'static str,
        mut call: F,
    ) -> Result<T, RoutingError>
    where
        F: FnMut(&ProviderHandle) -> Option<BoxFuture<'a, Result<T, ProviderError>>>,
    {
        let mut failures = Vec::new();
        let mut capable = false;
        for provider in &model.providers {
            let mut attempt: u32 = 0;
            while let Some(future) = call(provider) {
                capable = true;
                let error = match future.await {
                    Ok(value) => return Ok(value),
                    Err(error) => error,
                };
                let decision = self
                    .policy
                    .decide(attempt, error.is_retryable(), error.retry_after(), rand::random());
                tracing::warn!(model = %model.name, provider = %provider.name, attempt, error = %error, ?decision, "provider call failed");
                attempt += 1;
                match decision {
                    RetryDecision::RetryAfter(wait) => tokio::time::sleep(wait).await,
                    RetryDecision::GiveUp => {
                        failures.push(ProviderFailure {
                            provider: provider.name.clone(),
                            attempts: attempt,
                            error,
                        });
                        break;
                    }
                }
            }
        }
        if !capable {
            return Err(RoutingError::Unsupported {
                model: model.name.clone(),
                capability,
            });
        }
        Err(RoutingError::AllFailed {
            model: model.name.clone(),
            failures,
        })
    }
}

/// One complete answer with every requested choice.
fn complete<'a>(
    chat: Arc<dyn ChatProvider>,
    support: ChoiceSupport,
    request: &'a ModelRequest,
    ctx: CallContext<'a>,
) -> BoxFuture<'a, Result<ModelResponse, ProviderError>> {
    let n = request.choice_count();
    if support.needs_one_call_per_choice(n) {
        return choices::chat_n_times(chat, request, ctx, n).boxed();
    }
    async move { chat.chat(request, ctx).await }.boxed()
}

#[cfg(test)]
mod tests;
