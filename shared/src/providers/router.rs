//! Routing: a model's providers tried in `routing` order, each with retries, then fallback.
//!
//! A model is a `[models.M]` entry or, when no entry has the name, a `provider::model` shorthand
//! (`dummy::echo`, `openai::gpt-4o-mini`) built on first use and kept (up to
//! [`SHORTHAND_CACHE_LIMIT`] of them; past that, built per call).

use super::dummy::DummyProvider;
use super::http_upstream::http_client;
use super::lmi::{sagemaker_endpoint, LmiProvider};
use super::native_batch::NativeBatchApi;
use super::openai::OpenAiProvider;
use super::retry::{RetryDecision, RetryPolicy};
use super::synthetic_stream::stream_from_response;
use super::{
    choices, CallContext, ChatProvider, ChoiceSupport, Embeddings, ModelStream, ProviderError, ProviderHandle,
};
use crate::config::{shorthand_model, Config, ModelConfig, ProviderConfig};
use crate::model::{ModelRequest, ModelResponse, RetryScope};
use crate::openai::embeddings::EmbeddingRequest;
use crate::ports::lmi_transport::SageMakerConnector;
use crate::ports::{MetricUnit, MetricsSink, NoMetrics, NoProviderSecrets, ProviderSecrets};
use futures::future::BoxFuture;
use futures::FutureExt;
use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, OnceLock, PoisonError, RwLock};
use std::time::Duration;

/// The most shorthand models kept built at once.
pub(crate) const SHORTHAND_CACHE_LIMIT: usize = 256;
/// Longer shorthand names are built per call, never kept.
const MAX_CACHED_NAME_LEN: usize = 256;

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

/// The provider whose own batch API runs a model's batch jobs.
#[derive(Clone)]
pub struct NativeBatchTarget {
    /// The provider's name in the model's `routing`.
    pub provider: String,
    pub api: Arc<dyn NativeBatchApi>,
}

impl std::fmt::Debug for NativeBatchTarget {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("NativeBatchTarget")
            .field("provider", &self.provider)
            .finish_non_exhaustive()
    }
}

/// Why a configured provider could not be built.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[error("models.{model}.providers.{provider}: {message}")]
pub struct ProviderBuildError {
    pub model: String,
    pub provider: String,
    pub message: String,
}

/// Every configured model, ready to call, and the shorthand models built so far.
#[derive(Debug)]
pub struct ModelRouter {
    models: BTreeMap<String, Arc<RoutedModel>>,
    shorthands: RwLock<HashMap<String, Arc<RoutedModel>>>,
    /// One HTTP client (and connection pool) for every `openai::` shorthand model; `None` when it
    /// could not be built (each model then builds its own, and reports why it cannot).
    shorthand_client: OnceLock<Option<reqwest::Client>>,
    policy: RetryPolicy,
    /// The policy of [`RetryScope::Inference`] requests: `policy` with TensorZero's retry count.
    inference_policy: RetryPolicy,
    /// Opens `type = "sagemaker"` providers' transports.
    sagemaker: Option<Arc<dyn SageMakerConnector>>,
    /// Reads the `ssm::` keys of providers (shorthand ones included).
    secrets: Arc<dyn ProviderSecrets>,
    /// Provider calls, retries and fallbacks are measured here.
    metrics: Arc<dyn MetricsSink>,
}

impl ModelRouter {
    /// A router retrying each provider as `policy` says; requests of TensorZero's routes
    /// ([`RetryScope::Inference`]) make one attempt per provider (see [`Self::with_inference_retries`]).
    pub fn new(models: Vec<RoutedModel>, policy: RetryPolicy) -> Self {
        Self {
            models: models.into_iter().map(|m| (m.name.clone(), Arc::new(m))).collect(),
            shorthands: RwLock::new(HashMap::new()),
            shorthand_client: OnceLock::new(),
            inference_policy: RetryPolicy {
                max_retries: 0,
                ..policy.clone()
            },
            policy,
            sagemaker: None,
            secrets: Arc::new(NoProviderSecrets),
            metrics: Arc::new(NoMetrics),
        }
    }

    /// Retry each provider `max_retries` times for TensorZero's routes.
    pub fn with_inference_retries(mut self, max_retries: u32) -> Self {
        self.inference_policy.max_retries = max_retries;
        self
    }

    /// The retry policy for `request`.
    fn policy_for(&self, request: &ModelRequest) -> &RetryPolicy {
        match request.retries {
            RetryScope::Gateway => &self.policy,
            RetryScope::Inference => &self.inference_policy,
        }
    }

    /// Measure provider calls into `metrics`.
    pub fn with_metrics(mut self, metrics: Arc<dyn MetricsSink>) -> Self {
        self.metrics = metrics;
        self
    }

    /// Build every provider of every model in the (validated) configuration; `sagemaker` opens
    /// the transports of SageMaker providers, `secrets` reads the keys kept in the parameter store.
    pub fn from_config(
        config: &Config,
        sagemaker: Arc<dyn SageMakerConnector>,
        secrets: Arc<dyn ProviderSecrets>,
    ) -> Result<Self, ProviderBuildError> {
        let mut models = Vec::new();
        for (name, model) in &config.models {
            let deps = ProviderDeps {
                shared_client: None,
                sagemaker: Some(sagemaker.as_ref()),
                secrets: &secrets,
            };
            models.push(routed_model(name, model, deps)?);
        }
        let mut router = Self::new(models, RetryPolicy::from(&config.gateway.retries))
            .with_inference_retries(config.gateway.retries.inference_max_retries);
        router.sagemaker = Some(sagemaker);
        router.secrets = secrets;
        Ok(router)
    }

    /// The configured models (shorthand models are not listed).
    #[cfg(test)]
    pub(crate) fn model_names(&self) -> impl Iterator<Item = &str> {
        self.models.keys().map(String::as_str)
    }

    /// The configured models that can be called: those with at least one provider whose key is
    /// not an unset environment variable (what `/v1/models` lists).
    pub(crate) fn callable_model_names(&self) -> impl Iterator<Item = &str> {
        self.models
            .iter()
            .filter(|(_, model)| model.providers.iter().any(|p| p.missing_env_key.is_none()))
            .map(|(name, _)| name.as_str())
    }

    /// Whether `model` is a configured model.
    pub fn contains(&self, model: &str) -> bool {
        self.models.contains_key(model)
    }

    /// Whether `model` can be routed: a configured model or a valid shorthand.
    pub fn routes(&self, model: &str) -> bool {
        crate::config::names_a_model(model, |name| self.contains(name))
    }

    /// The first provider, in routing order, of configured model `model` that runs batch jobs on
    /// its upstream's batch API (`batch = "native"`); `None` for shorthand models.
    pub fn native_batch(&self, model: &str) -> Option<NativeBatchTarget> {
        self.models.get(model)?.providers.iter().find_map(|provider| {
            Some(NativeBatchTarget {
                provider: provider.name.clone(),
                api: provider.native_batch.clone()?,
            })
        })
    }

    fn model(&self, name: &str) -> Result<Arc<RoutedModel>, RoutingError> {
        if let Some(model) = self.models.get(name) {
            return Ok(Arc::clone(model));
        }
        let cache = self.shorthands.read().unwrap_or_else(PoisonError::into_inner);
        if let Some(model) = cache.get(name) {
            return Ok(Arc::clone(model));
        }
        drop(cache);
        let config = shorthand_model(name).map_err(|_| RoutingError::ModelNotFound(name.to_owned()))?;
        let client = self.shorthand_client(&config);
        // The message leaves out the model name: it is the client's, quoted only where excerpted.
        let deps = ProviderDeps {
            shared_client: client.as_ref(),
            sagemaker: self.sagemaker.as_deref(),
            secrets: &self.secrets,
        };
        let model = routed_model(name, &config, deps).map_err(|e| RoutingError::AllFailed {
            model: name.to_owned(),
            failures: vec![ProviderFailure {
                provider: e.provider,
                attempts: 0,
                error: ProviderError::Misconfigured(e.message),
            }],
        })?;
        let model = Arc::new(model);
        if name.len() <= MAX_CACHED_NAME_LEN {
            let mut cache = self.shorthands.write().unwrap_or_else(PoisonError::into_inner);
            if let Some(kept) = cache.get(name) {
                return Ok(Arc::clone(kept));
            }
            if cache.len() < SHORTHAND_CACHE_LIMIT {
                cache.insert(name.to_owned(), Arc::clone(&model));
            }
        }
        Ok(model)
    }

    /// The HTTP client shared by `openai::` shorthand models, when `config` is one.
    fn shorthand_client(&self, config: &ModelConfig) -> Option<reqwest::Client> {
        // Every shorthand has the provider defaults, so the first one's timeout serves them all.
        let connect_timeout_ms = config.providers.values().find_map(|provider| match provider {
            ProviderConfig::Openai(c) => Some(c.connect_timeout_ms),
            ProviderConfig::Dummy(_) | ProviderConfig::Lmi(_) | ProviderConfig::Sagemaker(_) => None,
        })?;
        self.shorthand_client
            .get_or_init(|| {
                http_client(Duration::from_millis(connect_timeout_ms))
                    .inspect_err(|error| tracing::warn!(%error, "no shared HTTP client for shorthand models"))
                    .ok()
            })
            .clone()
    }

    /// How many shorthand models are kept built.
    #[cfg(test)]
    pub(crate) fn cached_shorthand_count(&self) -> usize {
        self.shorthands.read().unwrap_or_else(PoisonError::into_inner).len()
    }

    /// Non-streamed chat; `n` choices from one call, or from `n` calls to a provider that
    /// answers one choice per call. The answer names the provider that gave it.
    pub async fn chat(&self, request: &ModelRequest, ctx: CallContext<'_>) -> Result<ModelResponse, RoutingError> {
        let model = self.model(&request.model)?;
        let (provider, mut answer) = self
            .with_fallback(&model, "chat completions", self.policy_for(request), |provider| {
                Some(complete(provider.chat.clone()?, provider.choices, request, ctx))
            })
            .await?;
        self.count_tokens(
            &model,
            &provider.name,
            answer.usage.input_tokens,
            answer.usage.output_tokens,
        );
        answer.provider_name = provider.name.clone();
        answer.provider_type = provider.provider_type.to_owned();
        Ok(answer)
    }

    /// A model's name as a metric dimension: configured names only, never a client's shorthand.
    fn model_label<'m>(&self, model: &'m RoutedModel) -> &'m str {
        if self.models.contains_key(&model.name) {
            model.name.as_str()
        } else {
            "shorthand"
        }
    }

    /// Tokens a provider's answer used (`tokens` by model, provider and direction).
    fn count_tokens(&self, model: &RoutedModel, provider: &str, input: u64, output: u64) {
        token_tally::record_tokens(self.metrics.as_ref(), self.model_label(model), provider, input, output);
    }

    /// Streamed chat. Fallback happens until a provider starts streaming; providers without
    /// native streaming are streamed from their complete answer. With `n > 1` every chunk's
    /// choice carries its `index`. The stream names the provider that answers.
    pub(crate) async fn chat_stream(
        &self,
        request: &ModelRequest,
        ctx: CallContext<'_>,
    ) -> Result<ModelStream, RoutingError> {
        let model = self.model(&request.model)?;
        let n = request.choice_count();
        let (provider, mut stream) = self
            .with_fallback(&model, "chat completions", self.policy_for(request), |provider| {
                if let Some(streaming) = provider.chat_stream.clone() {
                    if provider.choices.needs_one_call_per_choice(n) {
                        return Some(choices::stream_n_times(streaming, request, ctx, n).boxed());
                    }
                    return Some(async move { streaming.chat_stream(request, ctx).await }.boxed());
                }
                let completion = complete(provider.chat.clone()?, provider.choices, request, ctx);
                Some(
                    async move {
                        let completion = completion.await?;
                        let chunks = stream_from_response(&completion, true);
                        Ok(ModelStream::new(chunks).with_raw_request(completion.raw_request))
                    }
                    .boxed(),
                )
            })
            .await?;
        let tally = token_tally::TokenTally {
            metrics: Arc::clone(&self.metrics),
            model: self.model_label(&model).to_owned(),
            provider: provider.name.clone(),
            latest: None,
        };
        stream.chunks = token_tally::counting_tokens(stream.chunks, tally);
        stream.provider_name = provider.name.clone();
        stream.provider_type = provider.provider_type.to_owned();
        Ok(stream)
    }

    pub async fn embed(&self, request: &EmbeddingRequest, ctx: CallContext<'_>) -> Result<Embeddings, RoutingError> {
        let model = self.model(&request.model)?;
        let (provider, embeddings) = self
            .with_fallback(&model, "embeddings", &self.policy, |provider| {
                let embeddings = provider.embeddings.clone()?;
                Some(async move { embeddings.embed(request, ctx).await }.boxed())
            })
            .await?;
        self.count_tokens(&model, &provider.name, embeddings.usage.prompt_tokens, 0);
        Ok(embeddings)
    }

    /// The first answer, and the provider that gave it.
    async fn with_fallback<'a, 'm, T, F>(
        &self,
        model: &'m RoutedModel,
        capability: &'static str,
        policy: &RetryPolicy,
        mut call: F,
    ) -> Result<(&'m ProviderHandle, T), RoutingError>
    where
        F: FnMut(&ProviderHandle) -> Option<BoxFuture<'a, Result<T, ProviderError>>>,
    {
        let mut failures = Vec::new();
        let mut capable = false;
        let model_label = self.model_label(model);
        for provider in &model.providers {
            let mut attempt: u32 = 0;
            while let Some(future) = call(provider) {
                capable = true;
                let started = std::time::Instant::now();
                let result = future.await;
                let outcome = match &result {
                    Ok(_) => "ok",
                    Err(error) if error.is_retryable() => "retryable_error",
                    Err(_) => "error",
                };
                let dimensions = [
                    ("model", model_label),
                    ("provider", provider.name.as_str()),
                    ("outcome", outcome),
                ];
                self.metrics
                    .record_timed("provider_calls", "provider_call_duration", started, &dimensions);
                let error = match result {
                    Ok(value) => {
                        if !failures.is_empty() {
                            let dimensions = [("model", model_label), ("provider", provider.name.as_str())];
                            self.metrics
                                .record("provider_fallbacks", MetricUnit::Count, 1.0, &dimensions);
                        }
                        return Ok((provider, value));
                    }
                    Err(error) => error,
                };
                let decision = policy.decide(attempt, error.is_retryable(), error.retry_after(), rand::random());
                tracing::warn!(model = %model.name, provider = %provider.name, attempt, error = %error, ?decision, "provider call failed");
                attempt += 1;
                match decision {
                    RetryDecision::RetryAfter(wait) => {
                        let dimensions = [("model", model_label), ("provider", provider.name.as_str())];
                        self.metrics
                            .record("provider_retries", MetricUnit::Count, 1.0, &dimensions);
                        tokio::time::sleep(wait).await;
                    }
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

/// What a model's providers are built with.
#[derive(Clone, Copy)]
struct ProviderDeps<'a> {
    /// Serves every OpenAI-compatible provider when given.
    shared_client: Option<&'a reqwest::Client>,
    sagemaker: Option<&'a dyn SageMakerConnector>,
    secrets: &'a Arc<dyn ProviderSecrets>,
}

/// Every provider of one model, in `routing` order.
fn routed_model(name: &str, model: &ModelConfig, deps: ProviderDeps<'_>) -> Result<RoutedModel, ProviderBuildError> {
    let ProviderDeps {
        shared_client,
        sagemaker,
        secrets,
    } = deps;
    let mut providers = Vec::new();
    for provider_name in &model.routing {
        let error = |message: String| ProviderBuildError {
            model: name.to_owned(),
            provider: provider_name.clone(),
            message,
        };
        let Some(provider) = model.providers.get(provider_name) else {
            return Err(error("named in `routing` but not configured".to_owned()));
        };
        let mut handle = match (provider, shared_client) {
            (ProviderConfig::Openai(c), Some(client)) => {
                OpenAiProvider::with_client(provider_name.clone(), c.clone(), client.clone(), Arc::clone(secrets))
                    .handle()
            }
            (ProviderConfig::Openai(c), None) => {
                OpenAiProvider::new(provider_name.clone(), c.clone(), Arc::clone(secrets))
                    .map_err(|e| error(e.to_string()))?
                    .handle()
            }
            (ProviderConfig::Dummy(c), _) => DummyProvider::new(provider_name.clone(), c.clone()).handle(),
            (ProviderConfig::Lmi(c), _) => LmiProvider::over_http(provider_name.clone(), c, Arc::clone(secrets))
                .map_err(|e| error(e.to_string()))?
                .handle(),
            (ProviderConfig::Sagemaker(c), _) => {
                let Some(connector) = sagemaker else {
                    return Err(error("no SageMaker connector was given to the router".to_owned()));
                };
                let transport = connector.connect(provider_name, &sagemaker_endpoint(c));
                LmiProvider::over_sagemaker(provider_name.clone(), c, transport)
                    .map_err(|e| error(e.to_string()))?
                    .handle()
            }
        };
        handle.provider_type = provider.type_name();
        providers.push(handle);
    }
    Ok(RoutedModel {
        name: name.to_owned(),
        providers,
    })
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

mod token_tally;

#[cfg(test)]
mod tests;
